"""Shared compute slices on a real host (scheduler, quota controller, kwok running the host pods) with
real tenant control planes and real kubectl: one tenant node of exactly the slice, its pods running
in the host namespace under the quota, and everything gone with the VirtualCluster."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from apiserver.machinery.quantity import parse_quantity
from hack.harness import fake_node
from hack.stack import Stack
from reconciler.shared import names, translate
from tests.conftest import Kubectl, running_stack, vc
from tests.support.promotion import tenant, wait_phase
from tests.support.waiting import until

pytestmark = pytest.mark.e2e

SLICE = {"cpu": "4", "memory": "8Gi"}
NODE = names.NODE_NAME


POOL = "type=kwok"  # the slice node pool: the four kwok workers (the control-plane node is tainted)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from running_stack(tmp_path_factory.mktemp("shared"), nodes=4, lease_seconds=5, runtime="process",
                             extra_args=["--slice-node-selector", POOL])


@pytest.fixture(scope="module")
def host(stack: Stack) -> Kubectl:
    return Kubectl(stack.kubeconfig, host_namespaces=True)


@pytest.fixture(scope="module")
def sliced(host: Kubectl, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, Any], Kubectl]]:
    """A VirtualCluster with a 4-cpu, 8Gi slice, Completed; and its tenant's kubectl."""
    ns = host.ensure_namespace("slices")
    host.run("create", "-f", "-", input=json.dumps(vc("team", ns, {"promoteResources": {"resources": SLICE}})))
    wait_phase(host, ns, "team", "Completed", timeout=180)
    yield host.json("get", "vc", "team", "-n", ns), tenant(host, ns, "team", tmp_path_factory.mktemp("team"))


def host_pods(host: Kubectl, namespace: str) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in host.json("get", "pods", "-n", namespace)["items"]}


def tenant_pods(t: Kubectl, *selector: str) -> list[dict[str, Any]]:
    return t.json("get", "pods", *selector)["items"]


def staying(pods: list[dict[str, Any]]) -> set[str]:
    """The uids of the pods no one is deleting."""
    return {p["metadata"]["uid"] for p in pods if not p["metadata"].get("deletionTimestamp")}


def three_running(pods: list[dict[str, Any]]) -> bool:
    """Three pods Running and not leaving (a pod failed HostPodLost stays listed beside its replacement)."""
    return sum(1 for p in pods if p["status"].get("phase") == "Running"
               and not p["metadata"].get("deletionTimestamp")) == 3


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_), {})


def test_a_slice_is_one_ready_tenant_node_of_exactly_its_size_backed_by_a_host_quota(
        host: Kubectl, sliced: tuple[dict[str, Any], Kubectl]) -> None:
    obj, t = sliced
    status = obj["status"]
    namespace = status["sharedResources"]["namespace"]
    assert namespace == names.host_namespace(obj) and namespace.startswith("vcw-slices-team-")
    assert {k: status["sharedResources"]["capacity"][k] for k in SLICE} == SLICE
    assert {"name": NODE, "phase": "Ready", "shared": True} in status["nodes"]
    # the host: a namespace Pod Security keeps at baseline, the quota (accounted) and the defaults
    ns = host.json("get", "namespace", namespace)
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"
    quota = host.json("get", "resourcequota", names.QUOTA, "-n", namespace)
    assert quota["spec"]["hard"] == {"requests.cpu": "4", "requests.memory": "8Gi", "pods": "110"}
    assert quota["status"]["hard"] == quota["spec"]["hard"]
    assert host.json("get", "limitrange", names.LIMIT_RANGE, "-n", namespace)["spec"]["limits"][0]["defaultRequest"] \
        == translate.DEFAULT_REQUEST
    # the tenant: one node, Ready, capacity = allocatable = the slice, its Lease renewed
    nodes = t.json("get", "nodes")["items"]
    assert [n["metadata"]["name"] for n in nodes] == [NODE]
    node = nodes[0]
    assert condition(node, "Ready")["status"] == "True"
    assert node["status"]["capacity"] == node["status"]["allocatable"]
    assert {k: node["status"]["capacity"][k] for k in SLICE} == SLICE
    assert node["metadata"]["labels"][names.SHARED_NODE] == "true"
    first = t.json("get", "lease", NODE, "-n", "kube-node-lease")["spec"]["renewTime"]
    until(lambda: t.json("get", "lease", NODE, "-n", "kube-node-lease")["spec"]["renewTime"], lambda r: r != first,
          timeout=25, what="a Lease renewal")
    # kubectl's table counts the slice's node
    table = host.run("get", "vc", "team", "-n", obj["metadata"]["namespace"]).stdout.splitlines()
    header, row = table[0].split(), table[1].split()
    assert row[header.index("NODES")] == "1/1"  # ready / listed


