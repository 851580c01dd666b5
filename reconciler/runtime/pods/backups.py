"""Snapshots as the ``pods`` runtime takes, prunes and restores them: a pod of :mod:`.backupobjects` run
to its end on the host, and what it reported read back from its log.

Only pods reach the snapshot volume, so a tenant's snapshots are what the last snapshot pod reported
(its VirtualCluster's ``status.backups``).
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

from reconciler.backup.etcd import RESTORE_FAILED, SNAPSHOT_FAILED
from reconciler.backup.results import decode, parse
from reconciler.backup.snapshots import Snapshot
from reconciler.runtime.base import FIELD_MANAGER, Obj, RuntimeFailure
from reconciler.runtime.pods import backupobjects, supervisor
from reconciler.runtime.pods.host import Host
from reconciler.runtime.pods.hostobjects import MANAGED_BY, HostObjects, Plan

__all__ = ["Backups", "reported"]

log = logging.getLogger(__name__)


def reported(vc: Obj) -> list[Snapshot]:
    """The snapshots the last snapshot pod reported, as the VirtualCluster's status keeps them."""
    return [Snapshot(str(b.get("name")), str(b.get("time")), int(b.get("revision") or 0),
                     int(b.get("sizeBytes") or 0), "" if b.get("verified") else "failed verification")
            for b in (vc.get("status") or {}).get("backups") or []]


@dataclass(frozen=True)
class Backups:
    """The pods runtime's snapshot pods, of ``image``, on each namespace's snapshot volume."""

    host: Host
    objects: HostObjects
    image: str
    volume_size: str
    storage_class: str | None
    timeout: float  # seconds a pod left by a pass cut short may take to go

    async def take(self, plan: Plan, snapshot: str, moment: dt.datetime, keep: int) -> tuple[Snapshot, list[Snapshot]]:
        pod = backupobjects.save_pod(self.objects, plan, self.image, snapshot, moment.astimezone(dt.UTC).isoformat(),
                                     keep)
        result = await self._run(plan, pod)
        return decode([result["taken"]])[0], decode(result["kept"])

    async def prune(self, plan: Plan, keep: int) -> list[Snapshot]:
        result = await self._run(plan, backupobjects.prune_pod(self.objects, plan, self.image, keep))
        return decode(result["kept"])

    async def restore(self, plan: Plan, origin: str, snapshot: str, label: str) -> bool:
        """Each etcd member's data claim, made before the StatefulSet that adopts it by name, written by a
        restore pod from the snapshot volume. Nothing once the StatefulSet exists."""
        if await self.host.get("StatefulSet", plan.namespace, plan.object_name("etcd")) is not None:
            return False
        restored = False
        for i, member in enumerate(self.objects.members(plan)):
            await self.host.create(plan.member_claim(member), exists_ok=True)
            pod = backupobjects.restore_pod(self.objects, plan, self.image, i, origin, snapshot, label)
            result = await self._run(plan, pod, reason=RESTORE_FAILED, make_claim=False)
            restored |= bool(result.get("restored"))
        if restored:
            log.info("restored %s into %s/%s", label, plan.namespace, plan.name)
        return restored

    async def _run(self, plan: Plan, pod: Obj, reason: str = SNAPSHOT_FAILED, make_claim: bool = True) -> Obj:
        """Run one backup pod to its end and return what it reported. One of a kind per VirtualCluster at
        a time: one left by a pass cut short is removed first (what it left half-written is swept by the
        next). Raises RuntimeFailure (``reason``)."""
        namespace, name = plan.namespace, pod["metadata"]["name"]
        if not await self._snapshot_claim(plan, make_claim):
            raise RuntimeFailure(reason, f"this namespace has no snapshots: its snapshot volume "
                                         f"{backupobjects.SNAPSHOT_CLAIM} does not exist")
        await supervisor.delete_and_wait(self.host, "Pod", namespace, name, self.timeout)
        await self.host.create(pod)
        try:
            ended = await supervisor.wait_finished(self.host, namespace, name, reason, backupobjects.BACKUP_TIMEOUT)
            said = await self.host.log(namespace, name)
        finally:
            await self.host.delete("Pod", namespace, name)
        result = parse(said)
        if result is None:
            last = said.strip().splitlines()[-1:] or ["no output"]
            raise RuntimeFailure(reason, f"pod {namespace}/{name} ended {ended['status'].get('phase')} without a "
                                         f"result: {last[0][-300:]}")
        if "reason" in result:
            raise RuntimeFailure(str(result["reason"]), str(result.get("message")))
        return result

    async def _snapshot_claim(self, plan: Plan, make: bool) -> bool:
        """Whether the namespace's snapshot claim exists, made when ``make``: once per namespace and left
        alone after (a claim's spec cannot shrink, and it outlives every VirtualCluster whose snapshots
        it holds)."""
        if await self.host.get("PersistentVolumeClaim", plan.namespace, backupobjects.SNAPSHOT_CLAIM) is not None:
            return True
        if not make:
            return False
        await self.host.create(backupobjects.snapshot_claim(plan.namespace, {MANAGED_BY: FIELD_MANAGER},
                                                            self.volume_size, self.storage_class), exists_ok=True)
        return True
