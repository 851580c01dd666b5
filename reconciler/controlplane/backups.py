"""A running control plane's snapshots as spec.backup asks for them, and the restore a new one starts from.

Both are steps of a build pass: :func:`take_due` once the control plane is ready (what it returns goes
into ``status.backups``), :func:`restore` before the control plane first starts (``spec.restoreFrom``).
Each outcome a user would want to know of is an Event on the VirtualCluster.
"""

from __future__ import annotations

import datetime as dt

from apiserver.apis.virtualcluster import VirtualCluster
from apiserver.kubeclient.events import EventRecorder
from apiserver.machinery import errors
from apiserver.machinery.timefmt import parse_rfc3339
from apiserver.registry.store import Registry
from reconciler.backup import schedule
from reconciler.backup.snapshots import retained, snapshot_name
from reconciler.controlplane.status import RUNTIME_RETRY, Backups
from reconciler.runtime.base import ControlPlaneRuntime, RuntimeFailure


async def take_due(vc: VirtualCluster, runtime: ControlPlaneRuntime, events: EventRecorder) -> Backups | None:
    """Take the snapshot that is due (spec.backup's schedule, or the annotation asking for one), verify
    it, keep the newest spec.backup.keep; the snapshots kept, and when to look again. A snapshot that
    fails is an Event, and is tried again shortly. None: the spec asks for no backups."""
    obj = vc.raw
    spec = schedule.spec_of(obj)
    if spec is None:
        return None
    now = dt.datetime.now(dt.UTC)
    try:
        kept = await runtime.snapshots(obj)
        last = parse_rfc3339(kept[-1].time) if kept else None
        due, next_at = schedule.due(obj, now, last)
        if not due and retained(kept, spec.keep) != kept:  # one recorded, not yet pruned (or keep lowered)
            kept = await runtime.prune_snapshots(obj, spec.keep)
        if not due:
            return Backups([s.status() for s in kept], (next_at - now).total_seconds() if next_at else None)
        snapshot = snapshot_name(vc.meta.name, now)
        taken, kept = await runtime.take_snapshot(obj, snapshot, now, spec.keep)
    except RuntimeFailure as e:
        await events.record(obj, "Warning", e.reason, e.message)
        return Backups(list(vc.status.backups), RUNTIME_RETRY)
    if taken.problem:
        await events.record(obj, "Warning", "SnapshotInvalid",
                            f"snapshot {snapshot} failed verification and was removed: {taken.problem}")
        return Backups([s.status() for s in kept], RUNTIME_RETRY)
    await events.record(obj, "Normal", "SnapshotTaken", f"snapshot {snapshot} of the tenant's etcd at revision "
                                                        f"{taken.revision}, {taken.size} bytes, verified")
    return Backups([s.status() for s in kept], (next_at - now).total_seconds() if next_at else None)


async def restore(vc: VirtualCluster, runtime: ControlPlaneRuntime, registry: Registry,
                  events: EventRecorder) -> None:
    """spec.restoreFrom: the control plane's data is that snapshot's before it first starts (the
    runtime does nothing once its data exists). The PKI and credentials are this VirtualCluster's
    own, fresh: the snapshot holds the tenant's objects only. A clone when the source still exists,
    a restore when it does not; either is an Event. Raises RuntimeFailure (RestoreFailed)."""
    source = vc.spec.restore_from
    if source is None:
        return
    namespace, origin, snapshot = vc.meta.namespace, str(source.get("virtualCluster")), str(source.get("snapshot"))
    label = f'snapshot "{snapshot}" of virtualcluster "{origin}"'
    if not await runtime.restore(vc.raw, origin, snapshot, label):
        return
    try:
        await registry.get(namespace, origin)
        clone = origin != vc.meta.name
    except errors.ApiError as e:
        if e.code != 404:
            raise
        clone = False
    what = f"a clone of {origin}, which still exists" if clone else f"a restore: {origin} no longer exists"
    await events.record(vc.raw, "Normal", "Restored", f"the control plane starts from {label} ({what}), with a "
                                                      f"fresh PKI and fresh credentials")
