"""Applications on shared slices, on the real-node lab: the tenant's Services, DNS and API reach its pods,
which run as real containers on the real nodes (the lab's slice node pool).

Two tenants on slices run the same application under the same names; each reaches its own by the
ClusterIP its own ``kubectl get svc`` shows and by DNS name, through the host's proxies, and the
tenant's API with the token of the pod's own ServiceAccount.
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from hack.harness import wait_until
from hack.images.build import PYTHON_CLIENT_IMAGE
from hack.realnodes import REAL_NODE_LABEL, STORAGE_CLASS, RealNodeLab
from hack.stack import Stack
from reconciler.shared import names, ranges
from tests.conftest import Kubectl, vc
from tests.support.promotion import tenant, wait_phase
from tests.support.waiting import until

pytestmark = pytest.mark.e2e

BUSYBOX = "docker.io/library/busybox:1.36"
KUBECTL = "registry.k8s.io/kubectl:v1.35.4"
SLICE = {"cpu": "1", "memory": "1Gi"}
NAMESPACE = "slice-apps"


@dataclass
class Shop:
    """A tenant on a slice with a ``web`` Deployment behind a NodePort Service ``web``."""

    name: str
    host: Kubectl
    tenant: Kubectl
    vc: dict[str, Any]

    @property
    def slice_namespace(self) -> str:
        return names.host_namespace(self.vc)


def web(page: str) -> list[dict[str, Any]]:
    labels = {"app": "web"}
    return [
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "labels": labels},
         "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": {
             "terminationGracePeriodSeconds": 1,
             "containers": [{"name": "httpd", "image": BUSYBOX,
                             "command": ["sh", "-c", f"mkdir -p /www && echo {page} > /www/index.html && "
                                                     "exec httpd -f -p 8080 -h /www"],
                             "ports": [{"name": "http", "containerPort": 8080}],
                             "readinessProbe": {"tcpSocket": {"port": "http"}, "periodSeconds": 1}}]}}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
         "spec": {"type": "NodePort", "selector": labels,
                  "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}},
    ]


def run_once(t: Kubectl, name: str, command: str, image: str = BUSYBOX, timeout: float = 120,
             mounts: list[dict[str, Any]] | None = None, **spec: Any) -> tuple[str, str]:
    """A pod that runs ``command`` to its end on the slice: its phase and what it wrote to its termination log
    (which the tenant's pod status carries back from the host)."""
    container: dict[str, Any] = {"name": "main", "image": image, "volumeMounts": mounts or []}
    if image == BUSYBOX:
        container["command"] = ["sh", "-c", command]
    else:
        container["args"] = command.split()
        container["terminationMessagePolicy"] = "FallbackToLogsOnError"
    t.run("delete", "pod", name, "--ignore-not-found", "--wait=true")
    t.run("create", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1, "containers": [container], **spec}}))

    pod = until(lambda: t.json("get", "pod", name), lambda p: p["status"].get("phase") in ("Succeeded", "Failed"),
                timeout, f"pod {name} ran to its end", interval=1)
    [status] = pod["status"]["containerStatuses"]
    return pod["status"]["phase"], (status["state"].get("terminated") or {}).get("message", "")


def retrying(command: str, tries: int = 60) -> str:
    """A shell command retried once a second until it succeeds (Services and names take a moment to spread)."""
    return f"for i in $(seq {tries}); do {command} && exit 0; sleep 1; done; exit 1"


@pytest.fixture(scope="module")
def shops(real_stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Shop]]:
    host = Kubectl(real_stack.kubeconfig, host_namespaces=True)
    ns = host.ensure_namespace(NAMESPACE)
    made = {}
    for name in ("shop-a", "shop-b"):
        host.run("create", "-f", "-", input=json.dumps(vc(name, ns, {"promoteResources": {"resources": SLICE}})))
    for name in ("shop-a", "shop-b"):
        wait_phase(host, ns, name, "Completed", timeout=240)
        t = tenant(host, ns, name, tmp_path_factory.mktemp(name))
        t.run("rollout", "status", "-n", "kube-system", "deployment/coredns", "--timeout=180s", timeout=200)
        t.run("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": web(f"{name}-page")}))
        t.run("rollout", "status", "deployment/web", "--timeout=120s", timeout=150)
        made[name] = Shop(name, host, t, host.json("get", "vc", name, "-n", ns))
    yield made
    for name in made:  # the lab as it was found: the slices' pods, claims and ranges gone
        host.run("delete", "vc", name, "-n", ns, "--wait=true", "--timeout=180s", check=False, timeout=200)


