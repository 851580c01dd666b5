"""Scheduled, verified snapshots of tenant etcds (spec.backup) with the process runtime: real etcd,
real tenant control planes, real kubectl."""

from __future__ import annotations

import json
import stat
import time
from collections.abc import Iterator
from typing import Any

import pytest

from hack.harness import Pki
from reconciler.backup.snapshots import verify
from tests.conftest import vc
from tests.support.backups import Backups

pytestmark = pytest.mark.e2e


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
