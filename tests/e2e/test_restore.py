"""Restore and clone from snapshots (spec.restoreFrom) with the process runtime: real etcd, real etcdutl,
real tenant control planes, real kubectl; and, behind a real host, who may restore whose snapshot."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack.harness import BIN, Pki, binary
from hack.stack import Stack
from reconciler.backup.snapshots import verify
from reconciler.runtime.process import ProcessRuntime
from tests.conftest import Kubectl, vc
from tests.support.backups import Backups

pytestmark = pytest.mark.e2e

NS = "rs"


@pytest.fixture(scope="module")
def rs(tmp_path_factory: pytest.TempPathFactory, pki_files: Pki) -> Iterator[Backups]:
    backups = Backups.start(tmp_path_factory.mktemp("restore"), pki_files, "restore-test")
    yield backups
    backups.stop()


@dataclass
class Taken:
    """A tenant's snapshot, and what its objects were when it was taken."""

    source: str
    snapshot: str
    path: Path


def configmaps(tenant: Kubectl) -> dict[str, dict[str, str]]:
    listed = tenant.json("get", "configmaps", "-n", "default")
    return {cm["metadata"]["name"]: cm.get("data") or {} for cm in listed["items"]
            if cm["metadata"]["name"] != "kube-root-ca.crt"}


def restoring(name: str, source: str, snapshot: str) -> str:
    return json.dumps(vc(name, NS, {"restoreFrom": {"virtualCluster": source, "snapshot": snapshot}}))


def tenant_objects(rs: Backups, name: str, objects: dict[str, dict[str, str]]) -> str:
    """A ready tenant holding ``objects`` (ConfigMaps in default, made with kubectl) and a snapshot of it."""
    rs.kubectl.run("create", "-f", "-", input=json.dumps(vc(name, NS, {"backup": {"schedule": "0 0 1 1 *"}})))
    rs.wait_ready(NS, name)
    tenant = rs.tenant(NS, name)
    for cm, data in objects.items():
        tenant.run("create", "configmap", cm, *(f"--from-literal={k}={v}" for k, v in data.items()))
    tenant.run("create", "secret", "generic", "db", "--from-literal=password=hunter2")
    rs.request_snapshot(NS, name)
    [taken] = rs.wait_backups(NS, name, lambda b: len(b) == 1, timeout=60)
    assert taken["verified"]
    return str(taken["name"])


@pytest.fixture(scope="module")
def taken(rs: Backups) -> Taken:
    """Tenant ``source`` with two ConfigMaps, snapshotted, then changed: one edited, one deleted, one added."""
    snapshot = tenant_objects(rs, "source", {"kept": {"v": "1"}, "doomed": {"v": "1"}})
    tenant = rs.tenant(NS, "source")
    tenant.run("patch", "configmap", "kept", "--type", "merge", "-p", '{"data":{"v":"2"}}')
    tenant.run("delete", "configmap", "doomed")
    tenant.run("create", "configmap", "later", "--from-literal=v=1")
    return Taken("source", snapshot, rs.snapshots(NS, "source") / f"{snapshot}.db")


def ca_of(kubeconfig: Path) -> str:
    return str(yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["certificate-authority-data"])


def test_a_clone_starts_from_the_snapshots_state_with_a_fresh_pki_and_leaves_its_source_as_it_is(
        rs: Backups, taken: Taken) -> None:
    rs.kubectl.run("create", "-f", "-", input=restoring("clone", taken.source, taken.snapshot))
    rs.wait_ready(NS, "clone")
    clone_config, source_config = rs.kubeconfig(NS, "clone"), rs.kubeconfig(NS, "source")
    clone, source = Kubectl(clone_config), Kubectl(source_config)
    assert configmaps(clone) == {"kept": {"v": "1"}, "doomed": {"v": "1"}}, "the snapshot's state"
    assert clone.run("get", "secret", "db", "-o", "jsonpath={.data.password}").stdout == "aHVudGVyMg=="
    assert configmaps(source) == {"kept": {"v": "2"}, "later": {"v": "1"}}, "the source is untouched"
    assert ca_of(clone_config) != ca_of(source_config), "a fresh tenant CA"
    status = rs.get(NS, "clone")["status"]
    assert status["phase"] == "Completed" and status["controlPlaneEndpoint"] != \
        rs.get(NS, "source")["status"]["controlPlaneEndpoint"]
    # the clone is a tenant of its own: what changes in it stays in it
    clone.run("create", "configmap", "clone-only", "--from-literal=v=1")
    assert "clone-only" not in configmaps(source)
    # its service accounts get tokens signed by its own key
    clone.run("create", "serviceaccount", "builder")
    assert clone.run("create", "token", "builder").stdout.count(".") == 2
    assert "restored snapshot" in rs.api.log.read_text()


