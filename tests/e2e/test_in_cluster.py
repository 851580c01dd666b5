"""vc-apiserver installed inside the real-node lab's host, as a platform team installs it.

``python -m apiservice install --mode cluster --node-joiner agent --overlay hack/in-cluster``: the
Deployment of vc-apiserver's locally built image and its etcd StatefulSet on the real control-plane
node, the `pods` runtime, promotion through the node agents. The module swaps the lab's local
vc-apiserver for the installed one and puts it back when it ends (``Stack.serve_in_cluster`` and
``Stack.serve_locally``): one reconciler acts on the host at a time.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from hack.harness import LAB_GATEWAY, wait_until
from hack.realnodes import RealNodeLab
from hack.stack import Stack
from tests.conftest import Kubectl, vc
from tests.support.promotion import (
    GV,
    assert_returned,
    claims,
    ready_tenant_nodes,
    tenant,
    wait_phase,
    wait_vc,
)
from tests.support.report import say

pytestmark = pytest.mark.e2e

NAMESPACE = "kosmos-system"
SERVER = ("-n", NAMESPACE, "-l", "app.kubernetes.io/name=vc-apiserver,app.kubernetes.io/component=apiserver")


@pytest.fixture(scope="module")
def installed(real_stack: Stack) -> Iterator[Kubectl]:
    """The host's kubectl, with vc-apiserver served from inside the host."""
    started = time.monotonic()
    real_stack.serve_in_cluster()
    say(f"  in-cluster: installed, Available and rolled out in {time.monotonic() - started:.1f}s")
    host = Kubectl(real_stack.kubeconfig, host_namespaces=True)
    try:
        yield host
    finally:
        real_stack.serve_locally()


def server_pods(host: Kubectl) -> list[dict]:
    return [p for p in host.json("get", "pods", *SERVER)["items"] if not p["metadata"].get("deletionTimestamp")]


def test_install_returns_once_both_servers_are_ready_on_the_control_plane_node_with_the_apiservice_available(
        installed: Kubectl, real_lab: RealNodeLab) -> None:
    control_plane = real_lab.nodes()[0].name
    deployment = installed.json("get", "deployment", "vc-apiserver", "-n", NAMESPACE)
    assert deployment["status"].get("readyReplicas") == 2
    pods = server_pods(installed) + installed.json("get", "pods", "-n", NAMESPACE, "-l",
                                                   "app.kubernetes.io/component=etcd")["items"]
    assert len(pods) == 3
    for pod in pods:
        assert pod["spec"]["nodeName"] == control_plane, pod["metadata"]["name"]
        [status] = pod["status"]["containerStatuses"]
        assert status["ready"], pod["metadata"]["name"]
    images = {p["status"]["containerStatuses"][0]["image"] for p in server_pods(installed)}
    assert images == {"docker.io/library/vc-apiserver:0.1.0"}
    claim = installed.json("get", "pvc", "data-vc-apiserver-etcd-0", "-n", NAMESPACE)
    assert claim["status"]["phase"] == "Bound"
    apiservice = installed.json("get", "apiservice", "v1alpha1.kosmos.io")
    [available] = [c for c in apiservice["status"]["conditions"] if c["type"] == "Available"]
    assert available["status"] == "True", available
    assert apiservice["spec"]["service"] == {"namespace": NAMESPACE, "name": "vc-apiserver", "port": 443}


def test_rbac_self_service_is_decided_by_the_installed_servers_service_account(installed: Kubectl) -> None:
    for ns in ("ic-team-a", "ic-team-b"):
        installed.ensure_namespace(ns)
    installed.run("create", "rolebinding", "alice-admin", "--clusterrole=admin", "--user=alice", "-n", "ic-team-a")
    installed.run("create", "rolebinding", "bob-view", "--clusterrole=view", "--user=bob", "-n", "ic-team-a")
    wait_until(lambda: installed.run("auth", "can-i", "create", "virtualclusters", "--as", "alice", "-n", "ic-team-a",
                                     check=False).stdout.strip() == "yes", 30, "the aggregated admin role")

    installed.run("create", "-f", "-", "--as", "alice", "-n", "ic-team-a", input=json.dumps(vc("mine", "ic-team-a")))
    assert "mine" in installed.run("get", "vc", "--as", "bob", "-n", "ic-team-a").stdout
    elsewhere = installed.run("create", "-f", "-", "--as", "alice", "-n", "ic-team-b",
                              input=json.dumps(vc("theirs", "ic-team-b")), check=False)
    assert elsewhere.returncode != 0
    assert 'User "alice" cannot create resource "virtualclusters" in API group "kosmos.io" in the namespace ' \
           '"ic-team-b"' in elsewhere.stderr
    fetch = installed.run("get", "--raw", f"{GV}/namespaces/ic-team-a/virtualclusters/mine/kubeconfig", "--as", "bob",
                          check=False)
    assert fetch.returncode != 0 and "Forbidden" in fetch.stderr
    installed.run("delete", "vc", "mine", "--as", "alice", "-n", "ic-team-a", "--wait", "--timeout=120s", timeout=150)
    assert not installed.json("get", "pods", "-n", "ic-team-a")["items"]


