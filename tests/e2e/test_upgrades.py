"""Tenant Kubernetes versions on a real host with real tenant control planes (process runtime): chosen at create,
refused where kube's skew policy says no, upgraded in place under a steady client load, and rolled back by
themselves when the new version does not come up.

The server here starts tenants from a bin directory of its own, the same binaries as ``make bins`` built, so that
a test can make one version's component refuse to start (a real kube binary given a flag it refuses)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hack.harness import BIN, wait_until
from hack.stack import Stack
from hack.steadyload import Load
from reconciler.versions import KUBERNETES_VERSIONS
from tests.conftest import Kubectl, running_stack, vc
from tests.support import report

pytestmark = pytest.mark.e2e

NEWEST, OLDER = KUBERNETES_VERSIONS[0], KUBERNETES_VERSIONS[1]
NEWEST_MINOR, OLDER_MINOR = NEWEST[1:].rsplit(".", 1)[0], OLDER[1:].rsplit(".", 1)[0]
NS = "versions"
REFUSED_FLAG = "--feature-gates=NoSuchGate=true"  # every kube component refuses an unknown feature gate


@pytest.fixture(scope="module")
def bins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built binaries, the newest version's in a directory of links that a test may swap."""
    root = tmp_path_factory.mktemp("bin")
    for entry in BIN.iterdir():
        if entry.name != f"kubernetes-{NEWEST}":
            (root / entry.name).symlink_to(entry.resolve())
    newest = root / f"kubernetes-{NEWEST}"
    newest.mkdir()
    for component in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        (newest / component).symlink_to((BIN / f"kubernetes-{NEWEST}" / component).resolve())
    return root


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, bins: Path) -> Iterator[Stack]:
    yield from running_stack(tmp_path_factory.mktemp("versions"), nodes=2, runtime="process",
                             extra_args=["--runtime-bin-dir", str(bins)])


@pytest.fixture(scope="module")
def host(stack: Stack) -> Kubectl:
    kubectl = Kubectl(stack.kubeconfig, host_namespaces=True)
    kubectl.ensure_namespace(NS)
    return kubectl


def refusing(bins: Path, component: str, after: int = 0) -> None:
    """The newest version's ``component`` is the real binary given a flag it refuses (``after`` seconds late)."""
    path = bins / f"kubernetes-{NEWEST}" / component
    real = (BIN / f"kubernetes-{NEWEST}" / component).resolve()
    path.unlink()
    path.write_text(f'#!/bin/sh\nsleep {after}\nexec {real} {REFUSED_FLAG} "$@"\n')
    path.chmod(0o755)


def mended(bins: Path, component: str) -> None:
    path = bins / f"kubernetes-{NEWEST}" / component
    path.unlink()
    path.symlink_to((BIN / f"kubernetes-{NEWEST}" / component).resolve())


def create(host: Kubectl, name: str, spec: dict[str, Any] | None = None) -> None:
    host.run("create", "-f", "-", input=json.dumps(vc(name, NS, spec)))
    host.run("wait", f"vc/{name}", "-n", NS, "--for=condition=Ready", "--timeout=120s", timeout=130)


def get(host: Kubectl, name: str) -> dict[str, Any]:
    return host.json("get", "vc", name, "-n", NS)


def patch_version(host: Kubectl, name: str, version: str, check: bool = True) -> Any:
    return host.run("patch", "vc", name, "-n", NS, "--type=merge", "-p",
                    json.dumps({"spec": {"kubernetesVersion": version}}), check=check)


def admin_kubeconfig(stack: Stack, name: str) -> Path:
    """The tenant's admin kubeconfig, as the process runtime writes it."""
    return stack.root / "tenants" / NS / name / "admin.kubeconfig"


def tenant_version(stack: Stack, name: str) -> str:
    return json.loads(Kubectl(admin_kubeconfig(stack, name)).run("get", "--raw", "/version").stdout)["gitVersion"]


def events(host: Kubectl, name: str) -> dict[str, str]:
    items = host.json("get", "events", "-n", NS, "--field-selector", f"involvedObject.name={name}")["items"]
    return {e["reason"]: e["message"] for e in items}


def wait_upgrade(host: Kubectl, name: str, state: str, timeout: float = 240) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        obj = get(host, name)
        upgrade = obj["status"].get("upgrade") or {}
        return obj if upgrade.get("state") == state and obj["status"].get("phase") == "Completed" else None
    wait_until(lambda: done() is not None, timeout, f"upgrade of {name} {state}", interval=0.5)
    return get(host, name)