async def test_a_restore_whose_pass_is_cut_short_finishes_and_the_next_pass_reports_it_once(
        rs: Backups, taken: Taken, tmp_path: Path) -> None:
    runtime = ProcessRuntime(tmp_path / "tenants", BIN, snapshot_dir=rs.root / "snapshots")
    obj = {"metadata": {"namespace": NS, "name": "cut", "uid": "uid-cut"}, "spec": {}}
    label = f"snapshot {taken.snapshot}"
    first = asyncio.create_task(runtime.restore(obj, taken.source, taken.snapshot, label))
    await asyncio.sleep(0)  # the pass starts the restore and waits for it
    first.cancel()  # then it ends: leadership lost
    with pytest.raises(asyncio.CancelledError):
        await first
    data = runtime.dir(NS, "cut") / "etcd"
    for _ in range(300):  # the restore goes on without it
        if data.exists():
            break
        await asyncio.sleep(0.1)
    assert (data / "member").is_dir()
    assert await runtime.restore(obj, taken.source, taken.snapshot, label), "the next pass takes its outcome"
    assert not await runtime.restore(obj, taken.source, taken.snapshot, label), "and it is reported once"
    await runtime.teardown(NS, "cut")


def test_a_snapshot_holds_the_tenants_objects_in_clear_but_none_of_its_key_material(rs: Backups,
                                                                                    taken: Taken) -> None:
    """The tenant PKI (CA, service-account and component keys) is in vc-apiserver's encrypted secret store
    and the runtime's pki directory, never in the tenant etcd: a snapshot carries none of it. What it
    does carry is the tenant's own data, its Secrets included (kube-apiserver stores them unencrypted,
    as in the etcd data directory): hence mode 0600 in a directory of mode 0700."""
    data = taken.path.read_bytes()
    keys = sorted((rs.tenant_dir(NS, taken.source) / "pki").glob("*.key"))
    assert {k.name for k in keys} >= {"ca.key", "sa.key", "etcd-ca.key", "front-proxy-ca.key", "apiserver.key"}
    assert not [k.name for k in keys if k.read_bytes().splitlines()[1] in data], "no line of any tenant key"
    assert b"PRIVATE KEY" not in data
    assert b"/registry/secrets/default/db" in data and b"hunter2" in data, "the tenant's Secrets, as etcd holds them"
    assert taken.path.stat().st_mode & 0o077 == 0 and taken.path.parent.stat().st_mode & 0o077 == 0


def test_a_snapshot_restores_a_virtual_cluster_that_was_deleted_under_its_own_name(rs: Backups) -> None:
    snapshot = tenant_objects(rs, "lost", {"settings": {"mode": "production"}})
    rs.kubectl.run("delete", "vc", "lost", "-n", NS, "--wait", timeout=120)
    assert not rs.tenant_dir(NS, "lost").exists()
    rs.kubectl.run("create", "-f", "-", input=restoring("lost", "lost", snapshot))
    rs.wait_ready(NS, "lost")
    tenant = rs.tenant(NS, "lost")
    assert configmaps(tenant) == {"settings": {"mode": "production"}}
    assert tenant.run("get", "secret", "db", "-o", "jsonpath={.data.password}").stdout == "aHVudGVyMg=="