def test_each_tenant_gets_a_services_range_of_its_own_served_by_the_host(shops: dict[str, Shop]) -> None:
    host = shops["shop-a"].host
    held = {}
    for shop in shops.values():
        ip = shop.tenant.json("get", "service", "kubernetes")["spec"]["clusterIP"]
        [cidr] = [c for c in host.json("get", "servicecidrs")["items"]
                  if (c["metadata"].get("labels") or {}).get(names.VC_UID) == shop.vc["metadata"]["uid"]]
        block = cidr["spec"]["cidrs"][0]
        assert ranges.first_address(block) == ip
        assert shop.tenant.json("get", "service", "-n", "kube-system", "kube-dns")["spec"]["clusterIP"] == \
            ranges.dns_address(block)
        held[shop.name] = block
    assert held["shop-a"] != held["shop-b"]


def test_a_service_answers_by_the_ip_the_tenant_sees_and_by_its_names(shops: dict[str, Shop]) -> None:
    t = shops["shop-a"].tenant
    ip = t.json("get", "service", "web")["spec"]["clusterIP"]
    for i, url in enumerate((f"http://{ip}/", "http://web.default.svc.cluster.local/", "http://web/")):
        phase, page = run_once(t, f"fetch-{i}", retrying(f"timeout 5 wget -q -O /dev/termination-log {url}"))
        assert (phase, page.strip()) == ("Succeeded", "shop-a-page"), url
    # the tenant's EndpointSlice names its own pod, and the pod runs on a real node of the lab
    [pod] = t.json("get", "pods", "-l", "app=web")["items"]
    [es] = t.json("get", "endpointslices", "-l", "kubernetes.io/service-name=web")["items"]
    assert [e["addresses"] for e in es["endpoints"]] == [[pod["status"]["podIP"]]]
    host_pod = shops["shop-a"].host.json("get", "pod", "-n", shops["shop-a"].slice_namespace,
                                         names.host_name("default", pod["metadata"]["name"]))
    node = shops["shop-a"].host.json("get", "node", host_pod["spec"]["nodeName"])
    assert node["metadata"]["labels"].get(REAL_NODE_LABEL) == "true"


def test_two_tenants_with_the_same_service_never_collide(shops: dict[str, Shop]) -> None:
    seen = {}
    for shop in shops.values():
        phase, page = run_once(shop.tenant, "fetch-own", retrying(
            "timeout 5 wget -q -O /dev/termination-log http://web.default.svc.cluster.local/"))
        assert (phase, page.strip()) == ("Succeeded", f"{shop.name}-page")
        [host_svc] = shop.host.json("get", "services", "-n", shop.slice_namespace,
                                    f"--field-selector=metadata.name={names.host_name('default', 'web')}")["items"]
        seen[shop.name] = host_svc["spec"]["clusterIP"]
        assert host_svc["spec"]["clusterIP"] == shop.tenant.json("get", "service", "web")["spec"]["clusterIP"]
    assert seen["shop-a"] != seen["shop-b"]