def test_a_cluster_runs_the_version_its_spec_names_and_the_newest_without_one(stack: Stack, host: Kubectl) -> None:
    create(host, "newest")
    create(host, "older", {"kubernetesVersion": OLDER_MINOR})
    newest, older = get(host, "newest"), get(host, "older")
    assert "kubernetesVersion" not in newest["spec"]  # unset: built at the newest, then it keeps what it runs
    assert older["spec"]["kubernetesVersion"] == OLDER_MINOR  # as written: the minor's newest patch runs
    assert newest["status"]["kubernetesVersion"] == NEWEST and older["status"]["kubernetesVersion"] == OLDER
    assert tenant_version(stack, "newest") == NEWEST and tenant_version(stack, "older") == OLDER
    table = host.run("get", "vc", "-n", NS, "newest", "older").stdout.splitlines()
    assert table[0].split()[:6] == ["NAME", "PHASE", "READY", "NODES", "VERSION", "AGE"]
    assert {line.split()[0]: line.split()[4] for line in table[1:]} == {"newest": NEWEST, "older": OLDER}


def test_versions_kube_does_not_support_moving_to_are_refused_with_what_is_allowed(host: Kubectl) -> None:
    create(host, "pinned", {"kubernetesVersion": NEWEST_MINOR})
    unknown = host.run("create", "-f", "-", check=False,
                       input=json.dumps(vc("unknown", NS, {"kubernetesVersion": "1.20"})))
    assert unknown.returncode != 0 and "Unsupported value: \"1.20\": supported values:" in unknown.stderr
    assert f'"{OLDER_MINOR}"' in unknown.stderr and "spec.kubernetesVersion" in unknown.stderr
    down = patch_version(host, "pinned", OLDER_MINOR, check=False)
    assert down.returncode != 0 and f"may not go below {NEWEST_MINOR}" in down.stderr, down.stderr
    assert "is invalid" in down.stderr  # 422, as kube answers an invalid spec
    bad = patch_version(host, "pinned", "latest", check=False)
    assert bad.returncode != 0 and "should match" in bad.stderr
    # another manager's apply that does not name the field leaves it as it is
    before = get(host, "pinned")
    host.run("apply", "--server-side", "--field-manager=team", "-f", "-",
             input=json.dumps(vc("pinned", NS, {})))
    after = get(host, "pinned")
    assert after["spec"]["kubernetesVersion"] == NEWEST_MINOR
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    # a cluster that never named one may name the version it runs, or refuse to go below it, as any other
    assert patch_version(host, "newest", OLDER_MINOR, check=False).returncode != 0


def test_an_upgrade_moves_the_cluster_in_place_with_a_snapshot_first_and_no_read_failing(
        stack: Stack, host: Kubectl) -> None:
    create(host, "upgraded", {"kubernetesVersion": OLDER})
    kubeconfig = admin_kubeconfig(stack, "upgraded")
    tenant = Kubectl(kubeconfig)
    tenant.run("create", "configmap", "steady", "--from-literal=kept=yes")
    processes_before = {p.name for p in (stack.root / "tenants" / NS / "upgraded").glob("*.pid")}

    async def under_load() -> Any:
        load = Load.of_kubeconfig(kubeconfig)
        await load.start()
        await asyncio.sleep(2)
        await asyncio.to_thread(patch_version, host, "upgraded", NEWEST_MINOR)
        await asyncio.to_thread(wait_upgrade, host, "upgraded", "Succeeded")
        await asyncio.sleep(2)
        return await load.stop()
    result = asyncio.run(under_load())
    obj = get(host, "upgraded")
    upgrade = obj["status"]["upgrade"]
    report.say(f"{upgrade['message']}, under load (process runtime): {json.dumps(result.summary())}")
    assert obj["status"]["kubernetesVersion"] == NEWEST and tenant_version(stack, "upgraded") == NEWEST
    assert (upgrade["fromVersion"], upgrade["toVersion"]) == (OLDER, NEWEST)
    assert upgrade["durationSeconds"] >= 0 and upgrade["completionTime"] >= upgrade["startTime"]
    [snapshot] = [b for b in obj["status"]["backups"] if b["reason"] == "PreUpgrade"]
    assert snapshot["name"] == upgrade["snapshot"] and snapshot["verified"]
    told = events(host, "upgraded")
    assert "Upgrading" in told and f"to {NEWEST} in " in told["Upgraded"]
    assert tenant.json("get", "configmap", "steady")["data"] == {"kept": "yes"}
    assert result.reads > 50 and result.reads_failed == 0, result.summary()
    assert result.writes > 5 and result.writes_lost == 0, result.summary()
    assert {p.name for p in (stack.root / "tenants" / NS / "upgraded").glob("*.pid")} == processes_before


