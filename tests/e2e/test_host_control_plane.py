"""The whole product behind a real host: tenant self-service from VirtualCluster to a working tenant cluster."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hack.stack import Stack
from tests.conftest import Kubectl, process_stack, vc

pytestmark = pytest.mark.e2e

GV = "/apis/kosmos.io/v1alpha1"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from process_stack(tmp_path_factory.mktemp("cp-host"), 2, 5)


@pytest.fixture(scope="module")
def admin(stack: Stack) -> Kubectl:
    k = Kubectl(stack.kubeconfig, host_namespaces=True)
    k.ensure_namespace("team-c")
    k.run("create", "rolebinding", "alice-admin", "--clusterrole=admin", "--user=alice", "-n", "team-c")
    k.run("create", "rolebinding", "bob-view", "--clusterrole=view", "--user=bob", "-n", "team-c")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if k.run("auth", "can-i", "create", "virtualclusters", "-n", "team-c", "--as", "alice",
                 check=False).stdout.strip() == "yes":
            break
        time.sleep(0.5)
    return k


def test_a_namespace_admin_builds_a_cluster_and_gets_their_own_credential(admin: Kubectl, tmp_path: Path) -> None:
    admin.run("create", "-f", "-", "--as", "alice", "-n", "team-c", input=json.dumps(vc("alice-dev", "team-c")))
    admin.run("wait", "vc/alice-dev", "-n", "team-c", "--for=condition=Ready", "--timeout=120s", "--as", "alice",
              timeout=150)
    raw = admin.run("get", "--raw", f"{GV}/namespaces/team-c/virtualclusters/alice-dev/kubeconfig",
                    "--as", "alice").stdout
    path = tmp_path / "alice.kubeconfig"
    path.write_text(raw)
    tenant = Kubectl(path)
    whoami = tenant.json("auth", "whoami")["status"]["userInfo"]
    assert whoami["username"] == "alice" and "kosmos:tenant-admins" in whoami["groups"]
    assert "namespace/kube-system" in tenant.run("get", "ns", "-o", "name").stdout
    viewer = admin.run("get", "--raw", f"{GV}/namespaces/team-c/virtualclusters/alice-dev/kubeconfig",
                       "--as", "bob", check=False)
    assert viewer.returncode != 0 and "Forbidden" in viewer.stderr
    described = admin.run("describe", "vc", "alice-dev", "-n", "team-c").stdout
    assert "ControlPlaneReady" in described and "KubeconfigIssued" in described and "alice" in described
