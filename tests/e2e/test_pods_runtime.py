"""The ``pods`` runtime against a real host: kube-apiserver, controller-manager and kwok fake nodes.

The host has no scheduler and kwok nodes run nothing, so no tenant apiserver ever
answers here: these tests check what ``ensure`` puts on the host (the host's own
validation accepted it), that the state it reports is honest, that a second
``ensure`` changes nothing, and that ``teardown`` leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import itertools
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest

from apiserver.kubeclient import paths
from apiserver.kubeclient.client import KubeClient
from certs import tenant as tenantpki
from certs.tenant import TenantPki
from hack.harness import HostCluster, create_fake_nodes, free_port, wait_until
from reconciler.runtime.base import RuntimeFailure
from reconciler.runtime.pods import OWNED_KINDS, PodsRuntime
from reconciler.runtime.pods.hostobjects import Plan
from reconciler.runtime.pods.status import UNSCHEDULABLE_GRACE

pytestmark = pytest.mark.e2e

Obj = dict[str, Any]
T = TypeVar("T")
APPLIED_KINDS = ("Secret", "Service", "StatefulSet", "Deployment")
ROOT_KINDS = (*APPLIED_KINDS, "PersistentVolumeClaim")  # the claim is made by the host's StatefulSet controller
CONTROL_PLANE_TOLERATION = {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists",
                            "effect": "NoSchedule"}
_names = itertools.count()


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostCluster]:
    cluster = HostCluster(tmp_path_factory.mktemp("pods-host"), free_port(), free_port(), free_port())
    try:
        cluster.start()
        create_fake_nodes(cluster, 3)
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def control_plane_ip(host: HostCluster) -> str:
    """The InternalIP kwok gives the fake control-plane node."""
    ips: list[str] = []

    def has_ip() -> bool:
        node = json.loads(host.kubectl("get", "node", "node-control-plane", "-o", "json").stdout)
        ips[:] = [a["address"] for a in node.get("status", {}).get("addresses", []) if a["type"] == "InternalIP"]
        return bool(ips)

    wait_until(has_ip, 60, "an InternalIP on node-control-plane", interval=0.25)
    return ips[0]


@pytest.fixture
async def client(host: HostCluster) -> AsyncIterator[KubeClient]:
    c = KubeClient.from_kubeconfig(host.admin_kubeconfig)
    yield c
    await c.close()


@pytest.fixture
async def runtime(client: KubeClient) -> AsyncIterator[PodsRuntime]:
    made = PodsRuntime(client, teardown_timeout=60)
    yield made
    await made.clients.close()  # the tenant apiservers' kept connections


@pytest.fixture
def namespace(host: HostCluster) -> str:
    name = f"tenants-{next(_names)}"
    host.kubectl("create", "namespace", name)
    return name


async def make_pki(endpoint_host: str) -> TenantPki:
    return await asyncio.to_thread(tenantpki.generate, tenantpki.apiserver_sans(endpoint_host, [], "10.96.0.1"))


def started(runtime: PodsRuntime, vc: Obj) -> None:
    """What the tenant apiserver answering does for the start order (nothing answers on this host):
    every component may run from the next pass on."""
    runtime.start_order.answered(Plan.of(vc, runtime.endpoint_host(vc)))


def virtual_cluster(namespace: str, name: str, **spec: Any) -> Obj:
    return {"apiVersion": "kosmos.io/v1alpha1", "kind": "VirtualCluster",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"}, "spec": spec}


async def objects(client: KubeClient, namespace: str, name: str, kinds: tuple[str, ...] = ROOT_KINDS) -> dict[str, Obj]:
    """Every object of ``kinds`` labelled as this VirtualCluster's, by "Kind/name"."""
    selector = f"app.kubernetes.io/managed-by=vc-apiserver,kosmos.io/virtualcluster={name}"
    found = {}
    for kind in kinds:
        listed = await client.get(paths.path(kind, namespace), labelSelector=selector)
        for obj in listed["items"]:
            found[f"{kind}/{obj['metadata']['name']}"] = obj
    return found


