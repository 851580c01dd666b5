"""When a VirtualCluster's next snapshot is due: pure logic over its spec, its annotations and the
time of its last snapshot.

The schedule (``spec.backup.schedule``, a CronJob schedule in UTC) counts from the last snapshot
kept, or, before the first, from when the control plane last became ready. Anyone who may update
the VirtualCluster asks for one now by setting the annotation :data:`SNAPSHOT_ANNOTATION` to the
current time (RFC 3339): it is taken when that time is later than the last snapshot's. The
annotation says when, not whether (like ``kubectl rollout restart``'s ``restartedAt``): the server
never clears it, and a request is answered by the first snapshot recorded at or after it, so one
cut short (the server killed while it streamed or verified it) is taken again, and one recorded
but not yet in the status is not taken twice.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from apiserver.apis.resource import CONTROL_PLANE_READY
from apiserver.apis.virtualcluster import VirtualCluster
from apiserver.machinery import cron
from apiserver.machinery.jsonutil import Obj
from apiserver.machinery.timefmt import time_of

__all__ = ["SNAPSHOT_ANNOTATION", "BackupSpec", "due", "spec_of"]

SNAPSHOT_ANNOTATION = "kosmos.io/snapshot-requested"
DEFAULT_KEEP = 3


@dataclass(frozen=True)
class BackupSpec:
    schedule: cron.Schedule
    keep: int


def spec_of(obj: Obj) -> BackupSpec | None:
    """``spec.backup`` read (None: no backups, or a schedule that validation would have refused)."""
    backup = VirtualCluster(obj).spec.backup
    if backup is None:
        return None
    try:
        schedule = cron.parse(str(backup.get("schedule") or ""))
    except cron.CronError:
        return None
    keep = backup.get("keep")
    return BackupSpec(schedule, keep if isinstance(keep, int) and keep >= 1 else DEFAULT_KEEP)


def requested_at(obj: Obj) -> dt.datetime | None:
    return time_of(VirtualCluster(obj).meta.annotations.get(SNAPSHOT_ANNOTATION))


def due(obj: Obj, now: dt.datetime, last_taken: dt.datetime | None) -> tuple[bool, dt.datetime | None]:
    """Whether a snapshot is due now, and when the next one is due after that (None: never)."""
    spec = spec_of(obj)
    if spec is None:
        return False, None
    asked = requested_at(obj)
    if asked is not None and (last_taken is None or asked > last_taken):
        return True, spec.schedule.next_after(now)
    start = last_taken or VirtualCluster(obj).status.true_since(CONTROL_PLANE_READY) or now
    next_at = spec.schedule.next_after(start)
    if next_at is not None and next_at <= now:
        return True, spec.schedule.next_after(now)
    return False, next_at