def test_a_credential_revoked_on_the_production_path_is_refused_by_the_tenant_within_seconds(
        installed: Kubectl, tmp_path: Path) -> None:
    """Tenant apiserver pods ask the installed server's credential webhook through its Service."""
    installed.ensure_namespace("ic-creds")
    installed.run("create", "-f", "-", "-n", "ic-creds", input=json.dumps(vc("revocable", "ic-creds")))
    wait_vc(installed, "ic-creds", "revocable", "condition=Ready", timeout=180)
    for part in ("a", "b"):
        (tmp_path / part).mkdir()
    revoked, kept = tenant(installed, "ic-creds", "revocable", tmp_path / "a"), \
        tenant(installed, "ic-creds", "revocable", tmp_path / "b")
    groups = revoked.json("auth", "whoami")["status"]["userInfo"]["groups"]
    credential = next(g.removeprefix("kosmos:credential:") for g in groups if g.startswith("kosmos:credential:"))
    assert revoked.run("get", "ns", "default", check=False).returncode == 0  # its answer now cached by the tenant
    installed.run("delete", "vccred", credential, "-n", "ic-creds")
    started = time.monotonic()
    wait_until(lambda: revoked.run("get", "ns", "default", check=False).returncode != 0, 10,
               "the revoked credential refused")
    say(f"  in-cluster: a revoked credential refused {time.monotonic() - started:.1f}s after its delete")
    assert f"the credential {credential} was revoked" in revoked.run("get", "--raw", "/api/v1/namespaces/default",
                                                                                check=False).stderr
    assert kept.run("get", "ns", "default", check=False).returncode == 0
    installed.run("delete", "vc", "revocable", "-n", "ic-creds", "--wait", "--timeout=120s", timeout=150)


class Requests(threading.Thread):
    """Lists VirtualClusters through the host, again and again, keeping every failure."""

    def __init__(self, host: Kubectl, namespace: str) -> None:
        super().__init__(daemon=True)
        self.host, self.namespace = host, namespace
        self.done, self.failures, self.answered = threading.Event(), list[str](), 0

    def run(self) -> None:
        while not self.done.is_set():
            out = self.host.run("get", "vc", "-n", self.namespace, "-o", "name", check=False)
            if out.returncode == 0:
                self.answered += 1
            else:
                self.failures.append(out.stderr.strip())
            time.sleep(0.2)


def test_a_rolling_restart_loses_no_request_and_no_reconcile_and_the_worker_goes_and_comes_back(
        installed: Kubectl, real_lab: RealNodeLab, tmp_path: Path) -> None:
    worker = real_lab.nodes()[1].name
    ns = installed.ensure_namespace("ic-rollout")
    before = {p["metadata"]["name"] for p in server_pods(installed)}
    requests = Requests(installed, ns)
    requests.start()
    started = time.monotonic()
    installed.run("rollout", "restart", "deployment/vc-apiserver", "-n", NAMESPACE)
    time.sleep(3)  # the first new pod is starting: the cluster is asked for meanwhile
    installed.run("create", "-f", "-", input=json.dumps(vc("rolled", ns, {"promoteResources": {"nodes": [worker]}})))
    installed.run("rollout", "status", "deployment/vc-apiserver", "-n", NAMESPACE, "--timeout=240s", timeout=260)
    rolled = time.monotonic() - started
    wait_phase(installed, ns, "rolled", "Completed", timeout=240)
    requests.done.set()
    requests.join()
    say(f"  in-cluster: rollout restart done in {rolled:.1f}s; {requests.answered} lists answered, "
        f"{len(requests.failures)} failed; the cluster created mid-rollout Completed "
        f"{time.monotonic() - started:.1f}s after the restart began")

    assert not before & {p["metadata"]["name"] for p in server_pods(installed)}, "every pod was replaced"
    assert requests.failures == [] and requests.answered > 50, (requests.answered, requests.failures[:5])
    t = tenant(installed, ns, "rolled", tmp_path)
    assert ready_tenant_nodes(t) == [worker]
    installed.run("delete", "vc", "rolled", "-n", ns, "--wait", "--timeout=180s", timeout=200)
    real_lab.wait_ready(worker, 90)
    assert_returned(installed, [worker])


def test_the_servers_pods_deleted_mid_promotion_converge_with_the_node_in_one_cluster(
        installed: Kubectl, real_lab: RealNodeLab, tmp_path: Path) -> None:
    node = real_lab.nodes()[1]
    ns = installed.ensure_namespace("ic-deleted")
    installed.run("create", "-f", "-", input=json.dumps(vc("moved", ns, {"promoteResources": {"nodes": [node.name]}})))
    wait_until(lambda: claims(installed)[node.name], 180, "the worker claimed", interval=0.2)
    installed.run("delete", "pods", *SERVER, "--grace-period=0", "--force")  # both, the leader among them
    deleted = time.monotonic()
    wait_phase(installed, ns, "moved", "Completed", timeout=240)
    say(f"  in-cluster: Completed {time.monotonic() - deleted:.1f}s after both server pods were deleted mid-promotion")
    t = tenant(installed, ns, "moved", tmp_path)
    assert ready_tenant_nodes(t) == [node.name]
    assert claims(installed)[node.name] == f"{ns}.moved"
    server = yaml.safe_load(node.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    assert not server.startswith(f"https://{LAB_GATEWAY}:"), f"the promoted kubelet points at {server}, the host"
    installed.run("delete", "vc", "moved", "-n", ns, "--wait=false")
    installed.run("delete", "pods", *SERVER, "--grace-period=0", "--force")  # again, mid-release
    deleted = time.monotonic()
    wait_vc(installed, ns, "moved", "delete", timeout=240)
    say(f"  in-cluster: deleted {time.monotonic() - deleted:.1f}s after both server pods were deleted again")
    real_lab.wait_ready(node.name, 90)
    assert_returned(installed, [node.name])