def test_an_apiserver_that_does_not_come_up_is_rolled_back_and_not_tried_again_until_the_spec_changes(
        stack: Stack, host: Kubectl, bins: Path) -> None:
    create(host, "refused", {"kubernetesVersion": OLDER})
    refusing(bins, "kube-apiserver")
    try:
        patch_version(host, "refused", NEWEST_MINOR)
        obj = wait_upgrade(host, "refused", "RolledBack")
    finally:
        mended(bins, "kube-apiserver")
    assert obj["status"]["kubernetesVersion"] == OLDER and tenant_version(stack, "refused") == OLDER
    message = obj["status"]["upgrade"]["message"]
    report.say(message)
    assert "kube-apiserver" in message and "NoSuchGate" in message and "restored" not in message, message
    [upgraded] = [c for c in obj["status"]["conditions"] if c["type"] == "Upgraded"]
    assert upgraded["status"] == "False" and upgraded["reason"] == "UpgradeFailed"
    assert "UpgradeFailed" in events(host, "refused")
    assert not list((stack.root / "tenants" / NS / "refused").glob("kube-apiserver-next.pid"))
    time.sleep(6)  # a health check's interval and more: the same spec is not tried again
    again = get(host, "refused")
    assert again["status"]["upgrade"]["state"] == "RolledBack" and again["status"]["kubernetesVersion"] == OLDER
    assert again["status"]["upgrade"]["observedGeneration"] == again["metadata"]["generation"]
    # a new generation asks again: now it comes up
    patch_version(host, "refused", NEWEST)
    assert wait_upgrade(host, "refused", "Succeeded")["status"]["kubernetesVersion"] == NEWEST


def test_a_failure_after_the_new_apiserver_served_restores_the_pre_upgrade_snapshot(
        stack: Stack, host: Kubectl, bins: Path) -> None:
    create(host, "restored", {"kubernetesVersion": OLDER})
    kubeconfig = admin_kubeconfig(stack, "restored")
    tenant = Kubectl(kubeconfig)
    tenant.run("create", "configmap", "before", "--from-literal=at=old")
    refusing(bins, "kube-controller-manager", after=10)  # the new apiserver serves alone for 10 s first
    try:
        patch_version(host, "restored", NEWEST_MINOR)
        wait_until(lambda: tenant_version(stack, "restored") == NEWEST, 120, "the new apiserver serving", interval=0.2)
        tenant.run("create", "configmap", "during", "--from-literal=at=new")  # written by the new version
        obj = wait_upgrade(host, "restored", "RolledBack")
    finally:
        mended(bins, "kube-controller-manager")
    message = obj["status"]["upgrade"]["message"]
    assert "kube-controller-manager" in message and "restored from snapshot" in message, message
    assert obj["status"]["kubernetesVersion"] == OLDER
    host.run("wait", "vc/restored", "-n", NS, "--for=condition=Ready", "--timeout=120s", timeout=130)
    assert tenant_version(stack, "restored") == OLDER
    assert tenant.json("get", "configmap", "before")["data"] == {"at": "old"}
    # the data is the snapshot's: what the new version wrote is gone with it
    assert tenant.run("get", "configmap", "during", check=False).returncode != 0


def test_a_hibernated_cluster_takes_a_new_version_and_upgrades_as_it_wakes(stack: Stack, host: Kubectl) -> None:
    create(host, "sleeper", {"kubernetesVersion": OLDER})
    host.run("patch", "vc", "sleeper", "-n", NS, "--type=merge", "-p",
             json.dumps({"spec": {"hibernation": {"hibernated": True}}}))
    host.run("wait", "vc/sleeper", "-n", NS, "--for=jsonpath={.status.phase}=Hibernated", "--timeout=120s",
             timeout=130)
    patch_version(host, "sleeper", NEWEST_MINOR)
    assert get(host, "sleeper")["status"]["phase"] == "Hibernated"  # nothing runs, nothing changes yet
    host.run("patch", "vc", "sleeper", "-n", NS, "--type=merge", "-p",
             json.dumps({"spec": {"hibernation": {"hibernated": False}}}))
    obj = wait_upgrade(host, "sleeper", "Succeeded")
    assert obj["status"]["kubernetesVersion"] == NEWEST and tenant_version(stack, "sleeper") == NEWEST
