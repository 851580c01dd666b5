"""Backups' pure rules: CronJob schedules (robfig/cron's standard parser), when a snapshot is due,
and how a snapshot file is told good from bad."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import struct
from pathlib import Path
from typing import Any

import pytest

from apiserver.apis import schema
from apiserver.machinery import cron
from reconciler.backup import schedule
from reconciler.backup.snapshots import (
    BOLT_MAGIC,
    META,
    PAGE_HEADER,
    Snapshot,
    SnapshotStore,
    _fnv64a,
    retained,
    verify,
)

T0 = dt.datetime(2025, 3, 1, 12, 0, 30, tzinfo=dt.UTC)  # a Saturday


@pytest.mark.parametrize(("spec", "expected"), [
    ("*/15 * * * *", "2025-03-01 12:15"), ("0 3 * * *", "2025-03-02 03:00"), ("@hourly", "2025-03-01 13:00"),
    ("@daily", "2025-03-02 00:00"), ("@weekly", "2025-03-02 00:00"), ("@monthly", "2025-04-01 00:00"),
    ("0 0 29 2 *", "2028-02-29 00:00"), ("30 4 1,15 * 5", "2025-03-07 04:30"),  # day of month OR day of week
    ("0 12 * jan-mar MON-FRI", "2025-03-03 12:00"), ("5/20 * * * *", "2025-03-01 12:05"),
    ("@every 10s", "2025-03-01 12:00:40"), ("@every 1h30m", "2025-03-01 13:30:30"),
])
def test_schedules_fire_when_cron_says(spec: str, expected: str) -> None:
    fires = cron.parse(spec).next_after(T0)
    assert fires is not None and str(fires.replace(tzinfo=None)).startswith(expected)


def test_a_schedule_that_never_matches_never_fires() -> None:
    assert cron.parse("0 0 31 2 *").next_after(T0) is None


@pytest.mark.parametrize(("spec", "message"), [
    ("every day", "expected exactly 5 fields, found 2: [every day]"),
    ("61 * * * *", "end of range (61) above maximum (59): 61"),
    ("* * 0 * *", "beginning of range (0) below minimum (1): 0"),
    ("*/0 * * * *", "step of range should be a positive number: */0"),
    ("5-1 * * * *", "beginning of range (5) beyond end of range (1): 5-1"),
    ("1-2-3 * * * *", "too many hyphens: 1-2-3"), ("@fortnightly", "unrecognized descriptor: @fortnightly"),
    ("x * * * *", 'failed to parse int from x: strconv.Atoi: parsing "x": invalid syntax'),
    ("@every soon", 'failed to parse duration @every soon: time: invalid duration "soon"'),
])
def test_bad_schedules_are_refused_in_robfig_cron_words(spec: str, message: str) -> None:
    with pytest.raises(cron.CronError) as refused:
        cron.parse(spec)
    assert str(refused.value) == message
    [cause] = schema.validate_spec({"backup": {"schedule": spec}})
    assert (cause.field, cause.message) == ("spec.backup.schedule", f"Invalid value: {spec!r}: {message}".replace(
        "'", '"'))


def test_keep_defaults_to_three_and_must_be_positive() -> None:
    obj: dict[str, Any] = {"spec": {"backup": {"schedule": "@daily"}}}
    schema.prune_unknown_fields(obj)
    assert obj["spec"]["backup"] == {"schedule": "@daily", "keep": 3}
    [cause] = schema.validate_spec({"backup": {"schedule": "@daily", "keep": 0}})
    assert cause.message == "Invalid value: 0: spec.backup.keep in body should be greater than or equal to 1"
    [cause] = schema.validate_spec({"backup": {"keep": 2}})
    assert (cause.field, cause.message) == ("spec.backup.schedule", "Required value")


def ready_since(seconds: float, **annotations: str) -> dict[str, Any]:
    since = (T0 + dt.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"metadata": {"annotations": annotations}, "spec": {"backup": {"schedule": "@every 60s", "keep": 2}},
            "status": {"conditions": [{"type": "ControlPlaneReady", "status": "True", "lastTransitionTime": since}]}}


def test_the_schedule_counts_from_the_last_snapshot_or_else_from_the_control_plane_start() -> None:
    obj = ready_since(0)
    assert schedule.due(obj, T0 + dt.timedelta(seconds=59), None) == (False, T0.replace(microsecond=0) +
                                                                     dt.timedelta(seconds=60))
    assert schedule.due(obj, T0 + dt.timedelta(seconds=60), None)[0]
    last = T0 + dt.timedelta(seconds=100)
    assert not schedule.due(obj, last + dt.timedelta(seconds=30), last)[0]
    due, next_at = schedule.due(obj, last + dt.timedelta(seconds=61), last)
    assert due and next_at == last + dt.timedelta(seconds=121)
    starting = ready_since(0)
    starting["status"]["conditions"][0]["status"] = "False"  # not up: counts from now, not from the condition
    assert not schedule.due(starting, T0 + dt.timedelta(seconds=300), None)[0]


def test_a_snapshot_asked_for_is_taken_once_when_later_than_the_last() -> None:
    asked = (T0 + dt.timedelta(seconds=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    obj = ready_since(0, **{schedule.SNAPSHOT_ANNOTATION: asked})
    assert schedule.due(obj, T0 + dt.timedelta(seconds=11), None)[0]
    assert schedule.due(obj, T0 + dt.timedelta(seconds=11), T0)[0]
    assert not schedule.due(obj, T0 + dt.timedelta(seconds=12), T0 + dt.timedelta(seconds=11))[0]
    assert schedule.due({"spec": {}}, T0, None) == (False, None)


def bolt(page_size: int = 4096, pages: int = 4) -> bytes:
    """A bbolt file's shape: two meta pages with bbolt's checksums, then empty pages."""
    out = bytearray(page_size * pages)
    for page in (0, 1):
        fields = [BOLT_MAGIC, 2, page_size, 0, 3, 0, 2, 4, page]
        body = struct.pack("<IIII QQ QQQ", *fields)
        struct.pack_into("<Q", out, page * page_size, page)
        out[page * page_size + PAGE_HEADER:page * page_size + PAGE_HEADER + META.size] = \
            body + struct.pack("<Q", _fnv64a(body))
    return bytes(out)


def stream(db: bytes) -> bytes:
    return db + hashlib.sha256(db).digest()


def test_a_snapshot_is_good_when_etcds_hash_and_a_meta_page_check_out(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    path.write_bytes(stream(bolt()))
    assert verify(path) == ""
    first_meta_broken = bytearray(bolt())
    first_meta_broken[PAGE_HEADER + 20] ^= 1
    path.write_bytes(stream(bytes(first_meta_broken)))
    assert verify(path) == "", "bbolt opens a file whose second meta page is good"
    both_broken = bytearray(first_meta_broken)
    both_broken[4096 + PAGE_HEADER + 20] ^= 1
    path.write_bytes(stream(bytes(both_broken)))
    assert verify(path) == "meta page checksum mismatch"
    path.write_bytes(stream(b"\0" * 8192))
    assert verify(path) == "not a bbolt database (bad magic number)"
    flipped = bytearray(stream(bolt()))
    flipped[5000] ^= 0xFF
    path.write_bytes(bytes(flipped))
    assert verify(path) == "the SHA-256 of the data does not match the one etcd appended"
    path.write_bytes(bolt())
    assert "not a database followed by its SHA-256" in verify(path)


def test_the_store_keeps_the_newest_good_ones_and_shows_damage_while_it_is_recent(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    store.prepare("ns", "vc")
    for i in range(4):
        moment = T0 + dt.timedelta(minutes=i)
        name = f"vc-{i}"
        store.path("ns", "vc", name).write_bytes(stream(bolt()))
        assert not store.record("ns", "vc", name, moment, revision=10 + i).problem
    damaged = store.path("ns", "vc", "vc-3")
    damaged.write_bytes(damaged.read_bytes()[:-1] + b"!")
    kept = store.prune("ns", "vc", 2)
    assert [(s.name, bool(s.problem)) for s in kept] == [("vc-1", False), ("vc-2", False), ("vc-3", True)]
    assert [s.status()["verified"] for s in store.list("ns", "vc")] == [True, True, False]  # recorded
    assert sorted(p.name for p in store.dir("ns", "vc").glob("*.db")) == ["vc-1.db", "vc-2.db", "vc-3.db"]
    bad = store.path("ns", "vc", "vc-9")
    bad.write_bytes(b"nonsense")
    assert store.record("ns", "vc", "vc-9", T0, 1).problem and not bad.exists()


def test_what_an_unfinished_snapshot_left_is_swept_and_one_recorded_but_not_pruned_is_seen(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    directory = store.prepare("ns", "vc")
    for i in range(3):
        store.path("ns", "vc", f"vc-{i}").write_bytes(stream(bolt()))
        store.record("ns", "vc", f"vc-{i}", T0 + dt.timedelta(minutes=i), revision=10 + i)
    (directory / ".vc-3.db.part").write_bytes(b"half a stream")  # killed while etcd streamed it
    (directory / "vc-4.db").write_bytes(stream(bolt()))  # killed before it was verified and recorded
    (directory / ".vc-4.json.1234.tmp").write_bytes(b"{")  # killed while it was recorded
    assert store.sweep("ns", "vc") == [".vc-3.db.part", ".vc-4.json.1234.tmp", "vc-4.db"]
    assert sorted(p.name for p in directory.iterdir()) == [f"vc-{i}{s}" for i in range(3) for s in (".db", ".json")]
    assert store.sweep("ns", "vc") == [] and store.sweep("ns", "gone") == []
    listed = store.list("ns", "vc")  # killed before pruning: one more than keep is recorded
    assert [s.name for s in retained(listed, 2)] == ["vc-1", "vc-2"] and retained(listed, 3) == listed


# -- restoring (spec.restoreFrom) -----------------------------------------------------------------


def restoring_vc() -> dict[str, Any]:
    return {"metadata": {"name": "copy", "namespace": "ns", "uid": "u1", "generation": 1},
            "spec": {"restoreFrom": {"virtualCluster": "prod", "snapshot": "prod-1"}}, "status": {"phase": "Pending"}}


def test_a_snapshot_that_cannot_be_restored_leaves_the_cluster_pending_and_is_tried_again() -> None:
    from reconciler.backup.etcd import RESTORE_FAILED
    from reconciler.controlplane import status
    from reconciler.runtime.base import RuntimeFailure

    message = 'snapshot "prod-1" of virtualcluster "prod" does not exist'
    out = status.built(restoring_vc(), status.Observed(failure=RuntimeFailure(RESTORE_FAILED, message)), "process",
                       "2026-11-25T12:00:00Z")
    assert (out.status["phase"], out.status["reason"], out.status["message"]) == ("Pending", "RestoreFailed", message)
    ready = {c["type"]: (c["status"], c["reason"]) for c in out.status["conditions"]}
    assert ready["ControlPlaneReady"] == ready["Ready"] == ("False", "RestoreFailed")
    assert out.event == ("Warning", "RestoreFailed", message) and out.requeue_after == status.RUNTIME_RETRY


async def test_restoring_without_etcdutl_fails_loudly_and_a_bad_snapshot_makes_no_tenant_directory(
        tmp_path: Path) -> None:
    from reconciler.runtime.base import RuntimeFailure
    from reconciler.runtime.process import ProcessRuntime

    label = 'snapshot "prod-1" of virtualcluster "prod"'
    runtime = ProcessRuntime(tmp_path / "tenants", tmp_path / "bin")
    kept = runtime.backups.store.prepare("ns", "prod") / "prod-1.db"
    with pytest.raises(RuntimeFailure) as missing:
        await runtime.restore(restoring_vc(), "prod", "prod-1", label)
    assert missing.value.reason == "RestoreFailed"
    assert missing.value.message == f"cannot restore {label}: {tmp_path / 'bin' / 'etcdutl'} is missing"
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "etcdutl").write_text("#!/bin/sh\nexit 0\n")
    with pytest.raises(RuntimeFailure) as absent:
        await runtime.restore(restoring_vc(), "prod", "prod-1", label)
    assert absent.value.message == f"{label} does not exist"
    damaged = bytearray(stream(bolt()))
    damaged[100] ^= 0xFF
    kept.write_bytes(bytes(damaged))
    with pytest.raises(RuntimeFailure) as refused:
        await runtime.restore(restoring_vc(), "prod", "prod-1", label)
    assert refused.value.message == (f"{label} failed verification and was not restored: the SHA-256 of the data "
                                     f"does not match the one etcd appended")
    assert not (tmp_path / "tenants").exists()



def test_a_snapshot_pods_result_is_read_back_from_its_log_whatever_it_logged_before() -> None:
    from reconciler.backup import results

    kept = [Snapshot("a-20261125-100000", "2026-11-25T10:00:00Z", 41, 1056), Snapshot("a-1", "t", 2, 3, "damaged")]
    log = "\n".join(["warning: something on the way", results.line({"taken": dataclasses.asdict(kept[0]),
                                                                        "kept": results.encode(kept)}), ""])
    found = results.parse(log)
    assert found is not None
    assert results.decode([found["taken"]]) == kept[:1] and results.decode(found["kept"]) == kept
    assert results.parse("Traceback (most recent call last):\n  ...\nKeyError: 'x'") is None
    assert results.parse(results.PREFIX + "{cut sh") is None


def test_the_restore_pod_reports_a_damaged_snapshot_and_restores_nothing(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from reconciler.backup import results
    from reconciler.backup.__main__ import main

    damaged = bytearray(stream(bolt()))
    damaged[100] ^= 0xFF
    (tmp_path / "s.db").write_bytes(bytes(damaged))
    (tmp_path / "etcdutl").write_text("#!/bin/sh\nexit 0\n")
    args = ["restore", "--snapshot", str(tmp_path / "s.db"), "--data-dir", str(tmp_path / "data"),
            "--label", 'snapshot "s"', "--etcdutl", str(tmp_path / "etcdutl"), "--member", "m-0",
            "--peer-url", "https://m-0:2380", "--initial-cluster", "m-0=https://m-0:2380", "--token", "t"]
    assert main(args) == 1
    assert results.parse(capsys.readouterr().out) == {
        "reason": "RestoreFailed", "message": 'snapshot "s" failed verification and was not restored: the SHA-256 '
                                              'of the data does not match the one etcd appended'}
    assert not (tmp_path / "data").exists()
    (tmp_path / "data").mkdir()  # started (or restored) before: nothing to do, whatever the snapshot
    assert main(args) == 0
    assert results.parse(capsys.readouterr().out) == {"restored": False}
