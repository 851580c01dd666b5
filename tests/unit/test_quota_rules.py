"""What a VirtualCluster counts against a host ResourceQuota, and kube's evaluation of one quota."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from apiserver.apis import quota
from apiserver.apis.quota import COUNT, PROMOTED_NODES, SLICE_CPU, SLICE_MEMORY, SLICE_STORAGE
from apiserver.registry.quota import check


def rq(hard: dict[str, str], used: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "team", "resourceVersion": "7"}, "spec": {"hard": hard, **spec},
            "status": {"hard": hard, "used": used or {}}}


def test_a_virtualcluster_counts_one_and_its_slice_in_millicores_and_bytes() -> None:
    use = quota.usage({"promoteResources": {"resources": {"cpu": "1500m", "memory": "3Gi", "storage": "10Gi"}}})
    assert use == {COUNT: 1, SLICE_CPU: 1500, SLICE_MEMORY: 3 * 2**30, SLICE_STORAGE: 10 * 2**30, PROMOTED_NODES: 0}
    assert quota.usage({"promoteResources": {"resources": {"cpu": 0.25}}})[SLICE_CPU] == 250  # a JSON number


def test_promoted_nodes_count_by_policy_name_and_nodeinfo_and_dedicated_resources_as_one() -> None:
    spec = {"promotePolicies": [{"nodeCount": 2}, {"nodeCount": 1}],
            "promoteResources": {"nodes": ["a"], "nodeInfos": [{"nodeName": "b"}]}}
    assert quota.usage(spec)[PROMOTED_NODES] == 5
    dedicated = {"promoteResources": {"resources": {"cpu": "8"}, "resourcesMode": "Dedicated"}}
    assert quota.usage(dedicated)[PROMOTED_NODES] == 1 and quota.usage(dedicated)[SLICE_CPU] == 0


def test_an_update_asks_only_for_what_grows() -> None:
    old = quota.usage({"promoteResources": {"resources": {"cpu": "2", "memory": "4Gi"}}})
    new = quota.usage({"promoteResources": {"resources": {"cpu": "3", "memory": "1Gi"}}})
    assert quota.increases(new, old) == {SLICE_CPU: 1000}
    assert quota.increases(old, new) == {SLICE_MEMORY: 3 * 2**30}
    assert quota.increases(old, old) == {}
    assert quota.increases(old, None)[COUNT] == 1


def test_amounts_are_written_as_go_writes_quantities() -> None:
    assert quota.format_amount(SLICE_CPU, Decimal(4000)) == "4k"
    assert quota.format_amount(SLICE_CPU, Decimal(1500)) == "1500"
    assert quota.format_amount(SLICE_MEMORY, Decimal(3 * 2**30)) == "3Gi"
    assert quota.format_amount(SLICE_MEMORY, Decimal(1536 * 2**20)) == "1536Mi"
    assert quota.format_amount(COUNT, Decimal(0)) == "0"


def test_a_quota_over_its_limit_is_refused_in_kubes_words_listing_only_what_exceeds() -> None:
    asked = {COUNT: Decimal(1), SLICE_MEMORY: Decimal(2 * 2**30)}
    refusal, _ = check(rq({COUNT: "5", SLICE_MEMORY: "4Gi"}, {COUNT: "1", SLICE_MEMORY: "3Gi"}), asked)
    assert refusal == (f"exceeded quota: team, requested: {SLICE_MEMORY}=2Gi, used: {SLICE_MEMORY}=3Gi, "
                       f"limited: {SLICE_MEMORY}=4Gi")


def test_a_quota_within_its_limit_is_charged_what_was_asked() -> None:
    refusal, used = check(rq({COUNT: "2"}, {COUNT: "1"}), {COUNT: Decimal(1), SLICE_CPU: Decimal(500)})
    assert refusal is None and used == {COUNT: 2}


def test_a_quota_whose_status_does_not_show_the_limit_yet_refuses() -> None:
    unknown = rq({COUNT: "2"})
    unknown["status"] = {}
    refusal, _ = check(unknown, {COUNT: Decimal(1), SLICE_CPU: Decimal(500)})
    assert refusal == f"status unknown for quota: team, resources: {COUNT}"


def test_a_scoped_quota_selects_pods_and_never_caps_virtualclusters() -> None:
    refusal, used = check(rq({COUNT: "0"}, scopes=["BestEffort"]), {COUNT: Decimal(1)})
    assert refusal is None and used == {}