def test_a_node_port_answers_at_the_address_of_the_tenants_node(shops: dict[str, Shop],
                                                                 real_lab: RealNodeLab) -> None:
    shop = shops["shop-b"]
    port = shop.tenant.json("get", "service", "web")["spec"]["ports"][0]["nodePort"]
    node = shop.tenant.json("get", "node", names.NODE_NAME)
    [address] = [a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP"]
    assert address in {n.address for n in real_lab.nodes()}  # a real node's, where the host's proxies listen

    def fetch() -> str | None:
        try:
            with urllib.request.urlopen(f"http://{address}:{port}/", timeout=2) as answer:
                return answer.read().decode().strip()
        except OSError:
            return None
    assert until(fetch, bool, 60, f"the NodePort {port} answering at {address}", interval=1) == "shop-b-page"


def test_a_pod_reaches_the_tenant_api_as_its_own_service_account(shops: dict[str, Shop]) -> None:
    shop = shops["shop-a"]
    t = shop.tenant
    t.run("create", "serviceaccount", "reader")
    phase, said = run_once(t, "whoami", "auth whoami -o jsonpath={.status.userInfo.username}", image=KUBECTL,
                           serviceAccountName="reader")
    host_pod = names.host_name("default", "whoami")
    log = shop.host.run("logs", "-n", shop.slice_namespace, host_pod).stdout
    assert (phase, log.strip()) == ("Succeeded", "system:serviceaccount:default:reader"), said
    # a running pod's tokens are bound to it, in a host Secret of the slice (never a host token), which goes
    # with the pod: the one whoami used is gone now that it has ended
    [web] = t.json("get", "pods", "-l", "app=web")["items"]
    secret = shop.host.json("get", "secret", "-n", shop.slice_namespace,
                            names.host_name("default", f"{web['metadata']['name']}.token"))
    assert secret["metadata"]["labels"][names.TOKEN_OF] == web["metadata"]["uid"]
    until(lambda: shop.host.run("get", "secret", "-n", shop.slice_namespace, "whoami.token-x-default",
                                check=False).returncode, lambda rc: rc != 0, 90, "the ended pod's tokens collected")
    # and the environment a kubelet would give it points at the tenant's kubernetes Service
    phase, env = run_once(t, "env", "echo $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT:$WEB_SERVICE_PORT_HTTP "
                                     "> /dev/termination-log")
    ip = t.json("get", "service", "kubernetes")["spec"]["clusterIP"]
    assert (phase, env.strip()) == ("Succeeded", f"{ip}:443:80")


def test_the_python_client_in_a_slice_pod_loads_its_in_cluster_config_and_acts_as_its_service_account(
        shops: dict[str, Shop]) -> None:
    shop = shops["shop-b"]
    t = shop.tenant
    t.run("create", "serviceaccount", "py")
    t.run("create", "rolebinding", "py-view", "--clusterrole=view", "--serviceaccount=default:py")
    script = ("from kubernetes import client, config\n"
              "config.load_incluster_config()\n"
              "api = client.CoreV1Api()\n"
              "print(' '.join(sorted(s.metadata.name for s in api.list_namespaced_service('default').items)))\n"
              "try:\n"
              "    api.list_namespaced_secret('kube-system')\n"
              "except client.ApiException as e:\n"
              "    print(e.status)\n")
    t.run("create", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pyclient"},
        "spec": {"restartPolicy": "Never", "serviceAccountName": "py", "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "main", "image": PYTHON_CLIENT_IMAGE, "args": ["-c", script]}]}}))
    pod = until(lambda: t.json("get", "pod", "pyclient"),
                lambda p: p["status"].get("phase") in ("Succeeded", "Failed"), 120, "pyclient ran", interval=1)
    out = t.run("logs", "pyclient").stdout.split("\n")
    # the tenant's own Services, as its token may list them, then 403 where the view role does not reach
    services = set(out[0].split())
    assert pod["status"]["phase"] == "Succeeded" and {"kubernetes", "web"} <= services and out[1] == "403", out
    assert services == {s["metadata"]["name"] for s in t.json("get", "services")["items"]}


def test_a_pod_without_automounted_token_gets_none(shops: dict[str, Shop]) -> None:
    shop = shops["shop-b"]
    phase, said = run_once(shop.tenant, "no-token", "ls /var/run/secrets/kubernetes.io/serviceaccount "
                                                    "> /dev/termination-log 2>&1; true",
                           automountServiceAccountToken=False)
    assert phase == "Succeeded" and "No such file" in said
    host_pod = shop.host.json("get", "pod", "-n", shop.slice_namespace, names.host_name("default", "no-token"))
    assert not any("projected" in v for v in host_pod["spec"].get("volumes") or [])


def test_a_projected_token_with_its_own_audience_and_expiry_is_served(shops: dict[str, Shop]) -> None:
    t = shops["shop-b"].tenant
    volume = {"name": "vault", "projected": {"sources": [{"serviceAccountToken": {
        "path": "token", "audience": "vault.example", "expirationSeconds": 600}}]}}
    phase, token = run_once(t, "vault", "cat /vault/token > /dev/termination-log", volumes=[volume],
                            mounts=[{"name": "vault", "mountPath": "/vault"}])
    assert phase == "Succeeded"
    pod = t.json("get", "pod", "vault")
    review = json.loads(t.run("create", "-o", "json", "-f", "-", input=json.dumps({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
        "spec": {"token": token, "audiences": ["vault.example"]}})).stdout)
    assert review["status"]["authenticated"] is True
    assert review["status"]["user"]["username"] == "system:serviceaccount:default:default"
    assert review["status"]["audiences"] == ["vault.example"]
    assert review["status"]["user"]["extra"]["authentication.kubernetes.io/pod-uid"] == [pod["metadata"]["uid"]]


def test_a_host_service_deleted_behind_the_syncers_back_is_made_again(shops: dict[str, Shop]) -> None:
    shop = shops["shop-b"]
    name = names.host_name("default", "web")
    before = shop.host.json("get", "service", "-n", shop.slice_namespace, name)
    shop.host.run("delete", "service", "-n", shop.slice_namespace, name)

    def again() -> dict[str, Any] | None:
        out = shop.host.run("get", "service", "-n", shop.slice_namespace, name, "-o", "json", check=False)
        return json.loads(out.stdout) if out.returncode == 0 else None
    after = until(again, bool, 90, "the host Service made again", interval=1)
    assert after is not None
    assert after["metadata"]["uid"] != before["metadata"]["uid"]
    assert after["spec"]["clusterIP"] == before["spec"]["clusterIP"]


def test_dns_comes_back_after_the_tenants_coredns_pods_are_deleted(shops: dict[str, Shop]) -> None:
    t = shops["shop-a"].tenant
    t.run("delete", "pods", "-n", "kube-system", "-l", "k8s-app=kube-dns", "--wait=false")
    t.run("rollout", "status", "-n", "kube-system", "deployment/coredns", "--timeout=120s", timeout=150)
    phase, page = run_once(t, "after-dns", retrying("timeout 5 wget -q -O /dev/termination-log http://web/"))
    assert (phase, page.strip()) == ("Succeeded", "shop-a-page")


def test_a_deleted_tenant_service_takes_its_host_service_and_endpoints_with_it(shops: dict[str, Shop]) -> None:
    shop = shops["shop-b"]
    t = shop.tenant
    t.run("create", "service", "clusterip", "gone", "--tcp=80:8080")
    name = names.host_name("default", "gone")
    wait_until(lambda: shop.host.run("get", "service", "-n", shop.slice_namespace, name, check=False).returncode == 0,
               60, "the host Service of gone", interval=1)
    t.run("delete", "service", "gone")
    wait_until(lambda: shop.host.run("get", "service", "-n", shop.slice_namespace, name, check=False).returncode != 0,
               60, "the host Service of gone deleted", interval=1)
    mirrored = shop.host.json("get", "endpointslices", "-n", shop.slice_namespace,
                              f"-l=kubernetes.io/service-name={name}")["items"]
    assert mirrored == []


TALKER = "i=0; while true; do echo line $i; i=$((i+1)); sleep 0.5; done"


def test_logs_reach_a_slice_pod_through_the_tenant_with_their_options(shops: dict[str, Shop]) -> None:
    t = shops["shop-a"].tenant
    t.run("run", "talker", f"--image={BUSYBOX}", "--restart=Never", "--", "sh", "-c", TALKER)
    t.run("wait", "pod/talker", "--for=condition=Ready", "--timeout=90s", timeout=100)
    until(lambda: t.run("logs", "talker").stdout, lambda out: out.count("line") >= 4, 30, "four lines logged")
    assert t.run("logs", "talker", "-c", "talker", "--tail=2").stdout.count("\n") == 2
    assert t.run("logs", "talker", "--since=1h", "--timestamps").stdout.startswith("20")
    proc = subprocess.Popen(t.argv("logs", "-f", "talker", "--tail=1"), stdout=subprocess.PIPE, text=True)
    try:
        lines = [proc.stdout.readline() for _ in range(3)] if proc.stdout else []
    finally:
        proc.kill()
    assert len(lines) == 3 and all(line.startswith("line ") for line in lines)  # -f keeps streaming new lines


def test_previous_logs_are_those_of_the_container_before_its_restart(shops: dict[str, Shop]) -> None:
    t = shops["shop-b"].tenant
    t.run("run", "restarter", f"--image={BUSYBOX}", "--restart=Always", "--", "sh", "-c",
          "echo run at $(date +%s%N); sleep 2; exit 1")
    until(lambda: t.json("get", "pod", "restarter"),
          lambda p: (p["status"].get("containerStatuses") or [{}])[0].get("restartCount", 0) >= 1, 90,
          "the container restarted")
    previous = t.run("logs", "restarter", "--previous").stdout
    assert previous.startswith("run at ")


def test_exec_and_attach_reach_a_slice_pod_through_the_tenant(shops: dict[str, Shop]) -> None:
    t = shops["shop-a"].tenant
    [pod] = t.json("get", "pods", "-l", "app=web")["items"]
    name = pod["metadata"]["name"]
    assert t.run("exec", name, "--", "cat", "/www/index.html").stdout == "shop-a-page\n"
    assert t.run("exec", "-i", name, "--", "tr", "a-z", "A-Z", input="hello slice\n").stdout == "HELLO SLICE\n"
    failed = t.run("exec", name, "--", "sh", "-c", "exit 3", check=False)
    assert failed.returncode == 3  # the command's exit code comes back through both apiservers
    t.run("wait", "pod/talker", "--for=condition=Ready", "--timeout=30s")
    proc = subprocess.Popen(t.argv("attach", "talker"), stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
    finally:
        proc.kill()
    assert line.startswith("line ")


def test_port_forward_reaches_a_slice_pod_through_the_tenant(shops: dict[str, Shop]) -> None:
    t = shops["shop-b"].tenant
    [pod] = t.json("get", "pods", "-l", "app=web")["items"]
    proc = subprocess.Popen(t.argv("port-forward", f"pod/{pod['metadata']['name']}", ":8080"),
                            stdout=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline() if proc.stdout else ""
        port = int(first.split("127.0.0.1:")[1].split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as answer:
            assert answer.read().decode() == "shop-b-page\n"
    finally:
        proc.kill()


def test_vc_apiserver_killed_while_services_are_made_leaves_one_host_service_per_tenant_service(
        real_stack: Stack, shops: dict[str, Shop]) -> None:
    shop = shops["shop-b"]
    t = shop.tenant
    t.run("create", "namespace", "burst")
    t.run("apply", "-n", "burst", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": f"svc-{i}"},
         "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}} for i in range(20)]}))

    def mirrored() -> set[str]:
        found = shop.host.json("get", "services", "-n", shop.slice_namespace)["items"]
        return {s["metadata"]["name"] for s in found}
    until(mirrored, lambda seen: any(n.endswith("-x-burst") for n in seen), 60, "the first host Service")
    real_stack.api.proc.kill()  # mid-way
    real_stack.api.start(timeout=60)
    want = {names.host_name(s["metadata"]["namespace"], s["metadata"]["name"])
            for s in t.json("get", "services", "-A")["items"] if s["spec"].get("clusterIP") not in (None, "None")}
    until(mirrored, lambda seen: seen == want, 120, "exactly one host Service per tenant Service")
    by_name = {s["metadata"]["name"]: s for s in shop.host.json("get", "services", "-n", shop.slice_namespace)["items"]}
    for s in t.json("get", "services", "-n", "burst")["items"]:
        assert by_name[names.host_name("burst", s["metadata"]["name"])]["spec"]["clusterIP"] == s["spec"]["clusterIP"]
    t.run("delete", "namespace", "burst", "--wait=false")
    until(mirrored, lambda seen: not any(n.endswith("-x-burst") for n in seen), 120, "the burst's host Services gone")


def test_a_claim_is_served_by_a_host_claim_and_its_data_outlives_the_pod(shops: dict[str, Shop]) -> None:
    shop = shops["shop-a"]
    t = shop.tenant
    [offered] = t.json("get", "storageclasses")["items"]  # the lab's class, offered to slices, the default
    assert offered["metadata"]["name"] == STORAGE_CLASS
    assert offered["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"] == "true"
    t.run("create", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "64Mi"}}}}))
    until(lambda: t.json("get", "pvc", "data"), lambda c: c["status"].get("phase") == "Bound", 60, "the claim Bound")
    mount = [{"name": "data", "mountPath": "/data"}]
    volume = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
    phase, _ = run_once(t, "writer", "echo kept > /data/note", volumes=volume, mounts=mount)
    assert phase == "Succeeded"
    held = shop.host.json("get", "pvc", "-n", shop.slice_namespace, names.host_name("default", "data"))
    assert held["status"]["phase"] == "Bound"  # a real volume of the host, where the host pod ran
    phase, note = run_once(t, "reader", "cat /data/note > /dev/termination-log", volumes=volume, mounts=mount)
    assert (phase, note.strip()) == ("Succeeded", "kept")
    for pod in ("writer", "reader"):
        t.run("delete", "pod", pod, "--wait=true")
    t.run("delete", "pvc", "data", "--wait=true", timeout=90)
    until(lambda: shop.host.run("get", "pvc", "-n", shop.slice_namespace, names.host_name("default", "data"),
                                check=False).returncode, lambda rc: rc != 0, 90, "the host claim deleted with it")
    assert [v for v in t.json("get", "pv")["items"] if v["spec"]["claimRef"]["name"] == "data"] == []


def test_a_generic_ephemeral_volume_lives_and_goes_with_its_pod(shops: dict[str, Shop]) -> None:
    shop = shops["shop-b"]
    t = shop.tenant
    volume = [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "32Mi"}}}}}}]
    phase, said = run_once(t, "scratcher", "echo ok > /scratch/x && cat /scratch/x > /dev/termination-log",
                           volumes=volume, mounts=[{"name": "scratch", "mountPath": "/scratch"}])
    assert (phase, said.strip()) == ("Succeeded", "ok")
    t.run("delete", "pod", "scratcher", "--wait=true")
    until(lambda: shop.host.run("get", "pvc", "-n", shop.slice_namespace,
                                names.host_name("default", "scratcher-scratch"), check=False).returncode,
          lambda rc: rc != 0, 120, "the ephemeral volume's host claim gone with its pod")