async def wait_for_pods(client: KubeClient, namespace: str, name: str, count: int, timeout: float = 60) -> None:
    """The host's controller-manager turns Deployments and StatefulSets into pods a moment later."""
    for _ in range(int(timeout * 4)):
        if len(await objects(client, namespace, name, ("Pod",))) >= count:
            return
        await asyncio.sleep(0.25)
    raise AssertionError(f"{count} pods of {name} never appeared")


async def _until(observe: Callable[[], Awaitable[T]], done: Callable[[T], bool], timeout: float = 60) -> T:
    """What ``observe`` returns once ``done`` holds for it (the host's scheduler and kwok act a moment later)."""
    for _ in range(int(timeout * 4)):
        if done(seen := await observe()):
            return seen
        await asyncio.sleep(0.25)
    raise AssertionError(f"never reached: last seen {seen}")


def applied_at(obj: Obj) -> str:
    """When vc-apiserver last changed the object (server-side apply records it only on a change)."""
    return next(f["time"] for f in obj["metadata"]["managedFields"] if f["manager"] == "vc-apiserver")


def secret_files(secret: Obj) -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in secret["data"].items()}


def pod_spec(obj: Obj) -> Obj:
    return obj["spec"]["template"]["spec"]


async def test_ensure_builds_the_whole_control_plane(runtime: PodsRuntime, client: KubeClient, namespace: str,
                                                    control_plane_ip: str) -> None:
    vc = virtual_cluster(namespace, "alpha", kubeInKubeConfig={
        "externalPort": 31443, "etcdStorageClass": "fast-ssd", "etcdUnitSize": "5Gi"})
    await runtime.refresh_nodes()
    assert runtime.endpoint_host(vc) == control_plane_ip
    pki = await make_pki(runtime.endpoint_host(vc))

    state = await runtime.ensure(vc, pki)

    found = await objects(client, namespace, "alpha", APPLIED_KINDS)
    assert sorted(found) == sorted([
        "Secret/alpha-etcd", "Secret/alpha-apiserver", "Secret/alpha-controller-manager", "Secret/alpha-scheduler",
        "Secret/alpha-admin", "Service/alpha-etcd", "Service/alpha-etcd-client", "Service/alpha-apiserver",
        "StatefulSet/alpha-etcd",
        "Deployment/alpha-apiserver", "Deployment/alpha-controller-manager", "Deployment/alpha-scheduler"])
    for key, obj in found.items():
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "vc-apiserver", key
        assert labels["kosmos.io/virtualcluster"] == "alpha", key
        assert labels["app.kubernetes.io/component"] in ("etcd", "apiserver", "controller-manager", "scheduler",
                                                         "admin"), key
        assert any(f["manager"] == "vc-apiserver" and f["operation"] == "Apply"
                   for f in obj["metadata"]["managedFields"]), key

    workloads = {k: v for k, v in found.items() if k.split("/")[0] in ("StatefulSet", "Deployment")}
    for key, obj in workloads.items():
        spec = pod_spec(obj)
        assert spec["nodeSelector"] == {"node-role.kubernetes.io/control-plane": ""}, key
        assert CONTROL_PLANE_TOLERATION in spec["tolerations"], key
        assert spec["automountServiceAccountToken"] is False, key
        assert obj["spec"]["template"]["metadata"]["labels"]["kosmos.io/virtualcluster"] == "alpha", key
    images = {k: pod_spec(v)["containers"][0]["image"] for k, v in workloads.items()}
    assert images == {"StatefulSet/alpha-etcd": "quay.io/coreos/etcd:v3.6.16",
                      "Deployment/alpha-apiserver": "registry.k8s.io/kube-apiserver:v1.35.4",
                      "Deployment/alpha-controller-manager": "registry.k8s.io/kube-controller-manager:v1.35.4",
                      "Deployment/alpha-scheduler": "registry.k8s.io/kube-scheduler:v1.35.4"}
    go_env = {k: {e["name"]: e["value"] for e in pod_spec(v)["containers"][0].get("env", [])
                  if e["name"] in ("GOGC", "GOMAXPROCS")} for k, v in workloads.items()}
    assert go_env == {"StatefulSet/alpha-etcd": {"GOGC": "50", "GOMAXPROCS": "1"},
                      "Deployment/alpha-apiserver": {"GOGC": "50", "GOMAXPROCS": "2"},
                      "Deployment/alpha-controller-manager": {"GOGC": "50", "GOMAXPROCS": "1"},
                      "Deployment/alpha-scheduler": {"GOGC": "50", "GOMAXPROCS": "1"}}, "the lean tuning's Go runtime"
    apiserver_command = pod_spec(workloads["Deployment/alpha-apiserver"])["containers"][0]["command"]
    assert {"--watch-cache=false", "--etcd-count-metric-poll-period=0",
            "--etcd-db-metric-poll-interval=0"} <= set(apiserver_command), apiserver_command

    service = found["Service/alpha-apiserver"]["spec"]
    assert service["type"] == "NodePort"
    assert [(p["port"], p["nodePort"]) for p in service["ports"]] == [(6443, 31443)]
    etcd_service = found["Service/alpha-etcd"]["spec"]
    assert etcd_service["clusterIP"] == "None" and etcd_service["publishNotReadyAddresses"] is True

    etcd_client = found["Service/alpha-etcd-client"]["spec"]
    assert etcd_client["type"] == "ClusterIP" and etcd_client["selector"] == found["Service/alpha-etcd"]["spec"]["selector"]

    # a first pass starts etcd alone: the apiserver waits for etcd's pod to be Ready, the others for the
    # apiserver to answer; no compute asked: nothing to schedule, no scheduler pod in any case
    apiserver = found["Deployment/alpha-apiserver"]
    assert {k: v["spec"]["replicas"] for k, v in workloads.items()} == {
        "StatefulSet/alpha-etcd": 1, "Deployment/alpha-apiserver": 0, "Deployment/alpha-controller-manager": 0,
        "Deployment/alpha-scheduler": 0}
    assert not pod_spec(apiserver).get("hostNetwork")
    command = pod_spec(apiserver)["containers"][0]["command"]
    assert f"--etcd-servers=https://{etcd_client['clusterIP']}:2379" in command, "by IP: no DNS name to cache"
    assert "--client-ca-file=/etc/kubernetes/pki/client-ca-bundle.crt" in command  # cluster CA and client CA
    probes = pod_spec(apiserver)["containers"][0]
    assert (probes["startupProbe"]["periodSeconds"], probes["readinessProbe"]["periodSeconds"]) == (1, 1)
    assert "initialDelaySeconds" not in probes["livenessProbe"], "the startup probe guards the start"

    etcd = found["StatefulSet/alpha-etcd"]["spec"]
    assert etcd["serviceName"] == "alpha-etcd"
    claim = etcd["volumeClaimTemplates"][0]
    assert claim["spec"]["storageClassName"] == "fast-ssd"
    assert claim["spec"]["resources"]["requests"]["storage"] == "5Gi"

    # each component gets only what it needs; the cluster CA key only where CSRs are signed
    files = {k: secret_files(v) for k, v in found.items() if k.startswith("Secret/")}
    assert [k for k, f in files.items() if "ca.key" in f] == ["Secret/alpha-controller-manager"]
    assert not any(k in f for f in files.values() for k in ("etcd-ca.key", "front-proxy-ca.key"))
    assert files["Secret/alpha-apiserver"]["apiserver.key"] == pki.files["apiserver.key"]
    admin = json.loads(files["Secret/alpha-admin"]["kubeconfig"])
    assert admin["clusters"][0]["cluster"]["server"] == f"https://{control_plane_ip}:31443"
    scheduler = json.loads(files["Secret/alpha-scheduler"]["kubeconfig"])["clusters"][0]["cluster"]
    assert scheduler["server"] == f"https://{service['clusterIP']}:6443"
    assert scheduler["tls-server-name"] in pki.sans()

    # honest: nothing answers at the endpoint, and the pods never ran on this scheduler-less host
    endpoint = f"https://{control_plane_ip}:31443"
    assert (state.ready, state.endpoint, state.port) == (False, endpoint, 31443)
    assert f"did not answer at {endpoint}" in state.message
    assert state.reason == "Starting"

    # once the apiserver answered (here, said to have), the rest may start
    started(runtime, vc)
    await runtime.ensure(vc, pki)
    replicas = {k: v["spec"]["replicas"] for k, v in (await objects(client, namespace, "alpha", ("Deployment",))).items()}
    assert replicas == {"Deployment/alpha-apiserver": 1, "Deployment/alpha-controller-manager": 1,
                        "Deployment/alpha-scheduler": 0}

    # once the host's controllers made the pods and its scheduler placed them, the message says which
    # run (kwok runs them on the simulated control-plane node) and why the rest do not: etcd's claim
    # names a StorageClass this host does not have. That is a start still under way while the scheduler
    # may yet place the pod (a claim made a moment before), and a failure once it has not for a while.
    await wait_for_pods(client, namespace, "alpha", 3)
    state = await _until(lambda: runtime.ensure(vc, pki), lambda s: "apiserver 1/1 pods running" in s.message
                         and "unschedulable" in s.message)
    assert state.reason == "Starting", state.message
    state = await _until(lambda: runtime.ensure(vc, pki), lambda s: s.reason != "Starting",
                         timeout=UNSCHEDULABLE_GRACE + 30)
    assert f"did not answer at {endpoint}" in state.message
    assert "etcd 0/1 pods running (alpha-etcd-0: unschedulable: " in state.message
    assert "persistentvolumeclaim" in state.message.lower()
    assert state.reason == "ComponentFailing"
    claim = (await objects(client, namespace, "alpha", ("PersistentVolumeClaim",)))["PersistentVolumeClaim/data-alpha-etcd-0"]
    assert claim["spec"]["storageClassName"] == "fast-ssd"
    assert claim["spec"]["resources"]["requests"]["storage"] == "5Gi"


