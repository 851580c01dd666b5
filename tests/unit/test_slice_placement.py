"""Where every slice's host pods run: the host's slice node pool (--slice-node-selector, --slice-tolerations)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from reconciler.shared import translate
from reconciler.shared.capacity import pool
from reconciler.shared.placement import Placement, PlacementError, parse_tolerations

VC = {"metadata": {"name": "dev", "namespace": "team", "uid": "u1"}, "spec": {}}


def node(labels: dict[str, str], taints: list[dict[str, str]] | None = None, cpu: str = "8") -> dict[str, Any]:
    return {"metadata": {"name": "n", "labels": labels}, "spec": {"taints": taints or []},
            "status": {"allocatable": {"cpu": cpu, "memory": "8Gi"}, "conditions": [{"type": "Ready", "status": "True"}]}}


def tenant_pod(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "web", "namespace": "default", "uid": "p1"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec}}


def test_tolerations_are_read_as_key_value_effect() -> None:
    assert parse_tolerations("dedicated=slices:NoSchedule, gpu:NoExecute") == [
        {"key": "dedicated", "operator": "Equal", "value": "slices", "effect": "NoSchedule"},
        {"key": "gpu", "operator": "Exists", "effect": "NoExecute"}]
    with pytest.raises(PlacementError, match="is not key\\[=value\\]:Effect"):
        parse_tolerations("dedicated=slices")
    with pytest.raises(PlacementError, match="--slice-node-selector"):
        Placement.from_flags("role in (", "")


def test_every_host_pod_gets_the_pool_and_never_the_tenants_own_placement() -> None:
    placement = Placement.from_flags("pool=slices,zone in (a,b)", "dedicated=slices:NoSchedule")
    spec = translate.host_pod(VC, tenant_pod(nodeSelector={"gpu": "yes"}, tolerations=[{"operator": "Exists"}],
                                             affinity={"podAntiAffinity": {}}), placement)["spec"]
    assert "nodeSelector" not in spec
    assert spec["affinity"] == {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["slices"]},
                                                    {"key": "zone", "operator": "In", "values": ["a", "b"]}]}]}}}
    assert spec["tolerations"] == [{"key": "dedicated", "operator": "Equal", "value": "slices", "effect": "NoSchedule"}]
    bare = translate.host_pod(VC, tenant_pod(tolerations=[{"operator": "Exists"}]), Placement())["spec"]
    assert "affinity" not in bare and "tolerations" not in bare


def test_the_room_for_slices_is_counted_over_the_pool_only() -> None:
    placement = Placement.from_flags("pool=slices", "dedicated=slices:NoSchedule")
    nodes = [node({"pool": "slices"}), node({"pool": "slices"}, [{"key": "dedicated", "value": "slices",
                                                                   "effect": "NoSchedule"}]),
             node({"pool": "slices"}, [{"key": "other", "effect": "NoExecute"}]), node({"pool": "general"})]
    assert pool(nodes, placement)["cpu"] == Decimal(16)
    assert pool(nodes)["cpu"] == Decimal(16), "without a pool: every untainted node (two of the four here)"