def test_tenant_pods_run_in_the_host_namespace_under_the_quota_and_report_back(
        host: Kubectl, sliced: tuple[dict[str, Any], Kubectl]) -> None:
    obj, t = sliced
    namespace = obj["status"]["sharedResources"]["namespace"]
    t.run("create", "deployment", "web", "--image=docker.io/library/busybox:1.36", "--replicas=3")
    t.run("set", "resources", "deployment", "web", "--requests=cpu=1,memory=1Gi")
    pods = until(lambda: tenant_pods(t, "-l", "app=web"),
                 lambda ps: len(ps) == 3 and all(p["status"].get("phase") == "Running" and p["metadata"].get(
                     "deletionTimestamp") is None for p in ps), what="3 web pods Running")
    on_host = host_pods(host, namespace)
    for pod in pods:
        assert pod["spec"]["nodeName"] == NODE
        mirror = on_host[names.host_name("default", pod["metadata"]["name"])]
        notes = mirror["metadata"]["annotations"]
        assert (notes[names.TENANT_NAME], notes[names.TENANT_UID]) == (pod["metadata"]["name"], pod["metadata"]["uid"])
        assert "app" not in mirror["metadata"]["labels"]  # tenant labels steer nothing in the host
        assert mirror["spec"]["nodeName"].startswith("node-")  # the host's scheduler placed it
        assert pod["status"]["podIP"] == mirror["status"]["podIP"]
        assert condition(pod, names.HOST_SCHEDULED)["status"] == "True"
    # the quota counts every pod of the slice: the three, and the tenant's CoreDNS beside them
    def on_the_node() -> tuple[int, Decimal]:
        pods = [p for p in tenant_pods(t, "-A") if p["status"].get("phase") in ("Pending", "Running")
                and condition(p, names.HOST_SCHEDULED).get("status") == "True"]
        default = translate.DEFAULT_REQUEST["cpu"]  # the LimitRange's, for a container that states none
        return len(pods), sum((parse_quantity(((c.get("resources") or {}).get("requests") or {}).get("cpu", default))
                               for p in pods for c in p["spec"]["containers"]), Decimal(0))
    until(lambda: (host.json("get", "resourcequota", names.QUOTA, "-n", namespace)["status"]["used"], on_the_node()),
          lambda seen: (int(seen[0].get("pods", 0)), parse_quantity(seen[0].get("requests.cpu", "0"))) == seen[1]
          and seen[1][0] >= 3, what="the quota's use: the requests of the pods on the node")


def test_a_pod_beyond_the_quota_waits_with_the_reason_and_starts_when_room_frees_up(
        host: Kubectl, sliced: tuple[dict[str, Any], Kubectl]) -> None:
    """Pinned to the node (no tenant scheduler to stop it), a pod the host quota cannot hold stays
    Pending with the quota's message, and starts by itself once another pod leaves."""
    obj, t = sliced
    namespace = obj["status"]["sharedResources"]["namespace"]
    pinned = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "big", "namespace": "default"},
              "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "docker.io/library/busybox:1.36",
                                                         "resources": {"requests": {"cpu": "2"}}}]}}
    t.run("create", "-f", "-", input=json.dumps(pinned))
    waiting = until(lambda: t.json("get", "pod", "big"), lambda p: condition(p, names.HOST_SCHEDULED).get("reason")
                    == "ProviderFailed", what="big refused by the quota")
    assert waiting["status"]["phase"] == "Pending"
    assert "exceeded quota" in condition(waiting, names.HOST_SCHEDULED)["message"]
    assert names.host_name("default", "big") not in host_pods(host, namespace)
    reasons = [e["reason"] for e in t.json("get", "events", "--field-selector", "involvedObject.name=big")["items"]]
    assert "ProviderFailed" in reasons
    t.run("scale", "deployment", "web", "--replicas=1")
    until(lambda: t.json("get", "pod", "big"), lambda p: p["status"].get("phase") == "Running",
          what="big Running once room freed up")
    t.run("delete", "pod", "big", "--wait", timeout=90)
    t.run("scale", "deployment", "web", "--replicas=3")


