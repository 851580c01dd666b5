"""A tenant's life on real nodes with the ``pods`` runtime: snapshots on a claim in its namespace, restore
and clone from them, hibernation and waking, and inactivity read from the apiserver pod's audit log.

The lab is the real-node one (``real_stack``): tenant control planes run as host pods on the
control-plane node, their volumes are local volumes there, and the snapshot and restore pods run
vc-apiserver's own image, built locally.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hack.harness import wait_until
from hack.realnodes import RealNodeLab, node_images
from hack.stack import Stack
from hack.steadyload import Load
from reconciler.runtime.pods import COMPONENT, OWNER, PodsRuntime
from reconciler.runtime.pods.backupobjects import SNAPSHOT_CLAIM
from reconciler.versions import KUBERNETES_VERSIONS
from tests.conftest import Kubectl, vc
from tests.support import report
from tests.support.promotion import tenant, wait_phase

pytestmark = pytest.mark.e2e

GV = "/apis/kosmos.io/v1alpha1"


@dataclass
class Lifecycle:
    host: Kubectl
    namespace: str
    root: Path

    def get(self, name: str) -> dict[str, Any]:
        return self.host.json("get", "vc", name, "-n", self.namespace)

    def tenant(self, name: str) -> Kubectl:
        return tenant(self.host, self.namespace, name, self.root)

    def wait_ready(self, name: str, timeout: int = 240) -> float:
        started = time.monotonic()
        self.host.run("wait", f"vc/{name}", "-n", self.namespace, "--for=condition=Ready", f"--timeout={timeout}s",
                      timeout=timeout + 30)
        return time.monotonic() - started

    def request_snapshot(self, name: str) -> None:
        time.sleep(1.1)  # the request must be later than the last snapshot, both to the second
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.host.run("annotate", "vc", name, "-n", self.namespace, f"kosmos.io/snapshot-requested={now}",
                      "--overwrite")

    def wait_backups(self, name: str, count: int, timeout: float = 120) -> list[dict[str, Any]]:
        def enough() -> list[dict[str, Any]] | None:
            backups = (self.get(name).get("status") or {}).get("backups") or []
            return backups if len(backups) >= count and all(b["verified"] for b in backups) else None
        wait_until(lambda: enough() is not None, timeout, f"{count} verified snapshots of {name}", interval=1)
        return enough() or []

    def pods(self, name: str, component: str | None = None) -> list[dict[str, Any]]:
        selector = f"{OWNER}={name}" + (f",{COMPONENT}={component}" if component else "")
        return self.host.json("get", "pods", "-n", self.namespace, "-l", selector)["items"]

    def restarts(self, name: str) -> dict[str, int]:
        """Container restarts of each control-plane pod of ``name``: 0 where each started in order."""
        return {p["metadata"]["name"]: sum(c.get("restartCount", 0) for c in p["status"].get("containerStatuses") or [])
                for p in self.pods(name) if p["metadata"]["labels"].get(COMPONENT) != "backup"}

    def events(self, name: str) -> list[tuple[str, str]]:
        listed = self.host.json("get", "events", "-n", self.namespace, "--field-selector",
                                f"involvedObject.name={name},involvedObject.kind=VirtualCluster")["items"]
        return [(e["reason"], e["message"]) for e in listed]


@pytest.fixture(scope="module")
def life(real_stack: Stack, real_lab: RealNodeLab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lifecycle]:
    host = Kubectl(real_stack.kubeconfig, host_namespaces=True)
    ns = host.ensure_namespace("real-life")
    yield Lifecycle(host, ns, tmp_path_factory.mktemp("life"))
    host.run("delete", "vc", "--all", "-n", ns, "--timeout=180s", check=False, timeout=200)
    host.run("delete", "namespace", ns, "--timeout=120s", check=False, timeout=150)  # the snapshot claim too

    def given_back() -> bool:
        return not [pv for pv in host.json("get", "pv")["items"]
                    if (pv["spec"].get("claimRef") or {}).get("namespace") == ns]
    wait_until(given_back, 60, f"the volumes of {ns} given back", interval=1)


@pytest.fixture(scope="module")
def origin(life: Lifecycle) -> str:
    """A tenant with objects, snapshotted on request: the source of the restores below."""
    life.host.run("create", "-f", "-", input=json.dumps(vc("origin", life.namespace, {
        "backup": {"schedule": "@every 24h", "keep": 2}})))
    took = life.wait_ready("origin")
    assert set(life.restarts("origin").values()) == {0}, life.restarts("origin")
    report.say(f"pods runtime on a real node: create -> Ready {took:.1f}s, no container restarted")
    t = life.tenant("origin")
    t.run("create", "configmap", "kept", "--from-literal=state=before")
    return "origin"


def test_snapshots_of_a_real_tenant_are_taken_by_pods_onto_its_namespaces_claim_and_only_the_newest_kept(
        life: Lifecycle, origin: str) -> None:
    started = time.monotonic()
    life.request_snapshot(origin)
    [first] = life.wait_backups(origin, 1)
    took = time.monotonic() - started
    assert first["name"].startswith("origin-") and first["revision"] > 0 and first["sizeBytes"] > 0
    assert first["verified"] is True
    names = [first["name"]]
    for _ in range(2):
        life.request_snapshot(origin)
        wait_until(lambda: life.get(origin)["status"]["backups"][-1]["name"] not in names, 120,
                   "a newer snapshot listed", interval=1)
        names.append(life.get(origin)["status"]["backups"][-1]["name"])
    backups = life.wait_backups(origin, 2)
    assert [b["name"] for b in backups] == names[1:], "keep: 2, the newest"
    claim = life.host.json("get", "pvc", SNAPSHOT_CLAIM, "-n", life.namespace)
    assert claim["status"]["phase"] == "Bound"
    assert OWNER not in claim["metadata"].get("labels", {}), "the claim outlives every VirtualCluster"
    assert life.pods(origin, "backup") == [], "each snapshot pod is removed once it reported"
    taken = [m for r, m in life.events(origin) if r == "SnapshotTaken"]
    assert len(taken) == 3 and all(m.endswith("verified") for m in taken)
    report.say(f"pods runtime on a real node: snapshot on request -> listed verified {took:.1f}s")


def local_path(life: Lifecycle, claim: str) -> Path:
    volume = life.host.json("get", "pvc", claim, "-n", life.namespace)["spec"]["volumeName"]
    return Path(life.host.json("get", "pv", volume)["spec"]["local"]["path"])


def test_a_clone_from_a_snapshot_on_the_claim_has_the_snapshots_objects_and_a_fresh_pki(
        life: Lifecycle, origin: str) -> None:
    snapshot = life.wait_backups(origin, 2)[-1]["name"]
    source = life.tenant(origin)
    source.run("delete", "configmap", "kept")
    source.run("create", "configmap", "later", "--from-literal=state=after")
    started = time.monotonic()
    life.host.run("create", "-f", "-", input=json.dumps(vc("copy", life.namespace, {
        "restoreFrom": {"virtualCluster": origin, "snapshot": snapshot}})))
    life.wait_ready("copy")
    took = time.monotonic() - started
    copy = life.tenant("copy")
    assert copy.json("get", "configmap", "kept")["data"] == {"state": "before"}
    assert copy.run("get", "configmap", "later", check=False).returncode != 0
    assert source.run("get", "configmap", "kept", check=False).returncode != 0, "the source is left as it is"
    restored = [m for r, m in life.events("copy") if r == "Restored"]
    assert restored and "clone" in restored[0], restored
    ca = {name: life.host.json("get", "secret", f"{name}-apiserver", "-n", life.namespace)["data"]["ca.crt"]
          for name in ("origin", "copy")}
    assert ca["origin"] != ca["copy"], "a fresh PKI"
    assert life.pods("copy", "backup") == [], "the restore pod is removed once it reported"
    assert set(life.restarts("copy").values()) == {0}, life.restarts("copy")
    report.say(f"pods runtime on a real node: clone from a snapshot -> Ready {took:.1f}s, no container restarted")
    # the control-plane node has two cores: the tenants after this one need the clone's requests back
    life.host.run("delete", "vc", "copy", "-n", life.namespace, "--timeout=120s", timeout=150)
    wait_until(lambda: life.pods("copy") == [], 60, "the clone's pods gone", interval=1)


def test_a_damaged_snapshot_is_refused_with_a_clear_condition_and_nothing_starts(
        life: Lifecycle, origin: str) -> None:
    snapshot = life.wait_backups(origin, 2)[0]["name"]
    path = local_path(life, SNAPSHOT_CLAIM) / life.namespace / origin / f"{snapshot}.db"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    life.host.run("create", "-f", "-", input=json.dumps(vc("broken", life.namespace, {
        "restoreFrom": {"virtualCluster": origin, "snapshot": snapshot}})))

    def refused() -> bool:
        ready = {c["type"]: c for c in (life.get("broken").get("status") or {}).get("conditions") or []}.get("Ready")
        return bool(ready) and ready["reason"] == "RestoreFailed"
    wait_until(refused, 120, "broken Pending with RestoreFailed", interval=1)
    obj = life.get("broken")
    assert obj["status"]["phase"] == "Pending"
    ready = {c["type"]: c for c in obj["status"]["conditions"]}["Ready"]
    assert ready["message"] == (f'snapshot "{snapshot}" of virtualcluster "{origin}" failed verification and was '
                                f'not restored: the SHA-256 of the data does not match the one etcd appended')
    assert life.host.json("get", "statefulsets", "-n", life.namespace, "-l", f"{OWNER}=broken")["items"] == []
    assert [p for p in life.pods("broken") if p["metadata"]["labels"][COMPONENT] != "backup"] == []
    claim = local_path(life, "data-broken-etcd-0")
    assert not (claim / "data").exists(), "nothing half-restored"
    life.host.run("delete", "vc", "broken", "-n", life.namespace, "--timeout=120s", timeout=150)
    assert life.host.json("get", "pvc", "-n", life.namespace, "-l", f"{OWNER}=broken")["items"] == []


def kubeconfig_status(life: Lifecycle, name: str) -> tuple[int, str]:
    out = life.host.run("get", "--raw", f"{GV}/namespaces/{life.namespace}/virtualclusters/{name}/kubeconfig",
                        check=False)
    return out.returncode, out.stderr


def test_a_hibernated_real_tenant_runs_no_pod_and_a_kubeconfig_fetch_wakes_it_within_the_estimate(
        life: Lifecycle, origin: str) -> None:
    life.host.run("patch", "vc", origin, "-n", life.namespace, "--type", "merge", "-p",
                  json.dumps({"spec": {"hibernation": {"hibernated": True}}}))
    started = time.monotonic()
    wait_phase(life.host, life.namespace, origin, "Hibernated", timeout=180)
    asleep = time.monotonic() - started
    assert life.pods(origin) == []
    assert life.host.json("get", "pvc", f"data-{origin}-etcd-0", "-n", life.namespace)["status"]["phase"] == "Bound"
    life.host.run("patch", "vc", origin, "-n", life.namespace, "--type", "merge", "-p",
                  json.dumps({"spec": {"hibernation": {"hibernated": False}}}))
    woke = life.wait_ready(origin)
    assert set(life.restarts(origin).values()) == {0}, life.restarts(origin)
    assert life.tenant(origin).json("get", "configmap", "later")["data"] == {"state": "after"}
    assert woke <= PodsRuntime.WAKE_ESTIMATE * 1.5, f"woke in {woke:.1f}s, the 409 says {PodsRuntime.WAKE_ESTIMATE}s"
    report.say(f"pods runtime on a real node: hibernate -> no pod {asleep:.1f}s; wake -> Ready {woke:.1f}s "
               f"(409 estimate {PodsRuntime.WAKE_ESTIMATE}s)")


def test_a_wake_in_flight_when_vc_apiserver_dies_finishes_under_the_next_one_with_nothing_restarted(
        real_stack: Stack, life: Lifecycle, origin: str) -> None:
    life.host.run("patch", "vc", origin, "-n", life.namespace, "--type", "merge", "-p",
                  json.dumps({"spec": {"hibernation": {"hibernated": True}}}))
    wait_phase(life.host, life.namespace, origin, "Hibernated", timeout=180)
    wait_until(lambda: life.pods(origin) == [], 60, "every pod of the hibernated tenant gone", interval=0.5)
    life.host.run("patch", "vc", origin, "-n", life.namespace, "--type", "merge", "-p",
                  json.dumps({"spec": {"hibernation": {"hibernated": False}}}))
    wait_until(lambda: life.pods(origin, "etcd") != [], 60, "the wake under way", interval=0.1)
    real_stack.api.proc.kill()  # mid-wake: etcd is starting, the apiserver not yet
    real_stack.api.start(timeout=60)
    life.wait_ready(origin)
    assert set(life.restarts(origin).values()) == {0}, life.restarts(origin)
    assert life.tenant(origin).json("get", "configmap", "later")["data"] == {"state": "after"}


def test_tenants_keep_serving_through_a_restart_of_the_control_plane_nodes_kubelet(
        real_lab: RealNodeLab, life: Lifecycle, origin: str) -> None:
    before = {p["metadata"]["uid"] for p in life.pods(origin)}
    real_lab.nodes()[0].restart_kubelet()
    real_lab.wait_ready(real_lab.nodes()[0].name)
    # A restarted kubelet reports its pods unready until their probes pass again, and the Service drops them
    # meanwhile: the VirtualCluster's Ready, unchanged, says nothing yet, the tenant's answers do.
    life.wait_ready(origin)
    tenant = life.tenant(origin)
    wait_until(lambda: tenant.run("get", "configmap", "later", check=False).returncode == 0, 90,
               "the tenant answering again", interval=1)
    assert tenant.json("get", "configmap", "later")["data"] == {"state": "after"}
    assert {p["metadata"]["uid"] for p in life.pods(origin)} == before, "the same pods"
    # etcd and the apiserver outlive their kubelet's restart. A controller-manager whose lease could not be
    # renewed while its apiserver was out of the Service exits by design, and is restarted in place.
    serving = {name: count for name, count in life.restarts(origin).items()
               if any(f"-{c}-" in name for c in ("etcd", "apiserver"))}
    assert serving and set(serving.values()) == {0}, life.restarts(origin)


def test_a_tenant_whose_etcd_pod_is_killed_while_it_starts_becomes_ready_with_nothing_left_over(
        life: Lifecycle) -> None:
    life.host.run("create", "-f", "-", input=json.dumps(vc("shaky", life.namespace)))

    def etcd_started() -> bool:
        return any(p["status"].get("phase") == "Running" for p in life.pods("shaky", "etcd"))
    wait_until(etcd_started, 120, "the etcd pod of shaky running", interval=0.1)
    [etcd] = life.pods("shaky", "etcd")
    life.host.run("delete", "pod", etcd["metadata"]["name"], "-n", life.namespace, "--grace-period=0", "--force")
    life.wait_ready("shaky", timeout=180)
    assert life.tenant("shaky").run("get", "--raw", "/readyz").stdout == "ok"
    assert [p["metadata"]["uid"] for p in life.pods("shaky", "etcd")] != [etcd["metadata"]["uid"]]
    assert len(life.host.json("get", "pvc", "-n", life.namespace, "-l", f"{OWNER}=shaky")["items"]) == 1
    life.host.run("delete", "vc", "shaky", "-n", life.namespace, "--timeout=120s", timeout=150)
    wait_until(lambda: life.pods("shaky") == [], 60, "shaky's pods gone", interval=1)


IDLE = 30  # seconds of afterInactivity


def test_a_real_tenant_idle_by_its_apiservers_audit_log_hibernates_and_a_kubeconfig_fetch_wakes_it(
        life: Lifecycle) -> None:
    life.host.run("create", "-f", "-", input=json.dumps(vc("idle", life.namespace, {
        "hibernation": {"afterInactivity": f"{IDLE}s"}})))
    life.wait_ready("idle")
    t = life.tenant("idle")
    deadline = time.monotonic() + IDLE * 1.5
    while time.monotonic() < deadline:  # a user at work keeps it awake
        t.run("get", "configmaps")
        assert life.get("idle")["status"]["phase"] == "Completed"
        time.sleep(5)
    t.run("create", "configmap", "before-sleep", "--from-literal=k=v")
    last_request = time.monotonic()
    wait_phase(life.host, life.namespace, "idle", "Hibernated", timeout=IDLE + 120)
    asleep_after = time.monotonic() - last_request
    assert asleep_after >= IDLE - 1
    hibernated = {c["type"]: c for c in life.get("idle")["status"]["conditions"]}["Hibernated"]
    assert (hibernated["status"], hibernated["reason"]) == ("True", "Inactive")
    assert life.pods("idle") == []
    code, said = kubeconfig_status(life, "idle")
    woke = time.monotonic()
    assert code != 0 and "is waking up from hibernation" in said
    assert f"ready in about {PodsRuntime.WAKE_ESTIMATE}s" in said
    life.wait_ready("idle")
    woken_in = time.monotonic() - woke
    assert life.tenant("idle").json("get", "configmap", "before-sleep")["data"] == {"k": "v"}
    report.say(f"pods runtime on a real node: inactivity read from the audit log: hibernated {asleep_after:.1f}s "
               f"after the last user request (afterInactivity {IDLE}s); kubeconfig fetch -> Ready {woken_in:.1f}s")


TURNOVER = 20  # tenants created and deleted one after another: more than the lab's disk was ever cut into


@pytest.mark.timeout(1200)  # twenty real tenants, one after another: 28 s each in a busy CI run
def test_the_lab_holds_tenant_after_tenant_because_each_deleted_one_gives_its_volume_back(
        real_lab: RealNodeLab, life: Lifecycle) -> None:
    volumes = real_lab.nodes()[0].root / "volumes"

    def held() -> tuple[set[str], set[str]]:
        return {pv["metadata"]["name"] for pv in life.host.json("get", "pv")["items"]}, set(os.listdir(volumes))
    before = held()
    took = []
    for i in range(TURNOVER):
        name = f"turn-{i}"
        life.host.run("create", "-f", "-", input=json.dumps(vc(name, life.namespace)))
        took.append(life.wait_ready(name))
        life.host.run("delete", "vc", name, "-n", life.namespace, "--timeout=120s", timeout=150)
    wait_until(lambda: held() == before, 90, "every volume of the deleted tenants given back", interval=1)
    report.say(f"pods runtime on a real node: {TURNOVER} tenants created and deleted one after another, "
               f"create -> Ready p50 {statistics.median(took):.1f}s (max {max(took):.1f}s); no volume left")


# -- Kubernetes versions ---------------------------------------------------------------------

NEWEST, OLDER = KUBERNETES_VERSIONS[0], KUBERNETES_VERSIONS[1]


def images(life: Lifecycle, name: str) -> dict[str, str]:
    """The image of each control-plane Deployment of ``name``."""
    listed = life.host.json("get", "deployments", "-n", life.namespace, "-l", f"{OWNER}={name}")["items"]
    return {d["metadata"]["labels"][COMPONENT]: d["spec"]["template"]["spec"]["containers"][0]["image"]
            for d in listed}


def wait_upgrade(life: Lifecycle, name: str, state: str, timeout: float = 300) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        obj = life.get(name)
        upgrade = obj["status"].get("upgrade") or {}
        return obj if upgrade.get("state") == state and obj["status"].get("phase") == "Completed" else None
    wait_until(lambda: done() is not None, timeout, f"upgrade of {name} {state}", interval=1)
    return life.get(name)


def test_a_real_tenant_upgrades_in_place_under_load_and_its_slice_pods_keep_running(life: Lifecycle) -> None:
    life.host.run("create", "-f", "-", input=json.dumps(vc("upgraded", life.namespace, {
        "kubernetesVersion": OLDER, "promoteResources": {"resources": {"cpu": "500m", "memory": "512Mi"}}})))
    life.wait_ready("upgraded")
    tenant = life.tenant("upgraded")
    wait_until(lambda: tenant.run("get", "serviceaccount", "default", check=False).returncode == 0, 60,
               "the tenant's default ServiceAccount", interval=0.5)
    tenant.run("run", "sleeper", "--image=docker.io/library/busybox:1.36", "--restart=Never", "--", "sleep", "3600")
    tenant.run("wait", "pod/sleeper", "--for=condition=Ready", "--timeout=180s", timeout=200)
    before = tenant.json("get", "pod", "sleeper")
    [node] = tenant.json("get", "nodes")["items"]
    assert node["status"]["nodeInfo"]["kubeletVersion"] == OLDER  # never newer than its apiserver
    assert images(life, "upgraded")["apiserver"] == f"registry.k8s.io/kube-apiserver:{OLDER}"

    async def under_load() -> Any:
        load = Load.of_kubeconfig(tenant.kubeconfig)
        await load.make_target()
        await load.start()
        await asyncio.sleep(2)
        started = time.monotonic()
        await asyncio.to_thread(life.host.run, "patch", "vc", "upgraded", "-n", life.namespace, "--type=merge",
                                "-p", json.dumps({"spec": {"kubernetesVersion": NEWEST}}))
        await asyncio.to_thread(wait_upgrade, life, "upgraded", "Succeeded")
        took = time.monotonic() - started
        await asyncio.sleep(2)
        return took, await load.stop()
    took, result = asyncio.run(under_load())
    report.say(f"pods runtime: upgrade {OLDER} -> {NEWEST} in {took:.1f}s under load: {json.dumps(result.summary())}")

    obj = life.get("upgraded")
    assert obj["status"]["kubernetesVersion"] == NEWEST
    assert json.loads(tenant.run("get", "--raw", "/version").stdout)["gitVersion"] == NEWEST
    for component in ("apiserver", "controller-manager", "scheduler"):
        if component in images(life, "upgraded"):
            assert images(life, "upgraded")[component] == f"registry.k8s.io/kube-{component}:{NEWEST}"
    assert [b for b in obj["status"]["backups"] if b["reason"] == "PreUpgrade" and b["verified"]]
    after = tenant.json("get", "pod", "sleeper")
    assert after["metadata"]["uid"] == before["metadata"]["uid"] and after["status"]["phase"] == "Running"
    assert after["status"]["containerStatuses"][0]["restartCount"] == 0
    wait_until(lambda: tenant.json("get", "nodes")["items"][0]["status"]["nodeInfo"]["kubeletVersion"] == NEWEST,
               30, "the virtual node to report the new version", interval=1)
    assert result.reads > 50 and result.reads_failed == 0, result.summary()
    assert result.writes_lost == 0, result.summary()
    life.host.run("delete", "vc", "upgraded", "-n", life.namespace, "--timeout=180s", timeout=200)


def test_a_real_tenant_whose_new_apiserver_image_cannot_be_pulled_rolls_back_by_itself(
        real_lab: RealNodeLab, life: Lifecycle) -> None:
    life.host.run("create", "-f", "-", input=json.dumps(vc("held", life.namespace, {"kubernetesVersion": OLDER})))
    life.wait_ready("held")
    image = f"registry.k8s.io/kube-apiserver:{NEWEST}"
    for node in real_lab.nodes():  # the new apiserver's image is on no node, and no registry answers here
        node.ctr("images", "rm", image, check=False)
    try:
        life.host.run("patch", "vc", "held", "-n", life.namespace, "--type=merge", "-p",
                      json.dumps({"spec": {"kubernetesVersion": NEWEST}}))
        obj = wait_upgrade(life, "held", "RolledBack", timeout=180)
    finally:
        archives, _ = node_images()
        for node in real_lab.nodes():
            node.import_images(archives)
    assert obj["status"]["kubernetesVersion"] == OLDER
    assert "kube-apiserver" in obj["status"]["upgrade"]["message"]
    assert images(life, "held")["apiserver"] == f"registry.k8s.io/kube-apiserver:{OLDER}"
    assert ("UpgradeFailed" in dict(life.events("held")))
    life.wait_ready("held")
    assert json.loads(life.tenant("held").run("get", "--raw", "/version").stdout)["gitVersion"] == OLDER
    life.host.run("delete", "vc", "held", "-n", life.namespace, "--timeout=180s", timeout=200)


def test_a_version_older_than_a_named_nodes_kubelet_is_refused_naming_the_node(
        real_lab: RealNodeLab, life: Lifecycle) -> None:
    [worker] = [n.name for n in real_lab.nodes() if not n.control_plane]
    refused = life.host.run("create", "-f", "-", check=False, input=json.dumps(vc("skewed", life.namespace, {
        "kubernetesVersion": OLDER, "promoteResources": {"nodes": [worker]}})))
    assert refused.returncode != 0 and "is invalid" in refused.stderr, refused.stderr
    assert f"{worker} ({NEWEST})" in refused.stderr and "newer than its tenant's apiserver" in refused.stderr
    assert life.host.run("get", "vc", "skewed", "-n", life.namespace, check=False).returncode != 0  # nothing stored