async def test_ensure_twice_changes_nothing(runtime: PodsRuntime, client: KubeClient, namespace: str) -> None:
    vc = virtual_cluster(namespace, "twice")
    await runtime.refresh_nodes()
    pki = await make_pki(runtime.endpoint_host(vc))
    first_state = await runtime.ensure(vc, pki)
    first = await objects(client, namespace, "twice", APPLIED_KINDS)

    second_state = await runtime.ensure(vc, pki)
    second = await objects(client, namespace, "twice", APPLIED_KINDS)

    assert sorted(second) == sorted(first)
    # no write at all to what has no status; no spec change (generation) to the workloads, whose
    # status the host's controllers keep writing
    assert {k: v["metadata"]["resourceVersion"] for k, v in second.items() if k.startswith(("Secret", "Service"))} \
        == {k: v["metadata"]["resourceVersion"] for k, v in first.items() if k.startswith(("Secret", "Service"))}
    assert {k: applied_at(v) for k, v in second.items()} == {k: applied_at(v) for k, v in first.items()}
    assert {k: v["metadata"].get("generation") for k, v in second.items()} == \
           {k: v["metadata"].get("generation") for k, v in first.items()}
    assert second_state.endpoint == first_state.endpoint  # the allocated nodePort is kept
    nodeport = first["Service/twice-apiserver"]["spec"]["ports"][0]["nodePort"]
    assert first_state.port == nodeport and 30000 <= nodeport <= 32767
    claim = first["StatefulSet/twice-etcd"]["spec"]["volumeClaimTemplates"][0]["spec"]
    assert claim["resources"]["requests"]["storage"] == "1Gi" and "storageClassName" not in claim