def test_a_started_host_pod_deleted_behind_our_back_fails_its_tenant_pod_and_is_replaced(
        host: Kubectl, sliced: tuple[dict[str, Any], Kubectl]) -> None:
    obj, t = sliced
    namespace = obj["status"]["sharedResources"]["namespace"]
    pods = until(lambda: tenant_pods(t, "-l", "app=web"), three_running)
    victim = next(p for p in pods if p["status"].get("phase") == "Running")["metadata"]["name"]
    host.run("delete", "pod", names.host_name("default", victim), "-n", namespace, "--grace-period=0", "--force")
    lost = until(lambda: t.json("get", "pods", "--field-selector", f"metadata.name={victim}")["items"],
                 lambda ps: not ps or ps[0]["status"].get("reason") == "HostPodLost", what="the pod failed HostPodLost")
    if lost:  # the ReplicaSet may already have removed it
        assert lost[0]["status"]["phase"] == "Failed"
    until(lambda: tenant_pods(t, "-l", "app=web"),
          lambda ps: sum(1 for p in ps if p["status"].get("phase") == "Running") == 3, what="a replacement Running")


def test_a_deleted_tenant_pod_takes_its_host_pod_with_it(host: Kubectl, sliced: tuple[dict[str, Any], Kubectl]) -> None:
    obj, t = sliced
    namespace = obj["status"]["sharedResources"]["namespace"]
    t.run("run", "solo", "--image=docker.io/library/busybox:1.36", "--restart=Never")
    until(lambda: t.json("get", "pod", "solo"), lambda p: p["status"].get("phase") == "Running")
    mirror = names.host_name("default", "solo")
    assert mirror in host_pods(host, namespace)
    t.run("delete", "pod", "solo", "--wait", timeout=90)
    until(lambda: host_pods(host, namespace), lambda found: mirror not in found, what="the host pod gone")


def test_a_pods_configmap_is_copied_before_it_runs_and_collected_after(
        host: Kubectl, sliced: tuple[dict[str, Any], Kubectl]) -> None:
    obj, t = sliced
    namespace = obj["status"]["sharedResources"]["namespace"]
    t.run("create", "configmap", "settings", "--from-literal=mode=fast")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "reader", "namespace": "default"},
           "spec": {"containers": [{"name": "c", "image": "docker.io/library/busybox:1.36",
                                    "envFrom": [{"configMapRef": {"name": "settings"}}]}]}}
    t.run("create", "-f", "-", input=json.dumps(pod))
    until(lambda: t.json("get", "pod", "reader"), lambda p: p["status"].get("phase") == "Running")
    copy = host.json("get", "configmap", names.host_name("default", "settings"), "-n", namespace)
    assert copy["data"] == {"mode": "fast"}
    t.run("delete", "pod", "reader", "--wait", timeout=90)
    until(lambda: host.run("get", "configmap", names.host_name("default", "settings"), "-n", namespace,
                           check=False).returncode, lambda rc: rc != 0, what="the copy collected")


def test_a_pod_whose_secret_is_missing_waits_until_it_exists(
        host: Kubectl, sliced: tuple[dict[str, Any], Kubectl]) -> None:
    obj, t = sliced
    namespace = obj["status"]["sharedResources"]["namespace"]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "needs", "namespace": "default"},
           "spec": {"containers": [{"name": "c", "image": "docker.io/library/busybox:1.36",
                                    "env": [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "later", "key": "p"}}}]}]}}
    t.run("create", "-f", "-", input=json.dumps(pod))
    waiting = until(lambda: t.json("get", "pod", "needs"),
                    lambda p: condition(p, names.HOST_SCHEDULED).get("reason") == "MissingReference",
                    what="the missing Secret reported")
    assert "Secret default/later does not exist" in condition(waiting, names.HOST_SCHEDULED)["message"]
    assert names.host_name("default", "needs") not in host_pods(host, namespace)
    t.run("create", "secret", "generic", "later", "--from-literal=p=1")
    until(lambda: t.json("get", "pod", "needs"), lambda p: p["status"].get("phase") == "Running",
          what="the pod Running once its Secret exists")
    assert host.json("get", "secret", names.host_name("default", "later"), "-n", namespace)["data"] == {"p": "MQ=="}
    t.run("delete", "pod", "needs", "--wait", timeout=90)


