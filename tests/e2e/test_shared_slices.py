"""Shared compute slices on a real host (scheduler, quota controller, kwok running the host pods) with
real tenant control planes and real kubectl: one tenant node of exactly the slice, its pods running
in the host namespace under the quota, and everything gone with the VirtualCluster."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from hack.stack import Stack
from reconciler.shared import names
from tests.conftest import Kubectl, process_stack, vc
from tests.support.promotion import tenant, wait_phase

pytestmark = pytest.mark.e2e

T = TypeVar("T")
SLICE = {"cpu": "4", "memory": "8Gi"}
NODE = names.NODE_NAME


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from process_stack(tmp_path_factory.mktemp("shared"), 3, 5)


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


def until(observe: Callable[[], T], done: Callable[[T], bool], timeout: float = 90, what: str = "") -> T:
    deadline = time.monotonic() + timeout
    while True:
        seen = observe()
        if done(seen):
            return seen
        if time.monotonic() > deadline:
            raise AssertionError(f"{what or 'condition'} not reached in {timeout}s; last seen: {seen}")
        time.sleep(0.5)


def host_pods(host: Kubectl, namespace: str) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in host.json("get", "pods", "-n", namespace)["items"]}


def tenant_pods(t: Kubectl, *selector: str) -> list[dict[str, Any]]:
    return t.json("get", "pods", *selector)["items"]


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
        == {"cpu": "100m", "memory": "128Mi"}
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
    until(lambda: host.json("get", "resourcequota", names.QUOTA, "-n", namespace)["status"]["used"],
          lambda used: used.get("requests.cpu") == "3" and used.get("pods") == "3", what="the quota's use")


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
    pods = until(lambda: tenant_pods(t, "-l", "app=web"),
                 lambda ps: len(ps) == 3 and all(p["status"].get("phase") == "Running" for p in ps))
    victim = pods[0]["metadata"]["name"]
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