async def server_side_applies(client: KubeClient) -> float:
    """How many server-side applies the host apiserver has served (only vc-apiserver sends them here)."""
    text = (await client.request("GET", "/metrics", raw=True)).decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("apiserver_request_total{") and 'verb="APPLY"' in line)


async def test_passes_of_an_unchanged_tenant_send_the_host_nothing_until_a_full_pass_undoes_drift(
        runtime: PodsRuntime, client: KubeClient, namespace: str) -> None:
    runtime.reapply_after = 4.0
    vc = virtual_cluster(namespace, "quiet")
    await runtime.refresh_nodes()
    pki = await make_pki(runtime.endpoint_host(vc))
    first = await runtime.ensure(vc, pki)
    applies = await server_side_applies(client)
    again = [await runtime.ensure(vc, pki) for _ in range(3)]
    assert await server_side_applies(client) == applies
    assert {(s.endpoint, s.port) for s in again} == {(first.endpoint, first.port)}

    await client.delete(paths.path("Deployment", namespace, "quiet-scheduler"))  # drift, by hand
    await asyncio.sleep(4.0)
    await runtime.ensure(vc, pki)
    assert await server_side_applies(client) > applies
    assert "Deployment/quiet-scheduler" in await objects(client, namespace, "quiet", ("Deployment",))

    renewed = await make_pki(runtime.endpoint_host(vc))  # new inputs: a full pass at once
    await runtime.ensure(vc, renewed)
    secret = (await objects(client, namespace, "quiet", ("Secret",)))["Secret/quiet-apiserver"]
    assert secret_files(secret)["ca.crt"] == renewed.files["ca.crt"]

    applies = await server_side_applies(client)
    await runtime.release()  # leadership ended: another server may have changed the objects meanwhile
    await runtime.ensure(vc, renewed)
    assert await server_side_applies(client) > applies