BUSYBOX = "docker.io/library/busybox:1.36"
# Every way a tenant pod spec could reach into the host, and the words the tenant is told: the host's own
# Pod Security admission (baseline, enforced on every slice namespace) refuses what a host pod may not do,
# the syncer refuses the volumes a slice cannot serve before the host sees them.
HOSTILE: dict[str, tuple[dict[str, Any], dict[str, Any], str]] = {
    "hostnet": ({"hostNetwork": True}, {}, "host namespaces (hostNetwork=true)"),
    "hostpid": ({"hostPID": True}, {}, "host namespaces (hostPID=true)"),
    "hostipc": ({"hostIPC": True}, {}, "host namespaces (hostIPC=true)"),
    "hostport": ({}, {"ports": [{"containerPort": 80, "hostPort": 8080}]}, "hostPort"),
    "privileged": ({}, {"securityContext": {"privileged": True}}, "privileged"),
    "sysadmin": ({}, {"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}, "non-default capabilities"),
    "unconfined": ({"securityContext": {"seccompProfile": {"type": "Unconfined"}}}, {}, "seccompProfile"),
    "sysctl": ({"securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}}, {}, "forbidden sysctls"),
    "hostpath": ({"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}, {},
                 "hostPath volumes cannot run in a shared slice"),
}


def test_every_pod_field_that_reaches_into_the_host_is_refused_and_the_tenant_told_why(
        host: Kubectl, sliced: tuple[dict[str, Any], Kubectl]) -> None:
    obj, t = sliced
    namespace = obj["status"]["sharedResources"]["namespace"]
    until(lambda: t.run("get", "serviceaccount", "default", check=False).returncode, lambda rc: rc == 0,
          what="the tenant's default ServiceAccount")
    for name, (spec, container, _) in HOSTILE.items():
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
               "spec": {**spec, "containers": [{"name": "c", "image": BUSYBOX, **container}]}}
        t.run("create", "-f", "-", input=json.dumps(pod))
    told = {}
    for name, (_, _, words) in HOSTILE.items():
        refused = until(lambda n=name: t.json("get", "pod", n),
                        lambda p: condition(p, names.HOST_SCHEDULED).get("reason") == "ProviderFailed",
                        what=f"{name} refused and the tenant told")
        told[name] = condition(refused, names.HOST_SCHEDULED)["message"]
        assert words in told[name], (name, told[name])
    running = host_pods(host, namespace)
    assert not {names.host_name("default", n) for n in HOSTILE} & set(running)
    t.run("delete", "pod", *HOSTILE, "--wait", timeout=120)


def test_a_slice_pod_runs_as_no_host_identity_and_mounts_only_its_tenants_copies(
        host: Kubectl, sliced: tuple[dict[str, Any], Kubectl]) -> None:
    """A tenant names a host ServiceAccount and a host Secret: its pod runs as the slice namespace's
    token-less default account, and mounts the slice's copy of the tenant's own Secret of that name, and
    its own tenant's token: nothing of the host's."""
    obj, t = sliced
    namespace = obj["status"]["sharedResources"]["namespace"]
    until(lambda: t.run("get", "serviceaccount", "default", check=False).returncode, lambda rc: rc == 0,
          what="the tenant's default ServiceAccount")
    t.run("create", "serviceaccount", "vc-apiserver")
    t.run("create", "secret", "generic", "vc-apiserver-serving", "--from-literal=tenant=yes")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "borrower", "namespace": "default"},
           "spec": {"serviceAccountName": "vc-apiserver",
                    "volumes": [{"name": "s", "secret": {"secretName": "vc-apiserver-serving"}}],
                    "containers": [{"name": "c", "image": BUSYBOX, "volumeMounts": [{"name": "s", "mountPath": "/s"}]}]}}
    t.run("create", "-f", "-", input=json.dumps(pod))
    mapped = names.host_name("default", "borrower")
    hosted = until(lambda: host_pods(host, namespace).get(mapped), lambda p: p is not None, what="its host pod")
    spec = hosted["spec"]
    assert spec.get("serviceAccountName", "default") == "default" and spec["automountServiceAccountToken"] is False
    sources = [s for v in spec["volumes"] for s in (v.get("projected") or {}).get("sources") or []]
    assert sources and not any("serviceAccountToken" in s for s in sources)  # no token the host would issue
    assert {s["secret"]["name"] for s in sources if "secret" in s} == {names.host_name("default", "borrower.token")}
    assert {s["configMap"]["name"] for s in sources if "configMap" in s} == {names.host_name("default",
                                                                                            "kube-root-ca.crt")}
    [secret] = [v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v]
    assert secret == names.host_name("default", "vc-apiserver-serving")
    copied = host.json("get", "secret", secret, "-n", namespace)
    assert copied["data"] == {"tenant": "eWVz"}
    t.run("delete", "pod", "borrower", "--wait", timeout=90)


def test_the_host_schedulers_events_are_told_again_on_the_tenant_pod(sliced: tuple[dict[str, Any], Kubectl]) -> None:
    _, t = sliced
    pod = next(p for p in tenant_pods(t, "-l", "app=web") if p["status"].get("phase") == "Running")
    events = until(lambda: t.json("get", "events", "--field-selector",
                                  f"involvedObject.name={pod['metadata']['name']},source=shared-slice")["items"],
                   lambda found: any(e["reason"] == "Scheduled" for e in found), what="the host's Scheduled event")
    told = next(e for e in events if e["reason"] == "Scheduled")
    assert "vcw-" not in told["message"]  # the host namespace is told as the tenant's


def test_a_shared_node_deleted_by_the_tenant_admin_comes_back(sliced: tuple[dict[str, Any], Kubectl]) -> None:
    _, t = sliced
    t.run("delete", "node", NODE)
    node = until(lambda: t.run("get", "node", NODE, "-o", "json", check=False),
                 lambda proc: proc.returncode == 0 and condition(json.loads(proc.stdout), "Ready").get("status") == "True",
                 timeout=30, what="the node made again")
    assert json.loads(node.stdout)["status"]["allocatable"]["cpu"] == "4"


def test_resizing_the_slice_resizes_the_node_and_the_quota_together(
        host: Kubectl, sliced: tuple[dict[str, Any], Kubectl]) -> None:
    obj, t = sliced
    ns, namespace = obj["metadata"]["namespace"], obj["status"]["sharedResources"]["namespace"]
    running = {p["metadata"]["uid"] for p in tenant_pods(t, "-l", "app=web")}
    for cpu in ("6", "4"):
        host.run("patch", "vc", "team", "-n", ns, "--type", "merge",
                 "-p", json.dumps({"spec": {"promoteResources": {"resources": {"cpu": cpu}}}}))
        until(lambda: (t.json("get", "node", NODE)["status"]["allocatable"]["cpu"],
                       host.json("get", "resourcequota", names.QUOTA, "-n", namespace)["status"]["hard"]["requests.cpu"],
                       host.json("get", "vc", "team", "-n", ns)["status"]["sharedResources"]["capacity"]["cpu"]),
              lambda seen, cpu=cpu: seen == (cpu, cpu, cpu), what=f"node, quota and status at cpu {cpu}")
    assert {p["metadata"]["uid"] for p in tenant_pods(t, "-l", "app=web")} == running  # nothing evicted


def test_two_tenants_with_the_same_pod_name_get_separate_host_pods_and_namespaces(
        host: Kubectl, sliced: tuple[dict[str, Any], Kubectl], tmp_path: Path) -> None:
    obj, t = sliced
    ns = obj["metadata"]["namespace"]
    host.run("create", "-f", "-", input=json.dumps(vc("twin", ns, {"promoteResources": {"resources": {"cpu": "1"}}})))
    wait_phase(host, ns, "twin", "Completed", timeout=180)
    other = host.json("get", "vc", "twin", "-n", ns)
    t2 = tenant(host, ns, "twin", tmp_path)
    until(lambda: t2.run("get", "serviceaccount", "default", check=False).returncode, lambda rc: rc == 0)
    for kubectl in (t, t2):
        kubectl.run("run", "same", "--image=docker.io/library/busybox:1.36", "--restart=Never")
    spaces = [obj["status"]["sharedResources"]["namespace"], other["status"]["sharedResources"]["namespace"]]
    assert spaces[0] != spaces[1]
    mirrors = [until(lambda n=n: host_pods(host, n).get(names.host_name("default", "same")), lambda p: p is not None)
               for n in spaces]
    uids = [kubectl.json("get", "pod", "same")["metadata"]["uid"] for kubectl in (t, t2)]
    assert [m["metadata"]["annotations"][names.TENANT_UID] for m in mirrors] == uids
    host.run("delete", "vc", "twin", "-n", ns, "--wait", timeout=180)
    assert host_pods(host, spaces[0])[names.host_name("default", "same")]["metadata"]["uid"] == \
        mirrors[0]["metadata"]["uid"]  # the other tenant's is untouched
    t.run("delete", "pod", "same", "--wait", timeout=90)


def test_a_foreign_pod_at_the_mapped_name_is_left_alone_and_the_tenant_pod_told_why(
        host: Kubectl, sliced: tuple[dict[str, Any], Kubectl]) -> None:
    obj, t = sliced
    namespace = obj["status"]["sharedResources"]["namespace"]
    squatter = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": names.host_name("default", "clash"), "namespace": namespace},
                "spec": {"containers": [{"name": "c", "image": "docker.io/library/busybox:1.36"}]}}
    host.run("create", "-f", "-", input=json.dumps(squatter))
    foreign_uid = host.json("get", "pod", squatter["metadata"]["name"], "-n", namespace)["metadata"]["uid"]
    t.run("run", "clash", "--image=docker.io/library/busybox:1.36", "--restart=Never")
    refused = until(lambda: t.json("get", "pod", "clash"),
                    lambda p: condition(p, names.HOST_SCHEDULED).get("reason") == "HostNameConflict",
                    what="the conflict reported")
    assert refused["status"]["phase"] == "Pending"
    time.sleep(2)
    still = host.json("get", "pod", squatter["metadata"]["name"], "-n", namespace)
    assert still["metadata"]["uid"] == foreign_uid and names.TENANT_UID not in (still["metadata"].get("annotations") or {})
    t.run("delete", "pod", "clash", "--wait", timeout=90)
    host.run("delete", "pod", squatter["metadata"]["name"], "-n", namespace, "--grace-period=0", "--force")


def test_a_host_drain_moves_the_slice_pods_to_other_host_nodes(
        host: Kubectl, sliced: tuple[dict[str, Any], Kubectl]) -> None:
    obj, t = sliced
    namespace = obj["status"]["sharedResources"]["namespace"]
    until(lambda: tenant_pods(t, "-l", "app=web"), three_running)
    drained = next(iter(host_pods(host, namespace).values()))["spec"]["nodeName"]
    host.run("drain", drained, "--ignore-daemonsets", "--delete-emptydir-data", "--force", "--timeout=90s",
             timeout=120)
    try:
        def settled(ps: list[dict[str, Any]]) -> bool:
            on = {p["spec"].get("nodeName") for p in host_pods(host, namespace).values()}
            return three_running(ps) and drained not in on
        until(lambda: tenant_pods(t, "-l", "app=web"), settled, what="the web pods running off the drained node")
    finally:
        host.run("uncordon", drained)


def test_a_deleted_host_namespace_is_made_again_and_its_started_pods_replaced(
        host: Kubectl, sliced: tuple[dict[str, Any], Kubectl]) -> None:
    obj, t = sliced
    namespace = obj["status"]["sharedResources"]["namespace"]
    before = {p["metadata"]["uid"] for p in tenant_pods(t, "-l", "app=web") if p["status"].get("phase") == "Running"}
    host.run("delete", "namespace", namespace, "--wait=false")
    until(lambda: condition(t.json("get", "node", NODE), "Ready"), lambda c: c.get("status") == "False"
          and c.get("reason") in ("HostNamespaceMissing", "QuotaNotReady"), timeout=30, what="the node NotReady")

    def recovered(ps: list[dict[str, Any]]) -> bool:
        running = {p["metadata"]["uid"] for p in ps if p["status"].get("phase") == "Running"}
        return len(running) == 3 and not running & before
    until(lambda: tenant_pods(t, "-l", "app=web"), recovered, timeout=150, what="three new web pods Running")
    quota = host.json("get", "resourcequota", names.QUOTA, "-n", namespace)
    assert quota["status"]["hard"]["requests.cpu"] == "4"
    assert condition(t.json("get", "node", NODE), "Ready")["status"] == "True"
    # each transition is told on the VirtualCluster
    told = [e["reason"] for e in host.json("get", "events", "-n", obj["metadata"]["namespace"], "--field-selector",
                                           "involvedObject.name=team")["items"]]
    assert {"SliceReady"} <= set(told) and {"HostNamespaceMissing", "QuotaNotReady"} & set(told), told


def test_vc_apiserver_killed_mid_burst_converges_to_one_host_pod_per_tenant_pod(
        stack: Stack, host: Kubectl, sliced: tuple[dict[str, Any], Kubectl]) -> None:
    obj, t = sliced
    namespace = obj["status"]["sharedResources"]["namespace"]
    t.run("create", "deployment", "burst", "--image=docker.io/library/busybox:1.36", "--replicas=0")
    t.run("set", "resources", "deployment", "burst", "--requests=cpu=10m,memory=16Mi")
    t.run("scale", "deployment", "burst", "--replicas=40")
    until(lambda: len(host_pods(host, namespace)), lambda n: n >= 10, what="the burst under way")
    stack.api.proc.kill()
    stack.api.start()

    def one_to_one(_: object) -> bool:
        live = {names.host_name(p["metadata"]["namespace"], p["metadata"]["name"]): p["metadata"]["uid"]
                for p in tenant_pods(t, "-A") if p["status"].get("phase") not in ("Succeeded", "Failed")}
        mirrored = {n: p["metadata"]["annotations"][names.TENANT_UID] for n, p in host_pods(host, namespace).items()}
        running = [p for p in tenant_pods(t, "-l", "app=burst") if p["status"].get("phase") == "Running"]
        return mirrored == live and len(running) == 40
    until(lambda: None, one_to_one, timeout=150, what="one host pod per live tenant pod, 40 burst pods Running")
    t.run("delete", "deployment", "burst")
    until(lambda: [n for n in host_pods(host, namespace) if n.startswith("burst-")]
          + [p["metadata"]["name"] for p in tenant_pods(t, "-l", "app=burst")], lambda left: not left,
          what="the burst's pods gone from the host and the tenant")


def test_the_host_down_for_60s_marks_the_node_not_ready_and_deletes_no_tenant_pod(
        stack: Stack, host: Kubectl, sliced: tuple[dict[str, Any], Kubectl]) -> None:
    _, t = sliced
    # pods their owners are already deleting leave on their own; the outage must take none of the others
    before = staying(tenant_pods(t))
    stack.host.kill_apiserver()
    down = time.monotonic()
    try:
        ready = until(lambda: condition(t.json("get", "node", NODE), "Ready"), lambda c: c.get("status") == "False",
                      timeout=40, what="the node NotReady")
        assert ready["reason"] == "HostAPIUnreachable"
        time.sleep(max(0.0, 60 - (time.monotonic() - down)))
        assert staying(tenant_pods(t)) == before
    finally:
        stack.host.start_apiserver()
    until(lambda: condition(t.json("get", "node", NODE), "Ready"), lambda c: c.get("status") == "True",
          timeout=60, what="the node Ready again")
    until(lambda: tenant_pods(t, "-l", "app=web"),
          three_running)


def test_a_burst_of_300_pods_in_one_tenant_does_not_hold_up_another_tenants_pod(
        host: Kubectl, sliced: tuple[dict[str, Any], Kubectl], tmp_path: Path) -> None:
    obj, t = sliced
    ns = obj["metadata"]["namespace"]
    namespace = obj["status"]["sharedResources"]["namespace"]
    host.run("create", "-f", "-", input=json.dumps(vc("busy", ns, {"promoteResources": {
        "resources": {"cpu": "30", "memory": "64Gi", "pods": "320"}}})))  # beside the others, in the 40 the host has
    wait_phase(host, ns, "busy", "Completed", timeout=180)
    busy = tenant(host, ns, "busy", tmp_path)
    busy_ns = host.json("get", "vc", "busy", "-n", ns)["status"]["sharedResources"]["namespace"]
    busy.run("create", "deployment", "flood", "--image=docker.io/library/busybox:1.36", "--replicas=0")
    busy.run("set", "resources", "deployment", "flood", "--requests=cpu=10m,memory=16Mi")
    busy.run("scale", "deployment", "flood", "--replicas=300")
    until(lambda: len(host_pods(host, busy_ns)), lambda n: n >= 30, what="the flood under way")
    t.run("run", "quick", "--image=docker.io/library/busybox:1.36", "--restart=Never")
    created = time.monotonic()
    until(lambda: names.host_name("default", "quick") in host_pods(host, namespace), bool, timeout=30,
          what="the quiet tenant's host pod")
    took = time.monotonic() - created
    flooded = len(host_pods(host, busy_ns))
    print(f"quiet tenant's host pod after {took:.1f}s while the busy one had {flooded} of 300")
    assert took < 5.0
    until(lambda: len([p for p in busy.json("get", "pods", "-l", "app=flood")["items"]
                       if p["status"].get("phase") == "Running"]), lambda n: n == 300, timeout=240,
          what="all 300 flood pods Running")
    host.run("delete", "vc", "busy", "-n", ns, "--wait", timeout=240)
    t.run("delete", "pod", "quick", "--wait", timeout=90)


def test_slice_pods_run_only_on_the_slice_node_pool(host: Kubectl, sliced: tuple[dict[str, Any], Kubectl]) -> None:
    """An empty node outside the pool is where the host's scheduler would put them first."""
    obj, t = sliced
    namespace = obj["status"]["sharedResources"]["namespace"]
    host.run("apply", "-f", "-", input=json.dumps(fake_node("outside", 1, labels={"type": "outside"})))
    try:
        t.run("create", "deployment", "spread", "--image=docker.io/library/busybox:1.36", "--replicas=4")
        pods = until(lambda: [p for p in host_pods(host, namespace).values() if "spread" in p["metadata"]["name"]],
                     lambda ps: len(ps) == 4 and all(p["spec"].get("nodeName") for p in ps), what="4 placed host pods")
        assert {p["spec"]["nodeName"] for p in pods} <= {n["metadata"]["name"] for n in host.json(
            "get", "nodes", "-l", POOL)["items"]}
        terms = pods[0]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms == {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "type", "operator": "In", "values": ["kwok"]}]}]}
    finally:
        t.run("delete", "deployment", "spread", "--wait", timeout=90)
        host.run("delete", "node", "outside")