def test_a_corrupted_snapshot_is_refused_with_a_clear_condition_and_nothing_is_half_restored(
        rs: Backups, taken: Taken) -> None:
    damaged_dir = rs.snapshots(NS, "damaged")
    damaged_dir.mkdir(parents=True, mode=0o700)
    damaged = bytearray(taken.path.read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF
    (damaged_dir / "damaged-1.db").write_bytes(bytes(damaged))
    shutil.copy(taken.path.with_suffix(".json"), damaged_dir / "damaged-1.json")
    assert "does not match" in verify(damaged_dir / "damaged-1.db")
    # etcd's own restore refuses it too
    refused = subprocess.run([binary("etcdutl"), "snapshot", "restore", str(damaged_dir / "damaged-1.db"),
                              "--data-dir", str(rs.root / "etcdutl-check")], capture_output=True, text=True)
    assert refused.returncode != 0 and "sha256" in refused.stderr

    rs.kubectl.run("create", "-f", "-", input=restoring("from-damaged", "damaged", "damaged-1"))
    deadline = time.monotonic() + 60
    condition: dict[str, Any] = {}
    while time.monotonic() < deadline:
        status = rs.get(NS, "from-damaged").get("status") or {}
        condition = next((c for c in status.get("conditions") or [] if c["type"] == "ControlPlaneReady"), {})
        if condition.get("reason") == "RestoreFailed":
            break
        time.sleep(0.5)
    assert condition.get("reason") == "RestoreFailed" and condition["status"] == "False", condition
    assert condition["message"] == ('snapshot "damaged-1" of virtualcluster "damaged" failed verification and was '
                                    'not restored: the SHA-256 of the data does not match the one etcd appended')
    status = rs.get(NS, "from-damaged")["status"]
    assert (status["phase"], status["reason"]) == ("Pending", "RestoreFailed")
    time.sleep(11)  # a failed restore is tried again (every 10 s), refused again, and stays Pending
    status = rs.get(NS, "from-damaged")["status"]
    assert (status["phase"], status["reason"]) == ("Pending", "RestoreFailed")
    tenant_dir = rs.tenant_dir(NS, "from-damaged")
    assert not (tenant_dir / "etcd").exists() and not (tenant_dir / ".etcd.restoring").exists()
    assert not list(tenant_dir.glob("*.pid")), "nothing was started"


def test_a_missing_snapshot_keeps_the_cluster_pending_and_restore_from_cannot_change_after_create(
        rs: Backups) -> None:
    rs.kubectl.run("create", "-f", "-", input=restoring("typo", "source", "no-such-snapshot"))
    deadline = time.monotonic() + 30
    status: dict[str, Any] = {}
    while time.monotonic() < deadline and status.get("reason") != "RestoreFailed":
        status = rs.get(NS, "typo").get("status") or {}
        time.sleep(0.3)
    assert (status["phase"], status["message"]) == (
        "Pending", 'snapshot "no-such-snapshot" of virtualcluster "source" does not exist')
    out = rs.kubectl.run("patch", "vc", "typo", "-n", NS, "--type", "merge", "-p",
                         '{"spec":{"restoreFrom":{"snapshot":"source-20261125-120000"}}}', check=False)
    assert out.returncode != 0
    assert ('The VirtualCluster "typo" is invalid: spec.restoreFrom: Invalid value: '
            '{"snapshot":"source-20261125-120000","virtualCluster":"source"}: field is immutable') in out.stderr
    out = rs.kubectl.run("patch", "vc", "typo", "-n", NS, "--type", "json", "-p",
                         '[{"op":"remove","path":"/spec/restoreFrom"}]', check=False)
    assert "spec.restoreFrom: Invalid value: null: field is immutable" in out.stderr
    rs.kubectl.run("delete", "vc", "typo", "-n", NS, "--wait", timeout=60)


def test_restore_from_is_validated_with_kube_wording_and_explained(rs: Backups) -> None:
    out = rs.kubectl.run("create", "-f", "-", check=False, input=json.dumps(vc("bad", NS, {"restoreFrom": {}})))
    assert out.returncode != 0
    assert "spec.restoreFrom.virtualCluster: Required value" in out.stderr
    assert "spec.restoreFrom.snapshot: Required value" in out.stderr
    out = rs.kubectl.run("create", "-f", "-", check=False, input=restoring("bad", "Source", "../x"))
    assert 'spec.restoreFrom.virtualCluster: Invalid value: "Source": a lowercase RFC 1123 label' in out.stderr
    assert 'spec.restoreFrom.snapshot: Invalid value: "../x": a lowercase RFC 1123 subdomain' in out.stderr
    explained = rs.kubectl.run("explain", "virtualclusters.spec.restoreFrom").stdout
    assert "snapshot\t<string> -required-" in explained and "virtualCluster\t<string> -required-" in explained
    assert "Immutable" in explained


# -- who may restore whose snapshot: behind a real host, with its RBAC --------------------------------------


def test_restoring_needs_get_on_the_sources_snapshots_or_is_forbidden(host_stack: Stack) -> None:
    k = Kubectl(host_stack.kubeconfig, host_namespaces=True)
    ns = k.ensure_namespace("restore-rbac")
    k.run("create", "role", "vc-creator", "--verb=create,get,list,patch", "--resource=virtualclusters.kosmos.io", "-n", ns)
    k.run("create", "rolebinding", "carol-creator", "--role=vc-creator", "--user=carol", "-n", ns)
    k.run("create", "rolebinding", "dave-admin", "--clusterrole=admin", "--user=dave", "-n", ns)
    deadline = time.monotonic() + 30  # the clusterrole aggregation controller fills admin
    while time.monotonic() < deadline and k.run("auth", "can-i", "get", "virtualclusters", "--subresource=snapshots",
                                                "-n", ns, "--as", "dave", check=False).stdout.strip() != "yes":
        time.sleep(0.5)
    body = json.dumps(vc("copy", ns, {"restoreFrom": {"virtualCluster": "prod", "snapshot": "prod-1"}}))
    denied = k.run("create", "-f", "-", "--as", "carol", input=body, check=False)
    assert denied.returncode != 0
    assert ('Error from server (Forbidden): error when creating "STDIN": virtualclusters.kosmos.io "copy" is '
            'forbidden: User "carol" cannot get resource "virtualclusters/snapshots" in API group "kosmos.io" in '
            f'the namespace "{ns}"') in denied.stderr
    dry = k.run("create", "-f", "-", "--as", "carol", "--dry-run=server", input=body, check=False)
    assert "Forbidden" in dry.stderr, "a dry run is authorized as the create would be"
    applied = k.run("apply", "--server-side", "-f", "-", "--as", "carol", input=body, check=False)
    assert 'User "carol" cannot get resource "virtualclusters/snapshots"' in applied.stderr, "and a create by apply"
    k.run("create", "-f", "-", "--as", "carol", input=json.dumps(vc("fresh", ns)))  # creating alone is allowed
    k.run("create", "-f", "-", "--as", "dave", input=body)
    assert k.json("get", "vc", "copy", "-n", ns)["spec"]["restoreFrom"] == {"virtualCluster": "prod",
                                                                          "snapshot": "prod-1"}
