"""Scheduled, verified snapshots of tenant etcds (spec.backup) with the process runtime: real etcd,
real tenant control planes, real kubectl."""

from __future__ import annotations

import json
import os
import random
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hack.harness import Pki
from reconciler.backup.snapshots import verify
from tests.conftest import vc
from tests.support import report
from tests.support.backups import Backups

pytestmark = pytest.mark.e2e

SEED = int(os.environ.get("VC_CHAOS_SEED", "20261125"))


@pytest.fixture(scope="module")
def bk(tmp_path_factory: pytest.TempPathFactory, pki_files: Pki) -> Iterator[Backups]:
    backups = Backups.start(tmp_path_factory.mktemp("backup"), pki_files, "backup-test")
    yield backups
    backups.stop()


def test_snapshots_follow_the_schedule_are_verified_hold_the_tenants_data_and_only_the_newest_are_kept(
        bk: Backups) -> None:
    ns = "bk"
    bk.kubectl.run("create", "-f", "-", input=json.dumps(vc("sched", ns, {"backup": {"schedule": "@every 3s",
                                                                                    "keep": 2}})))
    bk.wait_ready(ns, "sched")
    bk.tenant(ns, "sched").run("create", "configmap", "precious", "--from-literal=k=v")
    seen: set[str] = set()

    def three_taken_two_kept(backups: list[dict[str, Any]]) -> bool:
        seen.update(b["name"] for b in backups)
        return len(seen) >= 3 and len(backups) == 2
    backups = bk.wait_backups(ns, "sched", three_taken_two_kept)
    assert all(b["verified"] for b in backups) and all(b["sizeBytes"] > 0 for b in backups)
    assert backups[0]["time"] < backups[1]["time"] and backups[0]["revision"] <= backups[1]["revision"]
    assert all(b["name"].startswith("sched-") for b in backups)
    directory = bk.snapshots(ns, "sched")
    files = sorted(p.name for p in directory.iterdir())
    assert len(files) in (4, 6)  # .db + .json of the two kept (one more may be being taken right now)
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    newest = directory / f"{backups[-1]['name']}.db"
    assert stat.S_IMODE(newest.stat().st_mode) == 0o600 and newest.stat().st_size == backups[-1]["sizeBytes"]
    assert verify(newest) == ""
    data = newest.read_bytes()
    assert b"/registry/configmaps/default/precious" in data, "the snapshot holds the tenant's objects"
    assert b"PRIVATE KEY" not in data, "and none of this server's key material"
    bk.kubectl.run("delete", "vc", "sched", "-n", ns, "--wait", timeout=120)
    assert list(directory.glob("*.db")), "snapshots outlive their VirtualCluster: they are backups"