def test_a_slice_larger_than_the_host_has_free_waits_pending_and_starts_once_it_fits(
        host: Kubectl, sliced: tuple[dict[str, Any], Kubectl]) -> None:
    """The host has 40 cpu and 160Gi in its four kwok nodes, and ``sliced`` holds 4 cpu of them."""
    ns = sliced[0]["metadata"]["namespace"]
    host.run("create", "-f", "-", input=json.dumps(vc("greedy", ns, {"promoteResources": {
        "resources": {"cpu": "38", "memory": "8Gi"}}})))
    obj = until(lambda: host.json("get", "vc", "greedy", "-n", ns),
                lambda o: (o.get("status") or {}).get("reason") == "InsufficientNodes", what="greedy waiting")
    assert obj["status"]["phase"] == "Pending"
    assert re.search(r"the host cannot hold this slice: cpu 38 asked, 3\d free", obj["status"]["message"])
    assert "sharedResources" not in obj["status"], "no node promises what the host does not have"
    host.run("patch", "vc", "greedy", "-n", ns, "--type", "merge", "-p",
             json.dumps({"spec": {"promoteResources": {"resources": {"cpu": "30", "memory": "8Gi"}}}}))
    wait_phase(host, ns, "greedy", "Completed", timeout=180)
    grow = host.run("patch", "vc", "greedy", "-n", ns, "--type", "merge", "-p",
                    json.dumps({"spec": {"promoteResources": {"resources": {"cpu": "60", "memory": "8Gi"}}}}))
    assert grow.returncode == 0
    until(lambda: host.json("get", "events", "-n", ns, "--field-selector", "involvedObject.name=greedy")["items"],
          lambda es: any(e["reason"] == "InsufficientHostCapacity" for e in es), what="the refused growth told")
    capacity = host.json("get", "vc", "greedy", "-n", ns)["status"]["sharedResources"]["capacity"]
    assert capacity["cpu"] == "30", "a running slice keeps its size until the host has room for more"
    host.run("delete", "vc", "greedy", "-n", ns, "--wait", timeout=180)


