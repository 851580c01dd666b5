"""The host's room for a shared slice: the pool, what other slices hold, and what does not fit."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from reconciler.shared.capacity import pool, reserved, shortfall


def node(cpu: str, memory: str, ready: bool = True, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "n"}, "spec": spec,
            "status": {"allocatable": {"cpu": cpu, "memory": memory},
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def quota(namespace: str, cpu: str, memory: str, name: str = "shared-slice") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace},
            "spec": {"hard": {"requests.cpu": cpu, "requests.memory": memory}}}


def test_the_pool_is_every_ready_schedulable_untainted_node() -> None:
    nodes = [node("8", "32Gi"), node("16", "64Gi"), node("8", "32Gi", ready=False),
             node("8", "32Gi", unschedulable=True),
             node("8", "32Gi", taints=[{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]),
             node("4", "8Gi", taints=[{"key": "soft", "effect": "PreferNoSchedule"}])]
    assert pool(nodes) == {"cpu": Decimal(28), "memory": Decimal(104 * 2**30)}


def test_other_slices_quotas_are_reserved_but_not_its_own_nor_other_quotas() -> None:
    quotas = [quota("slice-a", "4", "8Gi"), quota("slice-b", "2500m", "1Gi"), quota("mine", "10", "10Gi"),
              quota("slice-c", "100", "100Gi", name="team-quota")]
    assert reserved(quotas, but="mine") == {"cpu": Decimal("6.5"), "memory": Decimal(9 * 2**30)}


def test_a_slice_fits_within_the_pool_times_the_overcommit_less_what_is_reserved() -> None:
    room = {"cpu": Decimal(40), "memory": Decimal(160 * 2**30)}
    taken = {"cpu": Decimal(4), "memory": Decimal(8 * 2**30)}
    assert shortfall({"cpu": "36", "memory": "8Gi"}, room, taken, 1.0) == ""
    assert shortfall({"cpu": "38", "memory": "200Gi"}, room, taken, 1.0) == (
        "cpu 38 asked, 36 free; memory 200Gi asked, 152Gi free")
    assert shortfall({"cpu": "38"}, room, taken, 2.0) == ""
    assert shortfall({"pods": "300"}, room, taken, 1.0) == "", "what the pool does not measure is not held back"
