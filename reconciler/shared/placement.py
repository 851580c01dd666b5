"""Where every slice's host pods run: the host's slice node pool, named by the platform team.

``--slice-node-selector`` (a label selector) and ``--slice-tolerations`` (``key[=value]:Effect``,
comma-separated) are given to every host pod of every slice, as a required node affinity and its
tolerations; a tenant's own placement fields are never carried over (they are stripped). The same
pool is what the host's room for slices is counted over (:mod:`.capacity`), and the virtual node's
capacity does not change with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from apiserver.machinery import errors
from apiserver.machinery.jsonutil import Obj
from apiserver.machinery.selectors import LabelSelector, Operator, parse_label_selector

EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_AFFINITY_OPERATOR = {Operator.EQUALS: "In", Operator.DOUBLE_EQUALS: "In", Operator.IN: "In",
                      Operator.NOT_EQUALS: "NotIn", Operator.NOT_IN: "NotIn", Operator.EXISTS: "Exists",
                      Operator.DOES_NOT_EXIST: "DoesNotExist", Operator.GREATER_THAN: "Gt", Operator.LESS_THAN: "Lt"}


class PlacementError(ValueError):
    """A flag that names no pool: its message says which and why."""


def parse_tolerations(text: str) -> list[Obj]:
    """``key[=value]:Effect,...`` (``key:Effect`` tolerates any value) as Pod tolerations."""
    tolerations: list[Obj] = []
    for term in filter(None, (t.strip() for t in text.split(","))):
        what, sep, effect = term.rpartition(":")
        if not sep or not what or effect not in EFFECTS:
            raise PlacementError(f"--slice-tolerations: {term!r} is not key[=value]:Effect (Effect one of "
                                 f"{', '.join(EFFECTS)})")
        key, eq, value = what.partition("=")
        tolerations.append({"key": key, "operator": "Equal", "value": value, "effect": effect} if eq else
                           {"key": key, "operator": "Exists", "effect": effect})
    return tolerations


def _tolerates(tolerations: list[Obj], taint: Mapping[str, Any]) -> bool:
    for t in tolerations:
        if t.get("effect") not in (None, "", taint.get("effect")) or t.get("key") != taint.get("key"):
            continue
        if t.get("operator") == "Exists" or t.get("value") == taint.get("value", ""):
            return True
    return False


@dataclass(frozen=True)
class Placement:
    selector: LabelSelector = field(default_factory=LabelSelector)
    tolerations: tuple[Obj, ...] = ()

    @classmethod
    def from_flags(cls, selector: str, tolerations: str) -> Placement:
        try:
            parsed = parse_label_selector(selector) if selector else LabelSelector()
        except errors.ApiError as e:  # the parser answers as the API would (a 400); here it is a flag
            raise PlacementError(f"--slice-node-selector: {e.message}") from None
        return cls(parsed, tuple(parse_tolerations(tolerations)))

    def admits(self, node: Obj) -> bool:
        """Whether a slice's host pod may run on ``node``: its labels match and every NoSchedule or
        NoExecute taint is tolerated."""
        labels = (node.get("metadata") or {}).get("labels") or {}
        taints = (node.get("spec") or {}).get("taints") or []
        return self.selector.matches(labels) and all(
            _tolerates(list(self.tolerations), t) for t in taints if t.get("effect") in ("NoSchedule", "NoExecute"))

    def apply(self, spec: Obj) -> None:
        """Put the pool into a host pod's spec (whose own placement fields are already gone)."""
        if not self.selector.empty:
            expressions = [{"key": r.key, "operator": _AFFINITY_OPERATOR[r.operator],
                            **({"values": sorted(r.values)} if r.values else {})}
                           for r in self.selector.requirements]
            spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": expressions}]}}}
        if self.tolerations:
            spec["tolerations"] = [dict(t) for t in self.tolerations]

    def describe(self) -> str:
        parts = [self.selector.to_string() or "every node"]
        if self.tolerations:
            parts.append("tolerating " + ", ".join(f"{t['key']}:{t['effect']}" for t in self.tolerations))
        return " ".join(parts)