def test_a_claim_of_a_class_the_slice_does_not_offer_holds_its_pod_back_with_the_reason(
        shops: dict[str, Shop]) -> None:
    t = shops["shop-b"].tenant
    t.run("create", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "elsewhere"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
                 "resources": {"requests": {"storage": "64Mi"}}}}))
    t.run("create", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "stuck"},
        "spec": {"nodeName": names.NODE_NAME, "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "elsewhere"}}],
                 "containers": [{"name": "c", "image": BUSYBOX, "command": ["sleep", "60"]}]}}))
    pod = until(lambda: t.json("get", "pod", "stuck"),
                lambda p: any(c["type"] == names.HOST_SCHEDULED and c.get("reason") == "MissingReference"
                              for c in p["status"].get("conditions") or []), 60, "the pod held back")
    [held] = [c for c in pod["status"]["conditions"] if c["type"] == names.HOST_SCHEDULED]
    assert "elsewhere" in held["message"] and STORAGE_CLASS in held["message"]
    t.run("delete", "pod", "stuck", "--wait=false")
    t.run("delete", "pvc", "elsewhere", "--wait=false")


def test_names_resolve_in_the_tenants_dns_only(shops: dict[str, Shop]) -> None:
    """kubernetes.default is the tenant's apiserver, a headless Service names its pods, a multi-port Service
    answers on each port; the host's own names are not there."""
    t = shops["shop-a"].tenant
    t.run("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web-pods"},
         "spec": {"clusterIP": "None", "selector": {"app": "web"}, "ports": [{"port": 8080}]}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web-two"},
         "spec": {"selector": {"app": "web"}, "ports": [{"name": "a", "port": 81, "targetPort": "http"},
                                                        {"name": "b", "port": 82, "targetPort": 8080}]}}]}))
    api = t.json("get", "service", "kubernetes")["spec"]["clusterIP"]
    [pod] = t.json("get", "pods", "-l", "app=web")["items"]
    script = ("nslookup kubernetes.default.svc.cluster.local; nslookup web-pods.default.svc.cluster.local; "
              "nslookup kube-dns.kube-system.svc.cluster.local; "
              "nslookup vc-apiserver.kosmos-system.svc.cluster.local || echo HOST-NAME-UNKNOWN")
    phase, said = run_once(t, "resolver", f"({script}) > /dev/termination-log 2>&1")
    assert phase == "Succeeded", said
    assert api in said and pod["status"]["podIP"] in said
    assert "HOST-NAME-UNKNOWN" in said and "10.96.0.1\n" not in said
    for port in (81, 82):
        phase, page = run_once(t, f"port-{port}", retrying(
            f"timeout 5 wget -q -O /dev/termination-log http://web-two:{port}/"))
        assert (phase, page.strip()) == ("Succeeded", "shop-a-page"), port