async def test_a_new_leader_keeps_a_scheduler_an_earlier_leader_scaled_up(
        runtime: PodsRuntime, client: KubeClient, namespace: str) -> None:
    vc = virtual_cluster(namespace, "kept")  # no compute asked, and its apiserver never answers here
    await runtime.refresh_nodes()
    pki = await make_pki(runtime.endpoint_host(vc))
    await runtime.ensure(vc, pki)
    scheduler = paths.path("Deployment", namespace, "kept-scheduler")
    assert (await client.request("GET", scheduler))["spec"]["replicas"] == 0
    # an earlier leader saw a pod waiting and scaled the scheduler up, then this server took over
    await client.request("PATCH", scheduler, body={"spec": {"replicas": 1}},
                         content_type="application/merge-patch+json")
    await runtime.release()
    await runtime.ensure(vc, pki)  # a full pass, with nothing remembered
    assert (await client.request("GET", scheduler))["spec"]["replicas"] == 1


async def test_host_network_and_replicas(runtime: PodsRuntime, client: KubeClient, namespace: str) -> None:
    vc = virtual_cluster(namespace, "hn", externalIP="192.0.2.10",
                         kubeInKubeConfig={"apiServerServiceType": "nodePort"})
    pki = await make_pki(runtime.endpoint_host(vc))
    await runtime.ensure(vc, pki)
    assert "Service/hn-apiserver" in await objects(client, namespace, "hn")

    vc["spec"]["kubeInKubeConfig"] = {"apiServerServiceType": "hostNetwork", "apiServerReplicas": 2,
                                      "externalPort": 40443}
    started(runtime, vc)
    state = await runtime.ensure(vc, pki)

    found = await objects(client, namespace, "hn")
    assert "Service/hn-apiserver" not in found  # switching to hostNetwork removed the NodePort Service
    assert "Service/hn-etcd" in found
    apiserver = found["Deployment/hn-apiserver"]
    assert apiserver["spec"]["replicas"] == 2
    spec = pod_spec(apiserver)
    assert spec["hostNetwork"] is True and spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert spec["containers"][0]["ports"][0] == {"name": "https", "containerPort": 40443, "hostPort": 40443,
                                                 "protocol": "TCP"}
    assert "--secure-port=40443" in spec["containers"][0]["command"]
    assert (state.ready, state.endpoint, state.port) == (False, "https://192.0.2.10:40443", 40443)
    assert "did not answer at https://192.0.2.10:40443" in state.message


