"""When a cluster should be hibernated: the spec's word, or ``afterInactivity`` passed without a user.

The rules are pure and take the time as an argument (:func:`idle_since`, :func:`inactivity_due`,
:func:`hibernation`). :class:`InactivityClock` remembers, per cluster, the latest user request the
runtime's audit log has shown, and reads the log again only once ``afterInactivity`` could have
passed since then: a busy cluster costs one read per ``afterInactivity``, not one per pass.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

from apiserver.apis import hibernation as sleep
from apiserver.apis.resource import CONTROL_PLANE_READY
from apiserver.apis.virtualcluster import VirtualCluster
from apiserver.machinery.timefmt import rfc3339
from reconciler.runtime.base import ControlPlaneRuntime, RuntimeFailure

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Hibernation:
    """The cluster should be hibernated: why (the Hibernated condition's reason and message)."""

    reason: str  # sleep.SPEC or sleep.INACTIVE
    message: str


def idle_since(vc: VirtualCluster, last_request: dt.datetime | None) -> dt.datetime | None:
    """Since when a running control plane has had no user: its last user request, its start (a new
    or woken control plane gets the whole afterInactivity), or the last wake request, whichever is
    latest. None while the control plane is not running."""
    up = vc.status.true_since(CONTROL_PLANE_READY)
    if up is None:
        return None
    return max(t for t in (up, last_request, vc.wake_requested_at) if t is not None)


def inactivity_due(vc: VirtualCluster, now: dt.datetime, last_request: dt.datetime | None) -> bool:
    """Whether ``afterInactivity`` has passed for a running, awake cluster, counting from
    :func:`idle_since` with the ``last_request`` known so far (the clock then reads the runtime's
    audit log to see whether a later request resets it)."""
    spec = vc.spec.hibernation
    if spec.hibernated or spec.after_inactivity is None or vc.asleep:
        return False
    since = idle_since(vc, last_request)
    return since is not None and now - since >= spec.after_inactivity


def hibernation(vc: VirtualCluster, now: dt.datetime, last_request: dt.datetime | None) -> Hibernation | None:
    """Whether the cluster should be hibernated now, and why; None: it should run.

    ``spec.hibernation.hibernated`` decides alone while true. A cluster hibernated for inactivity
    stays so until it is asked to wake (``vc.wake_pending``) or ``afterInactivity`` is removed; an
    awake one goes to sleep once :func:`inactivity_due`, with ``last_request`` the latest user
    request its runtime has seen."""
    spec = vc.spec.hibernation
    if spec.hibernated:
        return Hibernation(sleep.SPEC, "spec.hibernation.hibernated is true")
    if vc.asleep == sleep.INACTIVE:
        if spec.after_inactivity is None or vc.wake_pending:
            return None
        cond = vc.status.condition(sleep.CONDITION) or {}
        return Hibernation(sleep.INACTIVE, str(cond.get("message") or ""))
    if not inactivity_due(vc, now, last_request):
        return None
    since = idle_since(vc, last_request)
    assert since is not None, "inactivity is only due for a running control plane"
    wake = (" (fetching its kubeconfig wakes it)" if spec.wake_on_access else
            f" (the annotation {sleep.WAKE_ANNOTATION} set to the current time wakes it)")
    return Hibernation(sleep.INACTIVE, f"no request from a user since {rfc3339(since)}, for longer than "
                                       f"spec.hibernation.afterInactivity ({spec.after_inactivity_text}){wake}")


class InactivityClock:
    """The latest user request seen per cluster (by uid), and the decision it leads to."""

    def __init__(self) -> None:
        self._last_request: dict[str, dt.datetime] = {}

    def forget(self, uid: str) -> None:
        self._last_request.pop(uid, None)

    async def hibernation(self, vc: VirtualCluster, runtime: ControlPlaneRuntime) -> Hibernation | None:
        """:func:`hibernation` now; the runtime's audit log is read only once afterInactivity has passed
        since the last request already seen. A runtime that cannot tell leaves the cluster running."""
        uid = vc.meta.uid
        now = dt.datetime.now(dt.UTC)
        known = self._last_request.get(uid)
        after = vc.spec.hibernation.after_inactivity
        if after is not None and inactivity_due(vc, now, known):
            try:
                found = await runtime.last_request(vc.raw, now - after)
            except RuntimeFailure as e:
                log.warning("%s/%s stays awake: %s", vc.meta.namespace, vc.meta.name, e.message)
                return None
            if found is not None and (known is None or found > known):
                known = self._last_request[uid] = found
        return hibernation(vc, now, known)
