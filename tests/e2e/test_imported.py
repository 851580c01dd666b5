"""Imported clusters: a VirtualCluster that names a Secret holding the kubeconfig of an existing cluster.
Nothing is built; its version and nodes are reported; credentials issued for it are ServiceAccounts of
their own there, revoked by deleting their VirtualClusterCredential; deleting the VirtualCluster removes
only what was made for it.

The host runs vc-apiserver (process runtime); the imported cluster is a second real kube-apiserver with
its own etcd, controller-manager, scheduler and two kwok nodes."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hack.harness import HostCluster, create_fake_nodes, free_port, wait_until
from hack.stack import Stack
from tests.conftest import Kubectl, process_stack, vc
from tests.support.report import say

pytestmark = pytest.mark.e2e

GV = "/apis/kosmos.io/v1alpha1"
NS = "team-i"
IMPORT = {"import": {"kubeconfigSecretRef": {"name": "prod-kubeconfig"}}}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from process_stack(tmp_path_factory.mktemp("imported"), 1, 5)


@pytest.fixture(scope="module")
def other(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostCluster]:
    """The existing cluster to import: a second real kube-apiserver, with two nodes and a workload."""
    cluster = HostCluster(tmp_path_factory.mktemp("other"), free_port(), free_port(), free_port()).start()
    create_fake_nodes(cluster, 2, prefix="prod", control_plane=False)
    cluster.kubectl("create", "deployment", "payments", "--image=registry.k8s.io/pause:3.10.1", "-n", "default")
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def host(stack: Stack, other: HostCluster) -> Kubectl:
    """The host admin; the Secret with the other cluster's admin kubeconfig; alice admin of NS, dave may
    only fetch kubeconfigs; the imported VirtualCluster, Ready."""
    k = Kubectl(stack.kubeconfig, host_namespaces=True)
    k.ensure_namespace(NS)
    k.run("create", "secret", "generic", "prod-kubeconfig", f"--from-file=kubeconfig={other.admin_kubeconfig}",
          "-n", NS)
    k.run("create", "rolebinding", "alice-admin", "--clusterrole=admin", "--user=alice", "-n", NS)
    k.run("create", "role", "fetch", "--verb=get", "--resource=virtualclusters",
          "--resource=virtualclusters/kubeconfig", "-n", NS)
    k.run("create", "rolebinding", "dave-fetch", "--role=fetch", "--user=dave", "-n", NS)
    k.run("create", "-f", "-", "-n", NS, input=json.dumps(vc("prod", NS, IMPORT)))
    k.run("wait", "vc/prod", "-n", NS, "--for=condition=Ready", "--timeout=60s", timeout=90)
    return k


def fetch(host: Kubectl, user: str, tmp_path: Path) -> Kubectl:
    raw = host.run("get", "--raw", f"{GV}/namespaces/{NS}/virtualclusters/prod/kubeconfig", "--as", user).stdout
    path = tmp_path / f"{user}-{time.monotonic_ns()}.kubeconfig"
    path.write_text(raw)
    return Kubectl(path)


def refused(cluster: Kubectl) -> bool:
    result = cluster.run("get", "--raw", "/api/v1/namespaces/default", check=False)
    return result.returncode != 0 and "Unauthorized" in result.stderr


def test_an_imported_cluster_reports_its_version_and_nodes_and_nothing_is_built(
        host: Kubectl, stack: Stack) -> None:
    status = host.json("get", "vc", "prod", "-n", NS)["status"]
    assert status["phase"] == "Completed" and status["reason"] == "Imported"
    assert status["kubernetesVersion"].startswith("v1.")
    assert sorted(n["name"] for n in status["nodes"]) == ["prod-000", "prod-001"]
    assert {n["phase"] for n in status["nodes"]} == {"Ready"}
    assert status["controlPlaneEndpoint"].startswith("https://127.0.0.1:")
    row = host.run("get", "vc", "prod", "-n", NS).stdout.splitlines()[1].split()
    assert row[:4] == ["prod", "Completed", "True", "2/2"]
    assert not (stack.root / "tenants" / NS / "prod").exists()  # no control plane of ours


def test_what_an_imported_cluster_cannot_do_is_refused_at_create_naming_the_field(host: Kubectl) -> None:
    for field, value in (("hibernation", {"hibernated": True}), ("backup", {"schedule": "@daily"}),
                         ("promotePolicies", [{"nodeCount": 1}])):
        refused = host.run("create", "-f", "-", "-n", NS, check=False,
                           input=json.dumps(vc("bad", NS, {**IMPORT, field: value})))
        assert refused.returncode != 0, field
        assert f"spec.{field}: Forbidden: an imported cluster has no control plane here to" in refused.stderr
    changed = host.run("patch", "vc", "prod", "-n", NS, "--type=merge", "-p",
                       '{"spec":{"import":{"kubeconfigSecretRef":{"name":"elsewhere"}}}}', check=False)
    assert changed.returncode != 0 and "spec.import: Invalid value" in changed.stderr and "immutable" in changed.stderr


def test_a_credential_for_an_imported_cluster_is_its_own_service_account_revoked_by_deleting_it(
        host: Kubectl, other: HostCluster, tmp_path: Path) -> None:
    revoked, kept = fetch(host, "alice", tmp_path), fetch(host, "alice", tmp_path)
    who = revoked.json("auth", "whoami")["status"]["userInfo"]["username"]
    assert who.startswith("system:serviceaccount:kosmos-access:prod-")
    credential = who.rsplit(":", 1)[1]
    listed = {c["metadata"]["name"]: c for c in host.json("get", "vccred", "-n", NS)["items"]}
    assert listed[credential]["spec"]["user"] == "alice"
    assert "deployment.apps/payments" in revoked.run("get", "deploy", "-n", "default", "-o", "name").stdout
    host.run("delete", "vccred", credential, "-n", NS, "--as", "alice")
    # its ServiceAccount is deleted at once; kube-apiserver trusts a token it verified for up to 10 s more
    delay = wait_until(lambda: refused(revoked), 15, "the revoked credential refused by the imported cluster")
    say(f"imported: a revoked credential refused {delay:.1f}s after its delete")
    assert kept.run("get", "ns", "default", "-o", "name").returncode == 0
    assert other.kubectl("get", "sa", credential, "-n", "kosmos-access", check=False).returncode != 0


def test_losing_the_host_permission_revokes_imported_credentials_within_a_minute(
        host: Kubectl, tmp_path: Path) -> None:
    dave = fetch(host, "dave", tmp_path)
    assert dave.run("get", "ns", "default", "-o", "name").returncode == 0
    host.run("delete", "rolebinding", "dave-fetch", "-n", NS)
    delay = wait_until(lambda: refused(dave), 60, "dave's credential refused after losing host access")
    say(f"imported: a credential refused {delay:.1f}s after its holder lost host access")


def test_deleting_the_virtualcluster_removes_only_what_was_made_for_it(
        host: Kubectl, other: HostCluster, tmp_path: Path) -> None:
    fetch(host, "alice", tmp_path)
    made = other.kubectl("get", "sa", "-n", "kosmos-access", "-l", "kosmos.io/virtualcluster", "-o", "name").stdout
    assert made.strip()
    host.run("delete", "vc", "prod", "-n", NS, "--wait", "--timeout=60s", timeout=90)
    left = other.kubectl("get", "sa,clusterrolebindings", "-A", "-l", "kosmos.io/virtualcluster", "-o",
                         "name").stdout
    assert not left.strip()
    assert "deployment.apps/payments" in other.kubectl("get", "deploy", "-n", "default", "-o", "name").stdout
    assert len(json.loads(other.kubectl("get", "nodes", "-o", "json").stdout)["items"]) == 2