async def test_host_network_without_external_port_gets_a_stable_port(runtime: PodsRuntime, client: KubeClient,
                                                                      namespace: str) -> None:
    shape = {"apiServerServiceType": "hostNetwork"}
    one, two = (virtual_cluster(namespace, n, kubeInKubeConfig=shape) for n in ("hp-one", "hp-two"))
    await runtime.refresh_nodes()
    pki = await make_pki(runtime.endpoint_host(one))
    ports = [(await runtime.ensure(vc, pki)).port for vc in (one, two)]
    assert ports[0] != ports[1]
    assert all(40000 <= p <= 49999 for p in ports)
    apiserver = (await objects(client, namespace, "hp-one", ("Deployment",)))["Deployment/hp-one-apiserver"]
    preferred = pod_spec(apiserver)["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert preferred[0]["preference"]["matchFields"][0]["values"] == ["node-control-plane"]  # the endpoint's node
    fresh = PodsRuntime(client)  # a restarted server finds the same ports on the host
    await fresh.refresh_nodes()
    assert [(await fresh.ensure(vc, pki)).port for vc in (one, two)] == ports


async def test_teardown_removes_everything(runtime: PodsRuntime, client: KubeClient, namespace: str) -> None:
    keep, gone = virtual_cluster(namespace, "keep"), virtual_cluster(namespace, "gone")
    await runtime.refresh_nodes()
    pki = await make_pki(runtime.endpoint_host(gone))
    for vc in (keep, gone):
        started(runtime, vc)
        await runtime.ensure(vc, pki)
    await wait_for_pods(client, namespace, "gone", 3)  # and their claim: teardown must remove those too
    assert {(namespace, "keep"), (namespace, "gone")} <= set(await runtime.owned())

    await runtime.teardown(namespace, "gone")

    assert await objects(client, namespace, "gone", OWNED_KINDS) == {}
    assert (namespace, "gone") not in await runtime.owned()
    assert len(await objects(client, namespace, "keep", APPLIED_KINDS)) == 12  # its neighbour is untouched
    await runtime.teardown(namespace, "gone")  # idempotent
    await runtime.teardown(namespace, "never-existed")


async def test_hibernate_scales_the_workloads_to_zero_keeping_volumes_secrets_and_port_and_ensure_wakes_them(
        runtime: PodsRuntime, client: KubeClient, namespace: str) -> None:
    vc = virtual_cluster(namespace, "sleepy", promoteResources={"resources": {"cpu": "1"}})  # compute: a scheduler
    await runtime.refresh_nodes()
    pki = await make_pki(runtime.endpoint_host(vc))
    started(runtime, vc)
    awake = await runtime.ensure(vc, pki)
    await wait_for_pods(client, namespace, "sleepy", 4)
    before = await objects(client, namespace, "sleepy")
    assert "PersistentVolumeClaim/data-sleepy-etcd-0" in before
    apiserver = pod_spec(before["Deployment/sleepy-apiserver"])["containers"][0]["command"]
    assert {"--audit-policy-file=/etc/kubernetes/pki/audit-policy.yaml", "--audit-log-path=-"} <= set(apiserver)
    assert b'"kosmos:tenant-admins"' in secret_files(before["Secret/sleepy-apiserver"])["audit-policy.yaml"]

    stopped = False
    for _ in range(240):  # the host's controllers delete the pods a moment after the scale-down
        if stopped := await runtime.hibernate(vc):
            break
        await asyncio.sleep(0.25)
    assert stopped, "the control plane's pods never went away"
    after = await objects(client, namespace, "sleepy")
    assert {k: v["spec"]["replicas"] for k, v in after.items() if k.split("/")[0] in ("Deployment", "StatefulSet")} \
        == {"StatefulSet/sleepy-etcd": 0, "Deployment/sleepy-apiserver": 0, "Deployment/sleepy-controller-manager": 0,
            "Deployment/sleepy-scheduler": 0}
    kept = ("PersistentVolumeClaim/data-sleepy-etcd-0", "Secret/sleepy-etcd", "Secret/sleepy-apiserver",
            "Secret/sleepy-admin", "Service/sleepy-apiserver", "Service/sleepy-etcd")
    for key in kept:
        assert after[key]["metadata"]["uid"] == before[key]["metadata"]["uid"], f"{key} is kept as it was"
    assert await objects(client, namespace, "sleepy", ("Pod",)) == {}
    assert await runtime.hibernate(vc)  # idempotent
    assert await runtime.last_request(vc, dt.datetime.now(dt.UTC)) is None  # no apiserver runs: nobody used it

    woken = await runtime.ensure(vc, pki)  # waking is ensure: the same workloads, scaled back, the same endpoint
    assert woken.endpoint == awake.endpoint
    again = await objects(client, namespace, "sleepy", ("Deployment", "StatefulSet"))
    assert {k: v["spec"]["replicas"] for k, v in again.items()} == {
        "StatefulSet/sleepy-etcd": 1, "Deployment/sleepy-apiserver": 0, "Deployment/sleepy-controller-manager": 0,
        "Deployment/sleepy-scheduler": 0}, "in order again: etcd first"
    started(runtime, vc)
    await runtime.ensure(vc, pki)
    again = await objects(client, namespace, "sleepy", ("Deployment", "StatefulSet"))
    assert all(v["spec"]["replicas"] == 1 for v in again.values())
    await wait_for_pods(client, namespace, "sleepy", 4)
    assert (await objects(client, namespace, "sleepy", ("PersistentVolumeClaim",)))[
        "PersistentVolumeClaim/data-sleepy-etcd-0"]["metadata"]["uid"] == \
        before["PersistentVolumeClaim/data-sleepy-etcd-0"]["metadata"]["uid"]
    await runtime.teardown(namespace, "sleepy")


async def test_endpoint_host(client: KubeClient, control_plane_ip: str) -> None:
    """externalIP when set; else the control-plane node's address, looked up in the background at first."""
    runtime = PodsRuntime(client)
    assert runtime.endpoint_host(virtual_cluster("ns", "x", externalIP="vc.example.com")) == "vc.example.com"
    with pytest.raises(RuntimeFailure) as lookup:
        runtime.endpoint_host(virtual_cluster("ns", "x"))
    assert lookup.value.reason == "LookingUpEndpoint"
    for _ in range(100):
        try:
            assert runtime.endpoint_host(virtual_cluster("ns", "x")) == control_plane_ip
            return
        except RuntimeFailure:
            await asyncio.sleep(0.1)
    raise AssertionError("the control-plane node's address was never found")


async def test_rejected_spec_is_explained(runtime: PodsRuntime, namespace: str) -> None:
    vc = virtual_cluster(namespace, "badport", kubeInKubeConfig={"externalPort": 80})
    await runtime.refresh_nodes()
    pki = await make_pki(runtime.endpoint_host(vc))
    with pytest.raises(RuntimeFailure) as failure:
        await runtime.ensure(vc, pki)
    assert failure.value.reason == "Invalid"
    assert f"applying Service {namespace}/badport-apiserver: the host answered 422" in failure.value.message
    assert "80" in failure.value.message


def control_plane_node(host: HostCluster, name: str, ip: str, ready: bool) -> None:
    """A control-plane Node no kwok keeps: its status is what this writes."""
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"node-role.kubernetes.io/control-plane": ""}},
            "spec": {"taints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]}}
    host.kubectl("apply", "-f", "-", input=json.dumps(node))
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = {"addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
              "conditions": [{"type": "Ready", "status": "True" if ready else "False", "reason": "Lab",
                              "lastHeartbeatTime": now, "lastTransitionTime": now}]}
    host.kubectl("patch", "node", name, "--subresource=status", "--type=merge", "-p", json.dumps({"status": status}))


async def test_a_tenant_is_sent_to_a_ready_routable_control_plane_node_and_follows_when_that_node_goes(
        host: HostCluster, runtime: PodsRuntime, namespace: str, control_plane_ip: str) -> None:
    """A NotReady node that sorts first is never chosen, a loopback one (kwok's) only when nothing else is;
    when the chosen node is deleted, the tenant's next passes send it to the next one on their own."""
    nodes = {"aaa-not-ready": ("192.0.2.30", False), "cp-a": ("192.0.2.31", True), "cp-b": ("192.0.2.32", True)}
    try:
        for name, (ip, ready) in nodes.items():
            control_plane_node(host, name, ip, ready)
        vc = virtual_cluster(namespace, "mover")
        await runtime.refresh_nodes()
        assert runtime.endpoint_host(vc) == "192.0.2.31"
        pki = await make_pki("192.0.2.31")
        first = await runtime.ensure(vc, pki)
        assert first.endpoint == f"https://192.0.2.31:{first.port}"

        host.kubectl("delete", "node", "cp-a")
        started = asyncio.get_running_loop().time()
        state = first
        while state.endpoint == first.endpoint and asyncio.get_running_loop().time() - started < 20:
            await asyncio.sleep(0.5)
            state = await runtime.ensure(vc, pki)  # nothing answers on this host: each pass doubts the node
        assert state.endpoint == f"https://192.0.2.32:{first.port}", state.endpoint
        assert runtime.endpoint_host(vc) == "192.0.2.32"

        host.kubectl("delete", "node", "cp-b")
        await runtime.refresh_nodes()
        assert runtime.endpoint_host(vc) == control_plane_ip, "the loopback node, as the last resort"
    finally:
        host.kubectl("delete", "node", *nodes, "--ignore-not-found")
        await runtime.refresh_nodes()
        await runtime.teardown(namespace, "mover")
