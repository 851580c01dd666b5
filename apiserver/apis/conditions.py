"""Conditions by type: the one place that finds a condition in a status and upserts one.

The same rules as k8s.io/apimachinery's ``meta.FindStatusCondition`` and
``meta.SetStatusCondition``: a condition is identified by its ``type``, and an upsert moves
``lastTransitionTime`` only when the condition's ``status`` changes. Works on any object's
``status.conditions`` (VirtualClusters, Nodes, Pods), as decoded JSON.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from apiserver.machinery.timefmt import now_rfc3339, time_of

__all__ = ["find_condition", "is_true", "set_condition", "true_since"]

Condition = dict[str, Any]


def find_condition(conditions: Any, type_: str) -> Condition | None:
    """The condition of ``type_`` in ``conditions`` (a status's list; missing or malformed reads as
    empty, entries that are not objects are skipped), or None."""
    if not isinstance(conditions, list):
        return None
    for cond in conditions:
        if isinstance(cond, dict) and cond.get("type") == type_:
            return cond
    return None


def _true(cond: Condition | None) -> bool:
    return cond is not None and cond.get("status") == "True"


def is_true(conditions: Any, type_: str) -> bool:
    """Whether the condition of ``type_`` is there and True (apimachinery's ``IsStatusConditionTrue``)."""
    return _true(find_condition(conditions, type_))


def true_since(conditions: Any, type_: str) -> dt.datetime | None:
    """When the condition of ``type_`` last turned True, if it is True and says when."""
    cond = find_condition(conditions, type_)
    return time_of(cond.get("lastTransitionTime")) if cond is not None and _true(cond) else None


def set_condition(conditions: list[Condition], type_: str, status: str, reason: str, message: str,
                  generation: int, now: str | None = None) -> list[Condition]:
    """A new list with the condition of ``type_`` set (appended when absent, in place otherwise);
    lastTransitionTime only moves when the status changes. ``now``: the time (default: now)."""
    now = now or now_rfc3339()
    out = []
    found = False
    for cond in conditions:
        if cond.get("type") == type_:
            found = True
            changed = cond.get("status") != status
            cond = {**cond, "status": status, "reason": reason, "message": message,
                    "observedGeneration": generation,
                    "lastTransitionTime": now if changed else cond.get("lastTransitionTime", now)}
        out.append(cond)
    if not found:
        out.append({"type": type_, "status": status, "reason": reason, "message": message,
                    "observedGeneration": generation, "lastTransitionTime": now})
    return out