def test_a_snapshot_is_taken_on_request_and_one_damaged_at_rest_is_reported_unverified(bk: Backups) -> None:
    ns = "bk-now"
    bk.kubectl.run("create", "-f", "-", input=json.dumps(vc("ondemand", ns, {"backup": {"schedule": "0 0 1 1 *"}})))
    bk.wait_ready(ns, "ondemand")
    obj = bk.get(ns, "ondemand")
    assert obj["spec"]["backup"] == {"schedule": "0 0 1 1 *", "keep": 3}  # keep defaults to 3
    assert not obj["status"].get("backups"), "nothing is due before next new year"

    def ask() -> None:
        bk.request_snapshot(ns, "ondemand")
    ask()
    [first] = bk.wait_backups(ns, "ondemand", lambda b: len(b) == 1, timeout=30)
    assert first["verified"] is True
    time.sleep(1.1)  # a request must be later than the last snapshot, to the second
    path = bk.snapshots(ns, "ondemand") / f"{first['name']}.db"
    damaged = bytearray(path.read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF
    path.write_bytes(bytes(damaged))
    ask()
    backups = bk.wait_backups(ns, "ondemand", lambda b: len(b) == 2, timeout=30)
    assert [(b["name"], b["verified"]) for b in backups] == [(first["name"], False), (backups[1]["name"], True)]
    assert "does not match" in verify(path)
    time.sleep(6)  # later passes (a health check every 5 s) report it as it was found
    assert [b["verified"] for b in bk.get(ns, "ondemand")["status"]["backups"]] == [False, True]


def test_backup_fields_are_validated_with_kube_wording(bk: Backups) -> None:
    bad = vc("bad", "bk-bad", {"backup": {"schedule": "every day", "keep": 0}})
    out = bk.kubectl.run("create", "-f", "-", input=json.dumps(bad), check=False)
    assert out.returncode != 0
    assert ('spec.backup.schedule: Invalid value: "every day": expected exactly 5 fields, found 2: [every day]'
            in out.stderr)
    assert "spec.backup.keep: Invalid value: 0: spec.backup.keep in body should be greater than or equal to 1" in out.stderr
    out = bk.kubectl.run("create", "-f", "-", check=False, input=json.dumps(vc("bad", "bk-bad", {"backup": {}})))
    assert "spec.backup.schedule: Required value" in out.stderr


def _on_disk(directory: Path) -> tuple[set[str], set[str], set[str]]:
    """Snapshot files: the .db stems, the .json stems, and anything else (temporary files)."""
    names = os.listdir(directory) if directory.exists() else []
    dbs = {n[:-3] for n in names if n.endswith(".db") and not n.startswith(".")}
    metas = {n[:-5] for n in names if n.endswith(".json") and not n.startswith(".")}
    return dbs, metas, {n for n in names if n.startswith(".") or not n.endswith((".db", ".json"))}


def _caught_at(directory: Path, listed: set[str], keep: int, before: set[str]) -> str:
    """Where the kill caught the snapshot, told from what it left on disk."""
    dbs, metas, others = _on_disk(directory)
    if any(n.endswith(".part") for n in others):
        return "mid-stream"
    if others:
        return "mid-record"
    if dbs - metas:
        return "written, not recorded"
    if len(metas) > keep:
        return "recorded, not pruned"
    if metas != listed:
        return "pruned, status not written"
    return "done" if metas - before else "not started"


def _converged(bk: Backups, ns: str, name: str, keep: int, asked: str) -> str:
    """'' when status.backups lists exactly the verified snapshots on disk, no more than keep, nothing
    else is on disk, and the request was honoured by exactly one snapshot; else what is not so."""
    listed = (bk.get(ns, name).get("status") or {}).get("backups") or []
    names = [b["name"] for b in listed]
    dbs, metas, others = _on_disk(bk.snapshots(ns, name))
    if others:
        return f"left on disk: {sorted(others)}"
    if dbs != metas:
        return f"snapshot files without their record, or records without their file: {sorted(dbs ^ metas)}"
    if set(names) != metas or len(names) != len(metas):
        return f"status lists {names}, the disk holds {sorted(metas)}"
    if not all(b["verified"] for b in listed):
        return f"unverified snapshots listed: {listed}"
    if len(names) > keep:
        return f"{len(names)} snapshots kept, keep is {keep}: {names}"
    answering = [b["name"] for b in listed if b["time"] >= asked]
    if len(answering) != 1:
        return f"the request of {asked} is answered by {answering}"
    return ""


def test_vc_apiserver_killed_mid_snapshot_converges(bk: Backups) -> None:
    """vc-apiserver SIGKILLed while it streams an on-demand snapshot, while it verifies and records it,
    while it prunes: after a restart the request is honoured by exactly one verified snapshot (one cut
    short is taken again, one recorded is not), nothing partial is listed or left on disk, and keep
    holds."""
    rng = random.Random(SEED)
    ns, name, keep = "bk-kill", "bulky", 2
    bk.kubectl.run("create", "-f", "-", input=json.dumps(vc(name, ns, {"backup": {"schedule": "0 0 1 1 *",
                                                                                "keep": keep}})))
    bk.wait_ready(ns, name)
    tenant = bk.tenant(ns, name)
    blob = rng.randbytes(600 * 1024).hex()[:900 * 1024]  # a snapshot of ~50 MB takes measurable time
    for batch in range(5):
        items = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"bulk-{batch}-{i}"},
                  "data": {"blob": blob}} for i in range(10)]
        tenant.run("create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
                   timeout=120)
    directory = bk.snapshots(ns, name)

    def watch(until: Callable[[], bool], timeout: float = 60) -> float:
        deadline = time.monotonic() + timeout
        while not until():
            assert time.monotonic() < deadline, f"never happened; on disk: {sorted(os.listdir(directory))}"
            time.sleep(0.005)
        return time.monotonic()

    def streaming() -> bool:
        return any(n.endswith(".part") for n in _on_disk(directory)[2])

    def ask() -> tuple[str, set[str], float]:
        time.sleep(1.1)  # a request must be later than the last snapshot, to the second
        before, at = _on_disk(directory)[1], time.monotonic()
        bk.request_snapshot(ns, name)
        return bk.get(ns, name)["metadata"]["annotations"]["kosmos.io/snapshot-requested"], before, at

    asked, before, requested = ask()  # one undisturbed, to measure
    began = watch(streaming)
    streamed = watch(lambda: not streaming())
    recorded = watch(lambda: bool(_on_disk(directory)[1] - before))
    [first] = bk.wait_backups(ns, name, lambda b: len(b) == 1)
    took = streamed - began
    lag = began - requested
    report.say(f"snapshot of {first['sizeBytes'] / 1e6:.0f} MB: begun {lag:.2f}s after the request, streamed in "
               f"{took:.2f}s, verified and recorded {recorded - streamed:.2f}s later")
    caught: dict[str, int] = {}
    started = time.monotonic()
    for round_ in range(8):
        asked, before, requested = ask()
        trigger = ("stream", "written", "recorded")[round_ % 3] if round_ < 6 else "request"
        if trigger == "stream":  # while etcd's stream is being written
            watch(streaming)
            time.sleep(rng.uniform(0, took))
        elif trigger == "written":  # as the stream's file is renamed into place: not yet verified, recorded
            watch(lambda: bool(_on_disk(directory)[0] - before))  # noqa: B023
        elif trigger == "recorded":  # as the new snapshot's record lands: verified, not yet pruned
            watch(lambda: bool(_on_disk(directory)[1] - before))  # noqa: B023
            time.sleep(rng.uniform(0, 0.03))
        else:  # somewhere between the request and the end of its snapshot
            time.sleep(max(0.0, requested + rng.uniform(0, lag + took + 0.1) - time.monotonic()))
        bk.api.proc.kill()
        listed = {b["name"] for b in (bk.stored(ns, name).get("status") or {}).get("backups") or []}
        where = _caught_at(directory, listed, keep, before)
        caught[where] = caught.get(where, 0) + 1
        bk.api.start()
        restarted, why = time.monotonic(), "never checked"
        while time.monotonic() - restarted < 90:
            if not (why := _converged(bk, ns, name, keep, asked)):
                break
            time.sleep(0.5)
        assert not why, f"round {round_ + 1}, killed {where} ({trigger}): not converged: {why}"
        report.say(f"round {round_ + 1}: killed {where} ({trigger}), converged "
                   f"{time.monotonic() - restarted:.1f}s after the restart")
    mid = sum(n for where, n in caught.items() if where not in ("done", "not started"))
    report.say(f"{mid} of 8 kills landed mid-snapshot ({caught}); {time.monotonic() - started:.0f}s")
    assert caught.get("mid-stream") and mid >= 4, f"where the kills landed: {caught}"
    bk.kubectl.run("delete", "vc", name, "-n", ns, "--wait", timeout=120)
