"""What a VirtualCluster counts against a host ResourceQuota: the resource names a platform team
caps, and one VirtualCluster's use of each.

kube-apiserver's quota admission never sees a VirtualCluster (the aggregator proxies it to us), so
the server enforces these itself (:mod:`apiserver.registry.quota`), as kube does for its own
resources. The names are ones a ResourceQuota accepts and no built-in quota evaluator claims, so
the host's quota controller leaves their ``used`` to us; a name with a ``/`` outside
``kubernetes.io`` is an extended resource there, whose amounts must be whole numbers, hence
millicores for cpu:

=========================================  ==============================================================
``count/virtualclusters.kosmos.io``        VirtualClusters (kube's own object-count form)
``virtualclusters.kosmos.io/slice-millicpu``  cpu of shared slices, in millicores (``4k``: four cpus)
``virtualclusters.kosmos.io/slice-memory``    memory of shared slices (``64Gi``)
``virtualclusters.kosmos.io/slice-storage``   ephemeral and persistent storage of shared slices
``virtualclusters.kosmos.io/promoted-nodes``  host nodes promoted whole (by count, name or nodeInfos)
=========================================  ==============================================================
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import ROUND_CEILING, Decimal
from typing import Any

from apiserver.apis.sharedslice import dedicated_resources, quantity_text, shared_slice
from apiserver.machinery.quantity import QuantityError, parse_quantity

__all__ = ["COUNT", "PROMOTED_NODES", "RESOURCES", "SLICE_CPU", "SLICE_MEMORY", "SLICE_STORAGE", "Usage",
           "add", "amount", "format_amount", "increases", "usage"]

COUNT = "count/virtualclusters.kosmos.io"
SLICE_CPU = "virtualclusters.kosmos.io/slice-millicpu"
SLICE_MEMORY = "virtualclusters.kosmos.io/slice-memory"
SLICE_STORAGE = "virtualclusters.kosmos.io/slice-storage"
PROMOTED_NODES = "virtualclusters.kosmos.io/promoted-nodes"
RESOURCES = (COUNT, SLICE_CPU, SLICE_MEMORY, SLICE_STORAGE, PROMOTED_NODES)
BYTES = (SLICE_MEMORY, SLICE_STORAGE)

Usage = dict[str, Decimal]

_SLICE = {"cpu": SLICE_CPU, "memory": SLICE_MEMORY, "storage": SLICE_STORAGE, "ephemeral-storage": SLICE_STORAGE}


def amount(value: Any) -> Decimal:
    """A stored quantity's value; one that is no quantity (validation refuses it first) counts nothing."""
    try:
        return parse_quantity(quantity_text(value))
    except QuantityError:  # validation refuses it before admission; nothing to count
        return Decimal(0)


def usage(spec: Mapping[str, Any] | None) -> Usage:
    """One VirtualCluster's use of every name in :data:`RESOURCES` (zeros included). Dedicated
    ``resources`` count one node: how many whole nodes cover them is known only once they are chosen."""
    spec = spec or {}
    used = dict.fromkeys(RESOURCES, Decimal(0))
    used[COUNT] = Decimal(1)
    for resource, value in (shared_slice(spec) or {}).items():
        name = _SLICE.get(resource)
        if name is not None:
            counted = amount(value) * (1000 if name == SLICE_CPU else 1)
            used[name] += counted.to_integral_value(ROUND_CEILING)
    resources = spec.get("promoteResources") if isinstance(spec.get("promoteResources"), dict) else {}
    nodes = sum(int(p.get("nodeCount") or 0) for p in spec.get("promotePolicies") or [] if isinstance(p, dict))
    nodes += len(resources.get("nodes") or []) + len(resources.get("nodeInfos") or [])
    used[PROMOTED_NODES] = Decimal(nodes + (1 if dedicated_resources(spec) else 0))
    return used


def add(total: Usage, more: Mapping[str, Decimal]) -> Usage:
    return {**total, **{k: total.get(k, Decimal(0)) + v for k, v in more.items()}}


def increases(new: Usage, old: Usage | None) -> Usage:
    """What an update (``old`` → ``new``) or a create (``old`` None) asks for beyond what it had: the
    positive differences only, so a scale-down always passes."""
    before = old or {}
    return {k: v - before.get(k, Decimal(0)) for k, v in new.items() if v > before.get(k, Decimal(0))}


def format_amount(name: str, value: Decimal) -> str:
    """A whole amount as Go writes the quantity canonically: bytes in the largest binary unit that
    divides them (``64Gi``), anything else in the largest decimal one (``4k`` millicores)."""
    number = int(value)
    if number == 0:
        return "0"
    if name in BYTES:
        for power, suffix in ((6, "Ei"), (5, "Pi"), (4, "Ti"), (3, "Gi"), (2, "Mi"), (1, "Ki")):
            if number % 1024**power == 0:
                return f"{number // 1024**power}{suffix}"
    for power, suffix in ((18, "E"), (15, "P"), (12, "T"), (9, "G"), (6, "M"), (3, "k")):
        if number % 10**power == 0:
            return f"{number // 10**power}{suffix}"
    return str(number)


def listing(amounts: Iterable[tuple[str, Decimal]]) -> str:
    """``name=amount,name=amount``, sorted by name, as kube's quota errors list resources."""
    return ",".join(f"{name}={format_amount(name, value)}" for name, value in sorted(amounts))