def test_hibernating_takes_the_slice_off_the_host_and_waking_brings_it_back(
        host: Kubectl, sliced: tuple[dict[str, Any], Kubectl]) -> None:
    obj, t = sliced
    ns, namespace = obj["metadata"]["namespace"], obj["status"]["sharedResources"]["namespace"]
    before = {p["metadata"]["uid"] for p in tenant_pods(t, "-l", "app=web") if p["status"].get("phase") == "Running"}
    host.run("patch", "vc", "team", "-n", ns, "--type", "merge", "-p", '{"spec":{"hibernation":{"hibernated":true}}}')
    wait_phase(host, ns, "team", "Hibernated", timeout=120)
    assert host.run("get", "namespace", namespace, check=False).returncode != 0  # nothing of it left on the host
    host.run("patch", "vc", "team", "-n", ns, "--type", "merge", "-p", '{"spec":{"hibernation":{"hibernated":false}}}')
    wait_phase(host, ns, "team", "Completed", timeout=180)
    assert host.json("get", "resourcequota", names.QUOTA, "-n", namespace)["status"]["hard"]["requests.cpu"] == "4"

    def replaced(ps: list[dict[str, Any]]) -> bool:
        running = {p["metadata"]["uid"] for p in ps if p["status"].get("phase") == "Running"}
        return len(running) == 3 and not running & before
    until(lambda: tenant_pods(t, "-l", "app=web"), replaced, timeout=150, what="the web pods running again")


def test_deleting_the_cluster_removes_the_slice_namespace_and_everything_in_it(host: Kubectl, tmp_path: Path) -> None:
    ns = host.ensure_namespace("slices-gone")
    host.run("create", "-f", "-", input=json.dumps(vc("brief", ns, {"promoteResources": {"resources": {"cpu": "1"}}})))
    wait_phase(host, ns, "brief", "Completed", timeout=180)
    obj = host.json("get", "vc", "brief", "-n", ns)
    namespace = obj["status"]["sharedResources"]["namespace"]
    t = tenant(host, ns, "brief", tmp_path)
    until(lambda: t.run("get", "serviceaccount", "default", check=False).returncode, lambda rc: rc == 0,
          what="the tenant's default ServiceAccount")
    t.run("run", "one", "--image=docker.io/library/busybox:1.36", "--restart=Never")
    until(lambda: host_pods(host, namespace), lambda found: bool(found), what="a host pod")
    host.run("delete", "vc", "brief", "-n", ns, "--wait", timeout=180)
    assert host.run("get", "namespace", namespace, check=False).returncode != 0
    assert host.json("get", "pods", "-A", "-l", f"{names.VC_UID}={obj['metadata']['uid']}")["items"] == []
