"""Hibernation as the spec asks for it and the status records it: the names and the spec's reading that
the ``kubeconfig`` subresource and the reconciler share (the status is read by the typed view:
``VirtualCluster(obj).asleep``, ``.wake_pending``).

Two ways into hibernation, told apart by the ``Hibernated`` condition's reason:

* ``Hibernated``: ``spec.hibernation.hibernated`` is true. The spec is the user's word, so only
  the spec wakes it (set it to false).
* ``Inactive``: ``spec.hibernation.afterInactivity`` passed without a request from a user. The spec
  is unchanged; the cluster wakes when asked: a ``kubeconfig`` fetch (``wakeOnAccess``, the default)
  or anyone who may update it setting the annotation :data:`WAKE_ANNOTATION` to the current time.
  Removing ``afterInactivity`` wakes it too.

The condition turns True when hibernation is decided (phase ``Hibernating``), so its
``lastTransitionTime`` is when the cluster went to sleep; a wake request counts when it is at least
that recent.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from apiserver.machinery.golang import parse_duration

__all__ = ["CONDITION", "HIBERNATION_PHASES", "INACTIVE", "SPEC", "WAKE_ANNOTATION", "HibernationSpec", "read_spec"]

CONDITION = "Hibernated"
SPEC = "Hibernated"  # the condition's reason when spec.hibernation.hibernated put the cluster to sleep
INACTIVE = "Inactive"  # ... when afterInactivity did
WAKE_ANNOTATION = "kosmos.io/wake-requested"  # an RFC 3339 time: wake a cluster hibernated for inactivity
HIBERNATION_PHASES = ("Hibernating", "Hibernated")


@dataclass(frozen=True)
class HibernationSpec:
    """``spec.hibernation``, read with its defaults (absent: never hibernate)."""

    used: bool = False  # spec.hibernation is present
    hibernated: bool = False
    after_inactivity: dt.timedelta | None = None
    after_inactivity_text: str = ""  # as the user wrote it, for messages
    wake_on_access: bool = True


def read_spec(spec: Any) -> HibernationSpec:
    """``spec.hibernation`` (the value given: absent, null or not an object reads as never hibernate), read
    with its defaults; a VirtualCluster's is ``VirtualCluster(obj).spec.hibernation``."""
    if not isinstance(spec, dict):
        return HibernationSpec()
    text = spec.get("afterInactivity") or ""
    nanoseconds = parse_duration(text) if isinstance(text, str) and text else None
    after = dt.timedelta(microseconds=nanoseconds / 1000) if nanoseconds else None
    return HibernationSpec(used=True, hibernated=spec.get("hibernated") is True, after_inactivity=after,
                           after_inactivity_text=text if after else "",
                           wake_on_access=spec.get("wakeOnAccess") is not False)