def test_a_running_slice_pod_is_resized_in_place_and_reports_the_tenants_generation(shops: dict[str, Shop]) -> None:
    t = shops["shop-a"].tenant
    t.run("create", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "resized"},
        "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
            "name": "main", "image": BUSYBOX, "command": ["sleep", "3600"],
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "200m", "memory": "64Mi"}}}]}}))
    t.run("wait", "pod/resized", "--for=condition=Ready", "--timeout=90s", timeout=100)
    t.run("patch", "pod", "resized", "--subresource=resize", "-p",
          json.dumps({"spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": "150m"},
                                                                             "limits": {"cpu": "300m"}}}]}}))
    pod = until(lambda: t.json("get", "pod", "resized"),
                lambda p: p["status"].get("observedGeneration") == p["metadata"]["generation"] and
                ((p["status"]["containerStatuses"][0].get("resources") or {}).get("limits") or {}).get("cpu") == "300m",
                60, "the resize applied by the host's kubelet and observed")
    assert pod["metadata"]["generation"] == 2
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0  # in place: the container kept running
    host = shops["shop-a"].host.json("get", "pod", "-n", shops["shop-a"].slice_namespace,
                                     names.host_name("default", "resized"))
    assert host["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "150m"


def test_a_deadline_set_on_a_running_slice_pod_ends_it(shops: dict[str, Shop]) -> None:
    t = shops["shop-b"].tenant
    t.run("run", "deadline", f"--image={BUSYBOX}", "--restart=Never", "--", "sleep", "3600")
    t.run("wait", "pod/deadline", "--for=condition=Ready", "--timeout=90s", timeout=100)
    t.run("patch", "pod", "deadline", "-p", json.dumps({"spec": {"activeDeadlineSeconds": 5}}))
    pod = until(lambda: t.json("get", "pod", "deadline"), lambda p: p["status"].get("phase") == "Failed", 60,
                "the pod failed at its deadline")
    assert pod["status"]["reason"] == "DeadlineExceeded"


def test_kubectl_debug_runs_an_ephemeral_container_in_a_slice_pod(shops: dict[str, Shop]) -> None:
    t = shops["shop-a"].tenant
    [pod] = t.json("get", "pods", "-l", "app=web")["items"]
    name = pod["metadata"]["name"]
    t.run("debug", name, f"--image={BUSYBOX}", "--container=debugger", "--", "sh", "-c",
          "cat /www/index.html 2>/dev/null || echo debugging; sleep 60")
    until(lambda: t.json("get", "pod", name),
          lambda p: any(s["name"] == "debugger" and "running" in s["state"]
                        for s in p["status"].get("ephemeralContainerStatuses") or []), 60,
          "the ephemeral container running")
    assert until(lambda: t.run("logs", name, "-c", "debugger").stdout, bool, 30, "the debugger's output") == \
        "debugging\n"  # its own filesystem, beside the pod's containers
