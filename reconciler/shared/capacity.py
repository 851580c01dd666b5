"""The host's room for shared slices: a slice's virtual node promises its capacity to the tenant's
scheduler, so a slice starts only when the host's slice pool can still hold it beside every other
slice's reservation; otherwise it waits, saying how much it asks and how much is free.

The pool is every host node that can run a slice's pods: Ready, schedulable, matching the slice node
pool's selector, and with every ``NoSchedule`` or ``NoExecute`` taint tolerated by the pool's
tolerations (:mod:`.placement`; a promoted node is cordoned and tainted, so it is out). What is reserved is the ``hard`` of every other slice's host
quota, as the quotas are the slices' own bound. ``overcommit`` (``--slice-overcommit``) scales the
pool, for a platform team that chooses to promise more than the host has.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from apiserver.apis.conditions import is_true
from apiserver.apis.quota import SLICE_MEMORY, amount, format_amount
from apiserver.kubeclient.client import KubeClient
from apiserver.machinery.jsonutil import Obj
from reconciler.shared import names
from reconciler.shared.placement import Placement

ANYWHERE = Placement()
RESOURCES = ("cpu", "memory")  # what a node's allocatable and a slice's quota both name
QUOTA_NAMES = {"cpu": "requests.cpu", "memory": "requests.memory"}


def in_pool(node: Obj, placement: Placement = ANYWHERE) -> bool:
    """Ready, schedulable, and in the slice node pool (its labels and taints, :mod:`.placement`)."""
    spec, status = node.get("spec") or {}, node.get("status") or {}
    return is_true(status.get("conditions"), "Ready") and not spec.get("unschedulable") and placement.admits(node)


def pool(nodes: Iterable[Obj], placement: Placement = ANYWHERE) -> dict[str, Decimal]:
    total = dict.fromkeys(RESOURCES, Decimal(0))
    for node in nodes:
        if in_pool(node, placement):
            allocatable = (node.get("status") or {}).get("allocatable") or {}
            for r in RESOURCES:
                total[r] += amount(allocatable.get(r, 0))
    return total


def reserved(quotas: Iterable[Obj], but: str) -> dict[str, Decimal]:
    """What the slices' host quotas (all but the one in namespace ``but``) hold."""
    total = dict.fromkeys(RESOURCES, Decimal(0))
    for q in quotas:
        meta = q.get("metadata") or {}
        if meta.get("name") != names.QUOTA or meta.get("namespace") == but:
            continue
        hard = (q.get("spec") or {}).get("hard") or {}
        for r in RESOURCES:
            total[r] += amount(hard.get(QUOTA_NAMES[r], 0))
    return total


def shortfall(asked: Mapping[str, Any], room: Mapping[str, Decimal], taken: Mapping[str, Decimal],
              overcommit: float) -> str:
    """Why the slice does not fit ('' when it does): per resource, asked against free."""
    short = []
    for r in RESOURCES:
        if r not in asked:
            continue
        want = amount(asked[r])
        free = max(room[r] * Decimal(str(overcommit)) - taken[r], Decimal(0))
        if want > free:
            short.append(f"{r} {_shown(r, want)} asked, {_shown(r, free)} free")
    return "; ".join(short)


def _shown(resource: str, value: Decimal) -> str:
    if resource == "memory":
        return format_amount(SLICE_MEMORY, value.to_integral_value())
    return f"{value.normalize():f}"


async def room_for(host: KubeClient, namespace: str, asked: Mapping[str, Any], overcommit: float,
                   placement: Placement = ANYWHERE) -> str:
    """'' when the host's slice pool holds the slice for host ``namespace``; else what is short, and of what."""
    nodes = (await host.get("/api/v1/nodes")).get("items") or []
    quotas = (await host.get("/api/v1/resourcequotas", fieldSelector=f"metadata.name={names.QUOTA}")).get("items")
    room, taken = pool(nodes, placement), reserved(quotas or [], namespace)
    short = shortfall(asked, room, taken, overcommit)
    if not short:
        return ""
    scale = f" x {overcommit:g} overcommit" if overcommit != 1 else ""
    return (f"the host cannot hold this slice: {short} (the slice pool's allocatable{scale}, less "
            f"{_shown('cpu', taken['cpu'])} cpu and {_shown('memory', taken['memory'])} memory reserved by "
            f"other slices); it waits until room frees up")
