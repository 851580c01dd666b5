"""Real nodes: kubelet + containerd in network namespaces of their own, under a real host.

The lab (``real_stack`` in tests/conftest.py, hack/realnodes.py) is started once per run: a host
with a scheduler and node lifecycle, two real nodes (the first labelled control-plane), the kwok
nodes beside them, vc-apiserver registered with the host, and a node agent on each real node.
Images are the ones hack/images.py builds locally; nothing is pulled.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from hack.harness import LAB_GATEWAY, binary, free_port, wait_until
from hack.realnodes import CONTROL_PLANE_ROLE, RealNode, RealNodeLab
from hack.stack import Stack
from reconciler.runtime.pods import COMPONENT, OWNER
from tests.conftest import Kubectl, vc
from tests.support.promotion import assert_returned, claims, ready_tenant_nodes, tenant, wait_phase

pytestmark = pytest.mark.e2e

BUSYBOX = "docker.io/library/busybox:1.36"


def pod(name: str, node: str, command: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": name}},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1,
                     "tolerations": [{"key": CONTROL_PLANE_ROLE, "operator": "Exists"}],
                     "containers": [{"name": "main", "image": BUSYBOX, "command": ["sh", "-c", command]}], **spec}}


def run_pod(stack: Stack, namespace: str, manifest: dict[str, Any], timeout: str = "60s") -> dict[str, Any]:
    stack.host.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(manifest))
    stack.host.kubectl("wait", "-n", namespace, f"pod/{manifest['metadata']['name']}", "--for=condition=Ready",
                       f"--timeout={timeout}")
    return json.loads(stack.host.kubectl("get", "-n", namespace, "pod", manifest["metadata"]["name"],
                                         "-o", "json").stdout)


@pytest.fixture
def host_namespace(real_stack: Stack, request: pytest.FixtureRequest) -> Any:
    name = f"rn-{request.node.name[5:30].replace('_', '-').strip('-')}"
    real_stack.host.kubectl("create", "namespace", name)
    yield name
    real_stack.host.kubectl("delete", "namespace", name, "--wait=false", check=False)


def test_real_nodes_register_ready_with_their_runtime_and_roles(real_stack: Stack, real_lab: RealNodeLab) -> None:
    nodes = {n["metadata"]["name"]: n for n in json.loads(
        real_stack.host.kubectl("get", "nodes", "-o", "json").stdout)["items"]}
    control_plane, worker = real_lab.nodes()
    for node in (control_plane, worker):
        seen = nodes[node.name]
        info = seen["status"]["nodeInfo"]
        assert info["kubeletVersion"] == "v1.35.4"
        assert info["containerRuntimeVersion"].startswith("containerd://")
        assert {"type": "InternalIP", "address": node.address} in seen["status"]["addresses"]
        assert any(c["type"] == "Ready" and c["status"] == "True" for c in seen["status"]["conditions"])
    assert CONTROL_PLANE_ROLE in nodes[control_plane.name]["metadata"]["labels"]
    assert {"key": CONTROL_PLANE_ROLE, "effect": "NoSchedule"} in nodes[control_plane.name]["spec"]["taints"]
    assert CONTROL_PLANE_ROLE not in nodes[worker.name]["metadata"]["labels"]
    assert not nodes[worker.name]["spec"].get("taints")


def test_a_busybox_pod_runs_real_containers_with_logs_exec_and_port_forward(
        real_stack: Stack, real_lab: RealNodeLab, host_namespace: str) -> None:
    worker = real_lab.nodes()[1]
    seen = run_pod(real_stack, host_namespace, pod(
        "web", worker.name, "echo started on $(hostname); mkdir -p /www; echo served-by-busybox > /www/index.html;"
                            " exec httpd -f -p 8080 -h /www"))
    assert seen["spec"]["nodeName"] == worker.name
    assert seen["status"]["podIP"].startswith(worker.subnet.rsplit(".", 2)[0])
    k = real_stack.host.kubectl
    wait_until(lambda: "started on web" in k("logs", "-n", host_namespace, "web").stdout, 20, "the pod's log")
    assert k("exec", "-n", host_namespace, "web", "--", "cat", "/www/index.html").stdout == "served-by-busybox\n"
    assert k("exec", "-i", "-n", host_namespace, "web", "--", "wc", "-c", input="twelve bytes").stdout.strip() == "12"

    port = free_port()
    forward = subprocess.Popen([binary("kubectl"), "--kubeconfig", str(real_stack.kubeconfig), "port-forward",
                                "-n", host_namespace, "pod/web", f"{port}:8080"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def answered() -> bool:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/index.html", timeout=3) as resp:
                return resp.read() == b"served-by-busybox\n"
        wait_until(answered, 20, "the page through kubectl port-forward", interval=0.3)
    finally:
        forward.terminate()
        forward.wait(timeout=10)


def test_pods_on_different_nodes_reach_each_other_and_the_host(
        real_stack: Stack, real_lab: RealNodeLab, host_namespace: str) -> None:
    control_plane, worker = real_lab.nodes()
    server = run_pod(real_stack, host_namespace, pod(
        "server", control_plane.name, "mkdir -p /www; echo from-$(hostname) > /www/index.html; exec httpd -f -p 8080 -h /www"))
    run_pod(real_stack, host_namespace, pod("client", worker.name, "exec sleep 3600"))
    ip = server["status"]["podIP"]
    assert ip.startswith(control_plane.subnet.rsplit(".", 2)[0])
    out = real_stack.host.kubectl("exec", "-n", host_namespace, "client", "--", "wget", "-q", "-O-",
                                  f"http://{ip}:8080/index.html")
    assert out.stdout == "from-server\n"
    # and the pod's address is routed from the machine itself (the host apiserver's namespace)
    with socket.create_connection((ip, 8080), timeout=5) as conn:
        conn.sendall(b"GET /index.html HTTP/1.0\r\n\r\n")
        time.sleep(0.2)
        assert b"from-server" in conn.recv(4096)


def deployment(name: str, command: str, replicas: int = 1) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"terminationGracePeriodSeconds": 1, "containers": [
                                      {"name": "main", "image": BUSYBOX, "command": ["sh", "-c", command]}]}}}}


@dataclass
class Edge:
    """A VirtualCluster with the real worker promoted into it."""

    host: Kubectl
    namespace: str
    tenant: Kubectl
    worker: RealNode


@pytest.fixture(scope="module")
def edge(real_stack: Stack, real_lab: RealNodeLab, tmp_path_factory: pytest.TempPathFactory) -> Edge:
    worker = real_lab.nodes()[1]
    host = Kubectl(real_stack.kubeconfig, host_namespaces=True)
    ns = host.ensure_namespace("real-promo")
    host.run("create", "-f", "-", input=json.dumps(vc("edge", ns, {"promoteResources": {"nodes": [worker.name]}})))
    wait_phase(host, ns, "edge", "Completed", timeout=240)
    return Edge(host, ns, tenant(host, ns, "edge", tmp_path_factory.mktemp("edge")), worker)


def control_plane_objects(host: Kubectl, namespace: str) -> dict[str, list[dict[str, Any]]]:
    selector = f"{OWNER}=edge"
    return {kind: host.json("get", kind, "-n", namespace, "-l", selector)["items"]
            for kind in ("pods", "services", "secrets", "persistentvolumeclaims", "statefulsets", "deployments")}


def test_the_tenant_control_plane_runs_as_real_pods_on_the_control_plane_node(
        real_lab: RealNodeLab, edge: Edge) -> None:
    control_plane = real_lab.nodes()[0]

    def every_component_ready() -> bool:
        """Ready is the tenant apiserver answering; a controller-manager that started before it did
        may still be in its restart back-off then (as kubeadm's static pods are at first boot)."""
        pods = control_plane_objects(edge.host, edge.namespace)["pods"]
        return len(pods) == 4 and all(
            p["status"].get("phase") == "Running" and all(c["ready"] for c in p["status"]["containerStatuses"])
            for p in pods)
    wait_until(every_component_ready, 120, "every control-plane pod Ready", interval=1)
    objs = control_plane_objects(edge.host, edge.namespace)
    components = {p["metadata"]["labels"][COMPONENT]: p for p in objs["pods"]}
    assert set(components) == {"etcd", "apiserver", "controller-manager", "scheduler"}
    for component, p in components.items():
        assert p["spec"]["nodeName"] == control_plane.name, component
    [claim] = objs["persistentvolumeclaims"]
    assert claim["status"]["phase"] == "Bound"  # etcd's data on a local volume of the control-plane node
    running = control_plane.running_pods()
    assert {(edge.namespace, p["metadata"]["name"]) for p in objs["pods"]} <= running
    endpoint = edge.host.json("get", "vc", "edge", "-n", edge.namespace)["status"]["controlPlaneEndpoint"]
    assert endpoint.startswith(f"https://{control_plane.address}:")  # the node's address, the Service's NodePort
    assert edge.tenant.run("get", "--raw", "/readyz").stdout == "ok"


def test_a_promoted_real_node_is_ready_in_the_tenant_and_runs_its_containers(edge: Edge) -> None:
    t, worker = edge.tenant, edge.worker
    assert ready_tenant_nodes(t) == [worker.name]
    seen = t.json("get", "node", worker.name)
    assert seen["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
    assert {"type": "InternalIP", "address": worker.address} in seen["status"]["addresses"]
    # The host's Node stays, claimed: the host no longer schedules there.
    assert claims(edge.host)[worker.name]

    t.run("create", "namespace", "apps")
    t.run("apply", "-n", "apps", "-f", "-", input=json.dumps(deployment(
        "hello", "echo hello from $(hostname); mkdir -p /www; echo tenant-page > /www/index.html;"
                 " exec httpd -f -p 8080 -h /www")))
    t.run("rollout", "status", "-n", "apps", "deployment/hello", "--timeout=90s", timeout=120)
    [p] = t.json("get", "pods", "-n", "apps", "-l", "app=hello")["items"]
    assert p["spec"]["nodeName"] == worker.name and p["status"]["phase"] == "Running"
    assert p["status"]["podIP"].startswith(worker.subnet.rsplit(".", 2)[0])
    name = p["metadata"]["name"]
    wait_until(lambda: f"hello from {name}" in t.run("logs", "-n", "apps", name).stdout, 20, "the tenant pod's log")
    assert t.run("exec", "-n", "apps", name, "--", "cat", "/etc/hostname").stdout.strip() == name
    # Only the tenant's pods run there (its add-ons included): the host's were drained before the kubelet moved.
    assert {ns for ns, _ in worker.running_pods()} <= {"apps", "kube-system"}


def test_tenant_add_ons_resolve_names_and_route_service_addresses(edge: Edge) -> None:
    t = edge.tenant
    t.run("rollout", "status", "-n", "kube-system", "daemonset/kube-proxy", "--timeout=90s", timeout=120)
    t.run("rollout", "status", "-n", "kube-system", "deployment/coredns", "--timeout=120s", timeout=150)
    t.run("expose", "-n", "apps", "deployment/hello", "--port=80", "--target-port=8080")
    t.run("apply", "-n", "apps", "-f", "-", input=json.dumps(deployment("probe", "exec sleep 3600")))
    t.run("rollout", "status", "-n", "apps", "deployment/probe", "--timeout=90s", timeout=120)
    [probe] = t.json("get", "pods", "-n", "apps", "-l", "app=probe")["items"]
    name = probe["metadata"]["name"]

    def lookup() -> bool:
        out = t.run("exec", "-n", "apps", name, "--", "nslookup", "kubernetes.default.svc.cluster.local",
                    check=False)
        return out.returncode == 0 and "10.96.0.1" in out.stdout
    wait_until(lookup, 60, "kubernetes.default resolved from a tenant pod", interval=1)
    service_ip = t.json("get", "service", "-n", "apps", "hello")["spec"]["clusterIP"]

    def fetch(url: str) -> str:
        out = t.run("exec", "-n", "apps", name, "--", "wget", "-q", "-O-", url, check=False)
        return out.stdout
    wait_until(lambda: fetch(f"http://{service_ip}/index.html") == "tenant-page\n", 60,
               "the Service's ClusterIP routed to its pod", interval=1)
    assert fetch("http://hello.apps.svc.cluster.local/index.html") == "tenant-page\n"


def test_deleting_the_cluster_removes_its_pods_and_sends_the_real_node_home(
        real_stack: Stack, real_lab: RealNodeLab, edge: Edge) -> None:
    host, worker = edge.host, edge.worker
    host.run("delete", "vc", "edge", "-n", edge.namespace, "--timeout=180s", timeout=200)
    assert control_plane_objects(host, edge.namespace) == {
        kind: [] for kind in ("pods", "services", "secrets", "persistentvolumeclaims", "statefulsets", "deployments")}
    real_lab.wait_ready(worker.name, 90)
    assert_returned(host, [worker.name])
    assert host.json("get", "node", worker.name)["status"]["nodeInfo"]["containerRuntimeVersion"].startswith(
        "containerd://")
    back = host.ensure_namespace("real-home")
    run_pod(real_stack, back, pod("home", worker.name, "echo home; exec sleep 3600"))
    wait_until(lambda: "home" in real_stack.host.kubectl("logs", "-n", back, "home").stdout, 20, "a host pod's log")
    # Nothing of the tenant runs on the node any more: its kubelet serves the host's pods only.
    def only_host_pods() -> bool:
        listed = host.json("get", "pods", "-A", "--field-selector", f"spec.nodeName={worker.name}")["items"]
        known = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in listed}
        running = worker.running_pods()
        return (back, "home") in running and running <= known
    wait_until(only_host_pods, 60, "only the host's pods running on the node", interval=1)


# -- faults on the production path: each converges, and the node is never half in two clusters ------------

def kubelet_server(node: RealNode) -> str:
    return str(yaml.safe_load(node.kubeconfig.read_text())["clusters"][0]["cluster"]["server"])


def assert_in_one_cluster(host: Kubectl, t: Kubectl, node: RealNode) -> None:
    """Where the kubelet's files point is where the node is Ready; the host keeps it claimed meanwhile."""
    if kubelet_server(node).startswith(f"https://{LAB_GATEWAY}:"):
        assert node.name not in ready_tenant_nodes(t)
    else:
        assert claims(host)[node.name], "a node serving a tenant must stay claimed in the host"


@dataclass
class Faulty:
    host: Kubectl
    namespace: str
    tenant: Kubectl
    worker: RealNode


@pytest.fixture(scope="module")
def faulty(real_stack: Stack, real_lab: RealNodeLab, tmp_path_factory: pytest.TempPathFactory) -> Faulty:
    """A cluster promoted while vc-apiserver is killed after the claim and the node agent mid-join."""
    worker = real_lab.nodes()[1]
    host = Kubectl(real_stack.kubeconfig, host_namespaces=True)
    ns = host.ensure_namespace("real-faults")
    host.run("create", "-f", "-", input=json.dumps(vc("faulty", ns, {"promoteResources": {"nodes": [worker.name]}})))
    wait_until(lambda: claims(host)[worker.name], 180, "the worker claimed", interval=0.2)
    real_stack.api.proc.kill()  # vc-apiserver dies with the node claimed, not yet joined
    real_stack.api.start(timeout=60)
    wait_until(lambda: not kubelet_server(worker).startswith(f"https://{LAB_GATEWAY}:"), 180,
               "the agent's join under way", interval=0.05)
    worker.proc("node-agent").signal(signal.SIGKILL)  # the agent dies mid-join
    time.sleep(2)
    worker.start_agent(real_stack.agent_certs)
    wait_phase(host, ns, "faulty", "Completed", timeout=240)
    return Faulty(host, ns, tenant(host, ns, "faulty", tmp_path_factory.mktemp("faulty")), worker)


def test_promotion_converges_after_vc_apiserver_and_the_agent_die_mid_way(faulty: Faulty) -> None:
    assert ready_tenant_nodes(faulty.tenant) == [faulty.worker.name]
    assert_in_one_cluster(faulty.host, faulty.tenant, faulty.worker)
    [node] = faulty.host.json("get", "vc", "faulty", "-n", faulty.namespace)["status"]["nodes"]
    assert node == {"name": faulty.worker.name, "phase": "Ready"}


def test_a_promoted_kubelet_restarted_comes_back_to_the_tenant(faulty: Faulty) -> None:
    t, worker = faulty.tenant, faulty.worker
    t.run("create", "deployment", "keep", "--image", BUSYBOX, "--", "sh", "-c", "exec sleep 3600")
    t.run("rollout", "status", "deployment/keep", "--timeout=90s", timeout=120)
    [before] = t.json("get", "pods", "-l", "app=keep")["items"]
    worker.restart_kubelet()
    wait_until(lambda: ready_tenant_nodes(t) == [worker.name], 60, "the node Ready in the tenant again")
    [after] = t.json("get", "pods", "-l", "app=keep")["items"]
    assert after["metadata"]["uid"] == before["metadata"]["uid"]  # the pod outlived its kubelet's restart
    assert after["status"]["containerStatuses"][0]["restartCount"] == 0
    assert_in_one_cluster(faulty.host, t, worker)


def test_a_killed_tenant_apiserver_pod_is_replaced_and_the_cluster_is_ready_again(faulty: Faulty) -> None:
    host, t = faulty.host, faulty.tenant
    selector = f"{OWNER}=faulty,{COMPONENT}=apiserver"
    [old] = host.json("get", "pods", "-n", faulty.namespace, "-l", selector)["items"]
    host.run("delete", "pod", "-n", faulty.namespace, old["metadata"]["name"], "--grace-period=0", "--force")
    wait_until(lambda: t.run("get", "--raw", "/readyz", check=False).stdout == "ok", 120,
               "the tenant apiserver answering again", interval=1)
    wait_phase(host, faulty.namespace, "faulty", "Completed", timeout=120)
    host.run("wait", "vc/faulty", "-n", faulty.namespace, "--for=condition=Ready", "--timeout=120s", timeout=150)
    wait_until(lambda: ready_tenant_nodes(t) == [faulty.worker.name], 90, "the node Ready in the tenant")
    assert_in_one_cluster(host, t, faulty.worker)


def test_leaving_converges_after_the_agent_dies_mid_leave(real_stack: Stack, real_lab: RealNodeLab,
                                                           faulty: Faulty) -> None:
    host, worker = faulty.host, faulty.worker
    host.run("delete", "vc", "faulty", "-n", faulty.namespace, "--wait=false")
    wait_until(lambda: kubelet_server(worker).startswith(f"https://{LAB_GATEWAY}:"), 180,
               "the agent's leave under way", interval=0.05)
    worker.proc("node-agent").signal(signal.SIGKILL)  # the agent dies mid-leave
    time.sleep(2)
    worker.start_agent(real_stack.agent_certs)
    host.run("wait", "vc/faulty", "-n", faulty.namespace, "--for=delete", "--timeout=180s", timeout=200)
    real_lab.wait_ready(worker.name, 90)
    assert_returned(host, [worker.name])
    assert kubelet_server(worker) == real_stack.host.url_for_nodes
