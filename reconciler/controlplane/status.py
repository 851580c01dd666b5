"""The status a reconcile pass leads to, and the one write that records it.

A pass acts first (PKI, runtime, nodes) and gathers what it saw in an :class:`Observed`. The new
status, the event to record and when to look again follow from the object and that observation
alone: the functions here do no I/O and take the time as an argument. The controller then writes
the status once, through ``/status``, guarded by the object's resourceVersion.

Phases as API.md says: ``Pending`` (accepted) → ``Preparing`` (PKI and components being built) →
``Initialized`` (control plane ready, nodes joining) → ``Completed``; ``Updating`` while nodes
change under a completed cluster; ``Hibernating`` → ``Hibernated`` → ``Waking`` (then on as a
build) when hibernation is asked for or inactivity calls for it (:mod:`.inactivity`);
``Deleting`` during teardown.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from apiserver.apis import hibernation as sleep
from apiserver.apis.conditions import set_condition
from apiserver.apis.resource import CONTROL_PLANE_READY, NODES_READY, READY
from apiserver.apis.virtualcluster import VirtualCluster
from apiserver.machinery.jsonutil import Obj
from reconciler.backup.etcd import RESTORE_FAILED
from reconciler.controlplane.inactivity import Hibernation
from reconciler.controlplane.rotation import Rotating
from reconciler.nodes.promoter import NodeReport
from reconciler.runtime.base import ControlPlaneState, RuntimeFailure

CONDITIONS = (CONTROL_PLANE_READY, NODES_READY, READY)
HIBERNATED = sleep.CONDITION
NO_RUNTIME_REASON = "NoControlPlaneRuntime"
NO_RUNTIME_MESSAGE = "no control-plane runtime is configured (--control-plane-runtime); the control plane will not be built"
NO_PROMOTION_REASON = "NodePromotionUnavailable"
UNREACHABLE_REASON = "HostUnreachable"
POLL = 0.25  # seconds between readiness checks while a control plane starts
HEALTH_CHECK = 5.0  # seconds between checks of a ready control plane
NODE_POLL = 1.0  # seconds between passes while nodes join
RUNTIME_RETRY = 10.0  # seconds before a runtime failure is tried again


# -- computing the next status (pure) ------------------------------------------------------

class NextStatus:
    """The next status of one object, built from its current one; nothing is written here."""

    def __init__(self, obj: Obj, now: str) -> None:
        vc = VirtualCluster(obj)
        self.now = now
        self.generation = vc.meta.generation
        self.current: Obj = vc.status.raw
        self.status: Obj = {**self.current, "conditions": list(self.current.get("conditions") or [])}

    def condition(self, type_: str, ok: bool, reason: str, message: str) -> None:
        self.status["conditions"] = set_condition(self.status["conditions"], type_, "True" if ok else "False",
                                                  reason, message, self.generation, self.now)

    def phase(self, phase: str, reason: str, message: str) -> None:
        self.status.update(phase=phase, reason=reason, message=message)

    def set(self, **fields: Any) -> None:
        self.status.update(fields)

    def result(self) -> Obj:
        """The status with observedGeneration, and updateTime moved only when phase or reason did."""
        status = {**self.status, "observedGeneration": self.generation}
        moved = (status.get("phase"), status.get("reason")) != (self.current.get("phase"), self.current.get("reason"))
        status["updateTime"] = self.now if moved else self.current.get("updateTime", self.now)
        return status


@dataclass(frozen=True)
class Outcome:
    """Where a pass leaves an object: its new status, the event that tells of it, what comes next."""

    status: Obj
    event: tuple[str, str, str] | None = None  # (type, reason, message), recorded when the status's reason changes
    requeue_after: float | None = None  # look again after this many seconds (None: only on the next change)
    backoff: str = ""  # the host or a tenant did not answer (this says so): retry with back-off


@dataclass(frozen=True)
class Backups:
    """The snapshots kept (``status.backups``) and how soon the next one is due (None: never)."""

    kept: list[Obj]
    next_in: float | None = None


@dataclass(frozen=True)
class Observed:
    """What a build pass found: the runtime's failure or its state, then the nodes' report, or the
    host (or tenant) not answering while the nodes were reconciled; the snapshots where spec.backup
    asks for them."""

    failure: RuntimeFailure | None = None
    state: ControlPlaneState | None = None
    nodes: NodeReport | None = None
    unreachable: str = ""
    backups: Backups | None = None
    shared: Obj | None = None  # status.sharedResources while the spec asks for a shared slice
    rotation: Rotating | None = None  # status.credentials, for a tenant that ever rotated one


@dataclass(frozen=True)
class Stopping:
    """What a hibernation pass found: the nodes' host not answering, the runtime's failure, or
    whether every component has stopped."""

    stopped: bool = False
    failure: RuntimeFailure | None = None
    unreachable: str = ""


def hibernating(obj: Obj, why: Hibernation, now: str) -> Outcome:
    """Hibernation decided: the phase and conditions say so before anything stops (the next pass)."""
    status = NextStatus(obj, now)
    message = f"hibernating: returning the nodes to the host and stopping the control plane; {why.message}"
    status.condition(HIBERNATED, True, why.reason, why.message)
    status.condition(CONTROL_PLANE_READY, False, "Hibernating", message)
    status.condition(READY, False, "Hibernating", message)
    status.phase("Hibernating", "Hibernating", message)
    return Outcome(status.result(), ("Normal", "Hibernating", message), requeue_after=0.0)


def hibernated(obj: Obj, why: Hibernation, seen: Stopping, now: str) -> Outcome:
    """The status after a hibernation pass: ``Hibernated`` once every component has stopped and every
    node is back in the host, else still ``Hibernating`` saying what holds it up."""
    status = NextStatus(obj, now)
    status.condition(HIBERNATED, True, why.reason, why.message)
    if seen.unreachable:
        return _unreachable(obj, status, NODES_READY, seen.unreachable)
    if seen.failure is not None:
        reason, message = seen.failure.reason, f"hibernating: {seen.failure.message}"
        status.condition(CONTROL_PLANE_READY, False, reason, message)
        status.phase("Hibernating", reason, message)
        return Outcome(status.result(), ("Warning", reason, message), requeue_after=RUNTIME_RETRY)
    status.set(nodes=[])
    if not seen.stopped:
        message = f"hibernating: the nodes are back in the host; waiting for the control plane to stop; {why.message}"
        status.phase("Hibernating", "StoppingControlPlane", message)
        return Outcome(status.result(), requeue_after=POLL)
    message = (f"hibernated: the control plane is stopped with its data kept and the nodes are back in the host; "
               f"{why.message}")
    for type_ in CONDITIONS:
        status.condition(type_, False, "Hibernated", message)
    status.phase("Hibernated", "Hibernated", message)
    return Outcome(status.result(), ("Normal", "Hibernated", message))


def _awake(obj: Obj, status: NextStatus, ready: bool, runtime: str) -> None:
    """The Hibernated condition of a cluster that runs (or is starting), where hibernation is used."""
    vc = VirtualCluster(obj)
    spec = vc.spec.hibernation
    if not spec.used and vc.status.condition(HIBERNATED) is None:
        return
    if not ready:
        if vc.status.condition(HIBERNATED) is not None and (vc.asleep or vc.waking):
            status.condition(HIBERNATED, False, "Waking", f"waking: starting the control plane from its data "
                                                          f"({runtime} runtime)")
        return
    after = (f"; it hibernates after {spec.after_inactivity_text} without a request from a user"
             if spec.after_inactivity else "")
    status.condition(HIBERNATED, False, "Awake", f"the control plane runs{after}")


def accepted(obj: Obj, now: str) -> Outcome:
    """A new VirtualCluster: Pending, with every condition False, before anything is built."""
    status = NextStatus(obj, now)
    status.phase("Pending", "Accepted", "the virtual cluster was accepted; its control plane will be built")
    for type_ in CONDITIONS:
        status.condition(type_, False, "Pending", "the control plane has not been built yet")
    return Outcome(status.result(), ("Normal", "Accepted", "virtual cluster accepted"), requeue_after=0.0)


def no_runtime(obj: Obj, now: str) -> Outcome:
    status = NextStatus(obj, now)
    status.phase("Pending", NO_RUNTIME_REASON, NO_RUNTIME_MESSAGE)
    for type_ in CONDITIONS:
        status.condition(type_, False, NO_RUNTIME_REASON, NO_RUNTIME_MESSAGE)
    return Outcome(status.result())


def deleting(obj: Obj, now: str) -> Outcome:
    """Deleted: the phase says so before the teardown starts (the next pass)."""
    status = NextStatus(obj, now)
    status.phase("Deleting", "TearingDown", "removing the control plane")
    return Outcome(status.result(), ("Normal", "Deleting", "removing the control plane"), requeue_after=0.0)


def unreachable(obj: Obj, condition: str, error: str, now: str) -> Outcome:
    """The host (or the tenant) is not answering: say so in ``condition`` and Ready, keep the phase, back off."""
    return _unreachable(obj, NextStatus(obj, now), condition, error)


def _unreachable(obj: Obj, status: NextStatus, condition: str, error: str) -> Outcome:
    message = f"waiting for the host or tenant apiserver to answer: {error}"
    status.condition(condition, False, UNREACHABLE_REASON, message)
    status.condition(READY, False, UNREACHABLE_REASON, message)
    status.phase(VirtualCluster(obj).status.phase or "Pending", UNREACHABLE_REASON, message)
    return Outcome(status.result(), ("Warning", UNREACHABLE_REASON, message), backoff=message)


def built(obj: Obj, seen: Observed, runtime: str, now: str, version: str = "") -> Outcome:
    """The status after a build pass of ``runtime``, its components at Kubernetes ``version`` (no node report
    while the spec asks for nodes: no node joiner is configured)."""
    vc = VirtualCluster(obj)
    status = NextStatus(obj, now)
    # a woken control plane is Waking until it is ready again, as a new one is Preparing
    building = "Waking" if vc.waking else "Preparing"
    if not vc.status.is_true(CONTROL_PLANE_READY):
        if building == "Waking":
            status.phase("Waking", "Waking", f"waking: starting the control plane from its data ({runtime} runtime)")
        else:
            status.phase("Preparing", "BuildingControlPlane", f"building the control plane ({runtime} runtime)")
    _awake(obj, status, seen.state is not None and seen.state.ready, runtime)
    if seen.failure is not None:
        reason, message = seen.failure.reason, seen.failure.message
        # nothing is built from a snapshot that cannot be restored: the cluster waits, Pending
        status.phase("Pending" if reason == RESTORE_FAILED else building, reason, message)
        status.condition(CONTROL_PLANE_READY, False, reason, message)
        status.condition(READY, False, reason, message)
        return Outcome(status.result(), ("Warning", reason, message), requeue_after=RUNTIME_RETRY)
    state = seen.state
    assert state is not None, "a build pass observes the runtime's failure or its state"
    status.set(controlPlaneEndpoint=state.endpoint, port=state.port)
    if not state.ready:
        status.condition(CONTROL_PLANE_READY, False, state.reason, state.message)
        status.condition(READY, False, state.reason, state.message)
        if state.reason != "Starting":
            status.phase(building, state.reason, state.message)
        return Outcome(status.result(), ("Warning" if state.reason != "Starting" else "Normal", state.reason,
                                         state.message), requeue_after=POLL)
    status.condition(CONTROL_PLANE_READY, True, state.reason, state.message)
    if version:
        status.set(kubernetesVersion=version)
    if seen.backups is not None:
        status.set(backups=seen.backups.kept)
    if seen.rotation is not None:
        status.set(credentials=seen.rotation.status)
    if seen.unreachable:
        return _unreachable(obj, status, NODES_READY, seen.unreachable)
    if seen.shared is not None:
        status.set(sharedResources=seen.shared)
    elif status.current.get("sharedResources"):
        status.set(sharedResources=None)
    if not vc.spec.asks_for_compute:
        status.set(nodes=[])
        status.condition(NODES_READY, True, "NoNodesRequested", "the spec asks for no nodes")
        status.condition(READY, True, "Ready", f"control plane ready at {state.endpoint}")
        status.phase("Completed", "Ready", f"control plane ready at {state.endpoint}")
    elif seen.nodes is not None:
        _nodes(obj, status, seen.nodes, state.endpoint)
    else:
        message = (f"the spec asks for nodes but no node joiner is configured (a host cluster, and the "
                   f"process runtime or --node-joiner=agent); the control plane is ready at {state.endpoint}")
        status.condition(NODES_READY, False, NO_PROMOTION_REASON, message)
        status.condition(READY, False, NO_PROMOTION_REASON, message)
        status.phase("Initialized", NO_PROMOTION_REASON, message)
    result = status.result()
    event = ("Normal", result.get("reason", "ControlPlaneReady"), result.get("message", state.message))
    # a ready control plane is still watched (crashed components come back); joining nodes more often
    after = HEALTH_CHECK if result.get("phase") == "Completed" else NODE_POLL
    if seen.backups is not None and seen.backups.next_in is not None:
        after = max(min(after, seen.backups.next_in), 0.0)  # the next snapshot on time
    if seen.rotation is not None and seen.rotation.next_in is not None:
        after = max(min(after, seen.rotation.next_in), 0.0)  # a rotation's next step without delay
    return Outcome(result, event, requeue_after=after)


def _nodes(obj: Obj, status: NextStatus, report: NodeReport, endpoint: str) -> None:
    """Nodes follow the spec; the phase says where that stands."""
    status.set(nodes=report.nodes)
    counts = f"{report.ready}/{len(report.nodes)} promoted nodes ready"
    if report.complete:
        if report.nodes:
            status.condition(NODES_READY, True, "NodesReady", counts)
        else:
            status.condition(NODES_READY, True, "NoNodesRequested", "the spec asks for no nodes")
        status.condition(READY, True, "Ready", f"control plane ready at {endpoint}; {counts}")
        status.phase("Completed", "Ready", f"control plane ready at {endpoint}; {counts}")
        return
    problems = "; ".join(report.shortages + report.waiting)
    reason = "InsufficientNodes" if report.shortages else "NodesJoining"
    status.condition(NODES_READY, False, reason, f"{counts}: {problems}")
    status.condition(READY, False, reason, f"{counts}: {problems}")
    if report.shortages and not report.nodes:
        status.phase("Pending", reason, f"waiting for nodes: {problems}")
    elif VirtualCluster(obj).status.phase in ("Completed", "Updating"):
        status.phase("Updating", reason, f"{counts}: {problems}")
    else:
        status.phase("Initialized", reason, f"{counts}: {problems}")


# -- upgrades ------------------------------------------------------------------------------

UPGRADED = "Upgraded"  # the condition of a cluster that was ever upgraded
UPGRADING = "Upgrading"


def upgrading(obj: Obj, from_version: str, to_version: str, now: str) -> Outcome:
    """An upgrade decided: the phase says so before anything changes (the next pass acts)."""
    status = NextStatus(obj, now)
    # written as a merge patch: what the last upgrade recorded is dropped by name, its snapshot above all
    status.set(upgrade={"fromVersion": from_version, "toVersion": to_version, "state": "InProgress",
                        "startTime": now, "observedGeneration": status.generation, "snapshot": None,
                        "completionTime": None, "durationSeconds": None, "message": None})
    message = (f"upgrading from {from_version} to {to_version}: a snapshot of the tenant's etcd first, then "
               f"kube-apiserver, kube-controller-manager and kube-scheduler")
    status.condition(UPGRADED, False, UPGRADING, message)
    status.phase(UPGRADING, UPGRADING, message)
    return Outcome(status.result(), ("Normal", UPGRADING, message), requeue_after=0.0)


def upgrade_snapshot_taken(obj: Obj, snapshot: str, kept: list[Obj], now: str) -> Outcome:
    """The pre-upgrade snapshot is recorded before the first component changes (a pass cut short after this
    does not take another)."""
    status = NextStatus(obj, now)
    upgrade = {**(status.current.get("upgrade") or {}), "snapshot": snapshot}
    message = f"upgrading from {upgrade.get('fromVersion')} to {upgrade.get('toVersion')}: snapshot {snapshot} taken"
    status.set(upgrade=upgrade, backups=kept)
    status.phase(UPGRADING, "PreUpgradeSnapshotTaken", message)
    return Outcome(status.result(), ("Normal", "PreUpgradeSnapshotTaken", message), requeue_after=0.0)


def upgraded(obj: Obj, seconds: float, now: str) -> Outcome:
    status = NextStatus(obj, now)
    upgrade = status.current.get("upgrade") or {}
    to_version = str(upgrade.get("toVersion"))
    message = f"upgraded from {upgrade.get('fromVersion')} to {to_version} in {seconds:.1f} s"
    status.set(kubernetesVersion=to_version, upgrade={**upgrade, "state": "Succeeded", "completionTime": now,
                                                     "durationSeconds": round(seconds), "message": message})
    status.condition(UPGRADED, True, "Upgraded", message)
    status.phase("Updating", "Upgraded", message)
    return Outcome(status.result(), ("Normal", "Upgraded", message), requeue_after=0.0)


def upgrade_failed(obj: Obj, why: str, restored: bool | None, seconds: float, now: str) -> Outcome:
    """Rolled back: the cluster runs the version it ran, its data restored from the pre-upgrade snapshot when the
    new apiserver had served (``restored`` None: it had not, nothing to restore; False: the runtime could not);
    not tried again until the spec changes."""
    status = NextStatus(obj, now)
    upgrade = status.current.get("upgrade") or {}
    back = {True: f" and its data restored from snapshot {upgrade.get('snapshot')}",
            False: f"; its data is as the new version left it (snapshot {upgrade.get('snapshot')} was not restored)",
            None: ""}[restored]
    message = (f"upgrade from {upgrade.get('fromVersion')} to {upgrade.get('toVersion')} failed after {seconds:.1f} "
               f"s: {why}; rolled back to {upgrade.get('fromVersion')}{back}. It is not tried again until the "
               f"spec changes")
    status.set(upgrade={**upgrade, "state": "RolledBack", "completionTime": now, "durationSeconds": round(seconds),
                        "message": message, "observedGeneration": status.generation})
    status.condition(UPGRADED, False, "UpgradeFailed", message)
    status.phase("Updating", "UpgradeFailed", message)
    return Outcome(status.result(), ("Warning", "UpgradeFailed", message), requeue_after=0.0)


# -- imported clusters ---------------------------------------------------------------------

IMPORT_CHECK = 30.0  # seconds between checks of an imported cluster
IMPORT_FAILED = "ImportFailed"


def imported(obj: Obj, server: str, version: str, nodes: list[tuple[str, bool]], now: str) -> Outcome:
    """An imported cluster that answered: Completed and Ready, with its version and nodes."""
    status = NextStatus(obj, now)
    ready = sum(1 for _, ok in nodes if ok)
    message = f"imported cluster {version} at {server}; {ready}/{len(nodes)} nodes ready"
    status.set(controlPlaneEndpoint=server, kubernetesVersion=version,
               nodes=[{"name": name, "phase": "Ready" if ok else "NotReady"} for name, ok in nodes])
    status.condition(CONTROL_PLANE_READY, True, "Imported", f"the imported cluster answers at {server}")
    status.condition(NODES_READY, ready == len(nodes), "NodesReady" if ready == len(nodes) else "NodesNotReady",
                     f"{ready}/{len(nodes)} nodes ready")
    status.condition(READY, True, "Ready", message)
    status.phase("Completed", "Imported", message)
    return Outcome(status.result(), ("Normal", "Imported", message), requeue_after=IMPORT_CHECK)


def import_failed(obj: Obj, message: str, now: str) -> Outcome:
    """The imported cluster cannot be reached as its Secret says: not Ready, checked again."""
    status = NextStatus(obj, now)
    status.condition(CONTROL_PLANE_READY, False, IMPORT_FAILED, message)
    status.condition(READY, False, IMPORT_FAILED, message)
    status.phase(VirtualCluster(obj).status.phase or "Pending", IMPORT_FAILED, message)
    return Outcome(status.result(), ("Warning", IMPORT_FAILED, message), requeue_after=RUNTIME_RETRY)
