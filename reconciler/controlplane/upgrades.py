"""Upgrades of a tenant's Kubernetes version (``spec.kubernetesVersion``): when one is due, and its snapshot.

The controller runs an upgrade as passes of its own while the phase is ``Upgrading``
(:mod:`reconciler.controlplane.status` says each step): the snapshot is taken and recorded first, then the
runtime moves the components (:meth:`reconciler.runtime.base.ControlPlaneRuntime.upgrade`), and a failure
is rolled back by the runtime, with the snapshot when the new apiserver had served.
"""

from __future__ import annotations

import datetime as dt

from apiserver.apis import kubeversion
from apiserver.apis.kubeversion import Offered
from apiserver.apis.virtualcluster import VirtualCluster
from apiserver.machinery.jsonutil import Obj
from reconciler.backup.snapshots import PRE_UPGRADE, snapshot_name
from reconciler.runtime.base import ControlPlaneRuntime, RuntimeFailure

__all__ = ["TIMEOUT", "running_version", "snapshot", "wanted"]

TIMEOUT = 120.0  # seconds each component is given to come up at the new version before the upgrade rolls back


def running_version(vc: VirtualCluster, offered: Offered) -> str:
    """The version the control plane runs, or is to be built at: status.kubernetesVersion once it ran (one this
    server no longer offers: its minor's newest patch here, a patch release replaced), else the spec's (a new
    cluster's first build, or one made before versions were chosen: the newest)."""
    running = vc.status.raw.get("kubernetesVersion")
    if isinstance(running, str) and running:
        return _offered_patch(offered, running)
    return str(offered.resolve(vc.spec.raw.get(kubeversion.FIELD_NAME)) or offered.newest)


def _offered_patch(offered: Offered, running: str) -> str:
    """``running`` when offered, else the newest offered patch of its minor, else ``running`` still."""
    version = kubeversion.parse(running)
    if version is None or offered.resolve(running) is not None:
        return running
    return str(offered.resolve(version.minor_text) or running)


def wanted(vc: VirtualCluster, offered: Offered) -> tuple[str, str] | None:
    """(from, to) when a running cluster's spec names another version it may move to; None when not (an unset
    version keeps what runs), or when that version was rolled back at this generation."""
    running = vc.status.raw.get("kubernetesVersion")
    if not isinstance(running, str) or not running:
        return None
    value = vc.spec.raw.get(kubeversion.FIELD_NAME)
    # unset: it keeps what it runs, or its minor's newest patch once the server no longer offers that one
    target = offered.resolve(value) if value else kubeversion.parse(_offered_patch(offered, running))
    if target is None or str(target) == running:
        return None
    if kubeversion.move_errors(offered, str(target), running):
        return None  # admission refused it; a server whose offer changed since does not act on it either
    last = vc.status.raw.get("upgrade") or {}
    if (last.get("state") == "RolledBack" and last.get("toVersion") == str(target)
            and last.get("observedGeneration") == vc.meta.generation):
        return None  # until the spec changes
    return running, str(target)


async def snapshot(vc: VirtualCluster, runtime: ControlPlaneRuntime, now: dt.datetime) -> tuple[str, list[Obj]]:
    """Take the pre-upgrade snapshot, keeping every one there is (spec.backup's schedule prunes them as it
    prunes its own); its name and the snapshots kept. Raises RuntimeFailure."""
    name = f"{snapshot_name(vc.meta.name, now)}-{PRE_UPGRADE}"
    kept = await runtime.snapshots(vc.raw)
    taken, kept = await runtime.take_snapshot(vc.raw, name, now, len(kept) + 1)
    if taken.problem:
        raise RuntimeFailure("SnapshotInvalid", f"the pre-upgrade snapshot {name} failed verification: {taken.problem}")
    return name, [s.status() for s in kept]
