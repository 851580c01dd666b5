"""Which host nodes a VirtualCluster gets (reconciler.nodes.selection) and how one looks in the tenant.

Pure logic, no cluster: host Nodes are small dicts built below. The spec forms are those of
/work/shared/API.md: ``promotePolicies[] {labelSelector, nodeCount}``, ``promoteResources.nodes``,
``promoteResources.nodeInfos[] {nodeName}`` and ``promoteResources.resources``, which promotes whole nodes
only with ``resourcesMode: Dedicated`` (in Shared mode, the default, it is a slice of the shared host).
"""

from __future__ import annotations

import random
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from apiserver.apis.compute import requests_nodes
from apiserver.apis.sharedslice import shared_slice
from apiserver.machinery.quantity import parse_quantity
from apiserver.machinery.selectors import label_value_errors, parse_label_selector
from reconciler.nodes.kwokjoiner import HOST_NODE_ANNOTATION, tenant_node
from reconciler.nodes.selection import (
    CLAIM_ANNOTATION,
    CLAIM_LABEL,
    CLAIMED_AT,
    Plan,
    claim_value,
    named_nodes,
    plan,
    still_chosen,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
OWNER = "team/vc"
OTHER = "other/vc"
T0 = "2024-05-01T10:00:00Z"
T1 = "2024-05-01T11:00:00Z"
T2 = "2024-05-01T12:00:00Z"

Obj = dict[str, Any]


# -- builders ------------------------------------------------------------------------------------


def node(name: str, *, labels: dict[str, str] | None = None, ready: bool | None = True, cpu: str = "8",
         memory: str = "32Gi", unschedulable: bool = False, taints: list[Obj] | None = None,
         control_plane: bool = False, claimed_by: str | None = None, claimed_at: str = T0) -> Obj:
    """A host Node: Ready unless told, a worker unless told, 8 cpu / 32Gi allocatable.

    ``ready=None`` leaves no Ready condition at all. ``claimed_by="ns/name"`` claims it the way the
    promoter does: claim label (``claim_value``), annotations, cordon and a NoSchedule taint.
    """
    node_labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", **(labels or {})}
    annotations: dict[str, str] = {}
    spec_taints = list(taints or [])
    if control_plane:
        node_labels["node-role.kubernetes.io/control-plane"] = ""
        spec_taints.append({"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"})
    if claimed_by:
        namespace, vc_name = claimed_by.split("/")
        value = claim_value(namespace, vc_name)
        node_labels[CLAIM_LABEL] = value
        annotations.update({CLAIM_ANNOTATION: claimed_by, CLAIMED_AT: claimed_at})
        spec_taints.append({"key": CLAIM_LABEL, "value": value, "effect": "NoSchedule"})
        unschedulable = True
    conditions = [] if ready is None else [{"type": "Ready", "status": "True" if ready else "False"}]
    resources = {"cpu": cpu, "memory": memory, "pods": "110"}
    spec: Obj = {"taints": spec_taints} if spec_taints else {}
    if unschedulable:
        spec["unschedulable"] = True
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": node_labels, "annotations": annotations, "resourceVersion": "1"},
            "spec": spec,
            "status": {"conditions": conditions, "capacity": dict(resources), "allocatable": dict(resources)}}


def cordoned(name: str, **kw: Any) -> Obj:
    """Cordoned by someone else (``kubectl cordon``): unschedulable plus the unschedulable taint."""
    return node(name, unschedulable=True,
                taints=[{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}], **kw)


def policy(count: int, selector: Obj | None = None) -> Obj:
    rule: Obj = {"nodeCount": count}
    if selector is not None:
        rule["labelSelector"] = selector
    return rule


def policies(*rules: Obj) -> Obj:
    return {"promotePolicies": list(rules)}


def dedicated(resources: Obj, **promote: Any) -> Obj:
    """``promoteResources.resources`` served by whole host nodes (``resourcesMode: Dedicated``), beside
    other ``promoteResources`` fields."""
    return {"promoteResources": {**promote, "resources": resources, "resourcesMode": "Dedicated"}}


def allocatable_sum(host: list[Obj], chosen: list[str], resource: str) -> Decimal:
    by_name = {n["metadata"]["name"]: n for n in host}
    return sum((parse_quantity(by_name[n]["status"]["allocatable"][resource]) for n in chosen), Decimal(0))


def example_spec(file: str) -> Obj:
    return yaml.safe_load((EXAMPLES / file).read_text())["spec"]


def no_duplicates(result: Plan) -> bool:
    everything = result.keep + result.claim + result.release
    return len(everything) == len(set(everything))


# -- determinism -------------------------------------------------------------------------------


def test_the_same_spec_on_the_same_host_picks_the_same_nodes_by_name_whatever_the_listing_order() -> None:
    host = [node(n) for n in ("node-c", "node-a", "node-e", "node-b", "node-d")]
    spec = policies(policy(2))
    first = plan(spec, host, OWNER)
    assert first.claim == ["node-a", "node-b"]
    shuffler = random.Random(7)
    for _ in range(20):
        shuffled = list(host)
        shuffler.shuffle(shuffled)
        assert plan(spec, shuffled, OWNER) == first


def test_planning_does_not_modify_the_host_nodes_or_the_spec() -> None:
    host = [node("node-a"), node("node-b", claimed_by=OWNER)]
    spec = {"promotePolicies": [policy(2)], **dedicated({"cpu": 4}, nodes=["node-a"])}
    before = yaml.safe_dump([host, spec])
    plan(spec, host, OWNER)
    assert yaml.safe_dump([host, spec]) == before


def test_an_empty_spec_wants_no_nodes() -> None:
    result = plan({}, [node("node-a"), node("node-b")], OWNER)
    assert result == Plan()
    assert result.satisfied and result.wanted == []


@pytest.mark.parametrize(("spec", "wanted"), [
    ({}, False),
    ({"promotePolicies": [], "promoteResources": {}}, False),
    (policies(policy(0), policy(0)), False),
    (policies(policy(0), policy(1)), True),
    ({"promoteResources": {"nodes": ["node1"]}}, True),
    ({"promoteResources": {"nodeInfos": [{"nodeName": "node1"}]}}, True),
    ({"promoteResources": {"resources": {"cpu": 1}}}, False),  # a shared slice: no host node
    ({"promoteResources": {"resources": {"cpu": 1}, "resourcesMode": "Shared"}}, False),
    (dedicated({"cpu": 1}), True),
    (dedicated({}), False),
    ({"promoteResources": {"nodes": ["node1"], "resources": {"cpu": 1}}}, True),
    ({"promoteResources": {"nodes": [], "nodeInfos": [], "resources": {}}}, False),
])
def test_requests_nodes_tells_whether_any_rule_asks_for_a_node(spec: Obj, wanted: bool) -> None:
    assert requests_nodes(spec) is wanted


# -- promotePolicies: selectors ----------------------------------------------------------------------


def test_node_count_with_a_label_selector_takes_only_matching_nodes() -> None:
    host = [node("node-a"), node("node-b", labels={"pool": "gpu"}), node("node-c"),
            node("node-d", labels={"pool": "gpu"}), node("node-e", labels={"pool": "cpu"})]
    result = plan(policies(policy(2, {"matchLabels": {"pool": "gpu"}})), host, OWNER)
    assert result.claim == ["node-b", "node-d"]
    assert result.satisfied


def test_match_expressions_are_honoured_too() -> None:
    host = [node("node-a", labels={"zone": "z1"}), node("node-b", labels={"zone": "z2"}),
            node("node-c", labels={"zone": "z3"}), node("node-d")]
    selector = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z2", "z3"]}]}
    assert plan(policies(policy(2, selector)), host, OWNER).claim == ["node-b", "node-c"]
    selector = {"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}
    assert plan(policies(policy(1, selector)), host, OWNER).claim == ["node-d"]


@pytest.mark.parametrize("selector", [None, {}], ids=["absent", "empty"])
def test_a_policy_without_a_selector_takes_any_node(selector: Obj | None) -> None:
    host = [node("node-b", labels={"pool": "gpu"}), node("node-a"), node("node-c", labels={"x": "y"})]
    result = plan(policies(policy(3, selector)), host, OWNER)
    assert result.claim == ["node-a", "node-b", "node-c"]
    assert result.satisfied


def test_an_explicit_null_selector_also_means_any_node() -> None:
    result = plan({"promotePolicies": [{"labelSelector": None, "nodeCount": 1}]}, [node("node-a")], OWNER)
    assert result.claim == ["node-a"]


def test_node_count_zero_wants_nothing_and_releases_what_the_policy_held() -> None:
    host = [node("node-a", claimed_by=OWNER), node("node-b")]
    result = plan(policies(policy(0)), host, OWNER)
    assert result.wanted == [] and result.release == ["node-a"] and result.satisfied


# -- nodes that are never chosen ---------------------------------------------------------------------


INELIGIBLE = {
    "control-plane": lambda name: node(name, control_plane=True),
    "legacy-master-label": lambda name: node(name, labels={"node-role.kubernetes.io/master": ""}),
    "not-ready": lambda name: node(name, ready=False),
    "no-ready-condition": lambda name: node(name, ready=None),
    "ready-unknown": lambda name: {**node(name), "status": {**node(name)["status"],
                                                           "conditions": [{"type": "Ready", "status": "Unknown"}]}},
    "cordoned-by-someone-else": lambda name: cordoned(name),
    "claimed-by-another-virtualcluster": lambda name: node(name, claimed_by=OTHER),
    "claimed-by-another-but-uncordoned": lambda name: {**node(name, claimed_by=OTHER), "spec": {}},
}


@pytest.mark.parametrize("kind", list(INELIGIBLE))
def test_ineligible_nodes_are_never_chosen_even_when_they_sort_first(kind: str) -> None:
    host = [INELIGIBLE[kind]("node-a"), node("node-b")]
    result = plan(policies(policy(1)), host, OWNER)
    assert result.claim == ["node-b"]
    assert result.satisfied


@pytest.mark.parametrize("kind", list(INELIGIBLE))
def test_ineligible_nodes_do_not_count_as_free_in_a_shortage(kind: str) -> None:
    host = [INELIGIBLE[kind]("node-a"), node("node-b")]
    result = plan(policies(policy(2)), host, OWNER)
    assert "node-a" not in result.wanted
    assert result.shortages == ["promotePolicies[0] needs 2 node(s) matching any labels, 1 available (1 free)"]


@pytest.mark.parametrize("kind", list(INELIGIBLE))
def test_a_node_that_stopped_being_free_since_the_plan_is_no_longer_chosen(kind: str) -> None:
    assert not still_chosen(policies(policy(1)), node("node-a"), INELIGIBLE[kind]("node-a"))
    assert not still_chosen({"promoteResources": {"nodes": ["node-a"]}}, node("node-a"), INELIGIBLE[kind]("node-a"))


def test_labels_added_since_the_plan_keep_a_node_chosen_while_every_selector_sees_it_the_same() -> None:
    spec = policies(policy(1, {"matchLabels": {"pool": "a"}}), policy(1, {"matchLabels": {"pool": "b"}}),
                    policy(0, {"matchLabels": {"gpu": "yes"}}))
    seen = node("n", labels={"pool": "a"})
    assert still_chosen(spec, seen, node("n", labels={"pool": "a", "beta.kubernetes.io/os": "linux"}))
    assert still_chosen(spec, seen, node("n", labels={"pool": "a", "gpu": "yes"}))  # a policy wanting no node
    assert not still_chosen(spec, seen, node("n", labels={"pool": "b"}))  # now another policy's node
    assert not still_chosen(spec, seen, node("n", labels={}))


def test_a_changed_allocatable_unchooses_a_node_only_where_the_spec_counts_resources() -> None:
    seen, now = node("n", cpu="8"), node("n", cpu="4")
    assert not still_chosen(dedicated({"cpu": 8}), seen, now)
    assert still_chosen(dedicated({"cpu": 8}), seen, node("n", cpu="8"))
    assert still_chosen(policies(policy(1)), seen, now)
    assert still_chosen({"promoteResources": {"nodes": ["n"]}}, seen, now)


def test_the_named_nodes_are_the_nodes_then_the_node_infos_each_once() -> None:
    spec = {"promoteResources": {"nodes": ["b", "a"], "nodeInfos": [{"nodeName": "a"}, {"nodeName": "c"}]}}
    assert named_nodes(spec) == ["b", "a", "c"]
    assert named_nodes({}) == []


def test_resources_never_take_ineligible_nodes() -> None:
    host = [INELIGIBLE[kind](f"bad-{i}") for i, kind in enumerate(INELIGIBLE)] + [node("node-a"), node("node-b")]
    result = plan(dedicated({"cpu": 16}), host, OWNER)
    assert result.claim == ["node-a", "node-b"]


def test_a_node_we_claimed_and_cordoned_ourselves_is_still_ours() -> None:
    mine = node("node-a", claimed_by=OWNER)
    assert mine["spec"]["unschedulable"] is True
    result = plan(policies(policy(1)), [mine, node("node-b")], OWNER)
    assert result.keep == ["node-a"] and result.claim == [] and result.release == []


# -- stickiness and scale-down -----------------------------------------------------------------------


def test_an_assigned_node_is_kept_rather_than_swapped_for_a_smaller_named_free_node() -> None:
    host = [node("node-m", claimed_by=OWNER), node("node-z")]
    assert plan(policies(policy(1)), host, OWNER).keep == ["node-m"]
    host.append(node("node-a"))  # a lexically smaller free node appears
    result = plan(policies(policy(1)), host, OWNER)
    assert result.keep == ["node-m"] and result.claim == [] and result.release == []


def test_scaling_up_keeps_the_assigned_nodes_and_adds_free_ones_by_name() -> None:
    host = [node("node-m", claimed_by=OWNER), node("node-z"), node("node-a"), node("node-b")]
    result = plan(policies(policy(3)), host, OWNER)
    assert result.keep == ["node-m"] and result.claim == ["node-a", "node-b"] and result.release == []


def test_an_assigned_node_that_no_longer_matches_the_selector_is_released_for_a_matching_one() -> None:
    host = [node("node-a", claimed_by=OWNER, labels={"pool": "old"}), node("node-b", labels={"pool": "new"})]
    result = plan(policies(policy(1, {"matchLabels": {"pool": "new"}})), host, OWNER)
    assert result.claim == ["node-b"] and result.release == ["node-a"] and result.keep == []


def test_scale_down_releases_the_most_recently_claimed_nodes_first() -> None:
    # Names run against claim times, so the order can only come from kosmos.io/claimed-at.
    host = [node("node-a", claimed_by=OWNER, claimed_at=T2), node("node-b", claimed_by=OWNER, claimed_at=T1),
            node("node-c", claimed_by=OWNER, claimed_at=T0), node("node-d")]
    result = plan(policies(policy(1)), host, OWNER)
    assert result.keep == ["node-c"]
    assert result.release == ["node-a", "node-b"]
    assert result.claim == []


def test_equal_claim_times_are_released_in_reverse_name_order() -> None:
    host = [node(n, claimed_by=OWNER, claimed_at=T0) for n in ("node-b", "node-c", "node-a")]
    result = plan(policies(policy(1)), host, OWNER)
    assert result.keep == ["node-a"] and result.release == ["node-c", "node-b"]


def test_removing_every_rule_releases_all_assigned_nodes_newest_first() -> None:
    host = [node("node-a", claimed_by=OWNER, claimed_at=T1), node("node-b", claimed_by=OWNER, claimed_at=T0),
            node("node-c", claimed_by=OTHER, claimed_at=T2)]
    result = plan({}, host, OWNER)
    assert result.release == ["node-a", "node-b"]  # never another cluster's node


def test_an_assigned_node_is_kept_even_if_it_went_not_ready_or_cordoned() -> None:
    sick = node("node-a", claimed_by=OWNER, ready=False)
    result = plan(policies(policy(1)), [sick, node("node-b")], OWNER)
    assert result.keep == ["node-a"] and result.claim == [] and result.release == []


# -- shortages ---------------------------------------------------------------------------------------


def test_a_policy_shortage_says_how_many_are_needed_available_and_free() -> None:
    host = [node("node-a", labels={"pool": "gpu"}, claimed_by=OWNER), node("node-b", labels={"pool": "gpu"}),
            node("node-c", labels={"pool": "gpu"}, claimed_by=OTHER), node("node-d")]
    result = plan(policies(policy(3, {"matchLabels": {"pool": "gpu"}})), host, OWNER)
    assert result.shortages == ["promotePolicies[0] needs 3 node(s) matching pool=gpu, 2 available (1 free)"]
    assert not result.satisfied


def test_a_cluster_that_cannot_get_all_it_asks_for_claims_nothing_new_and_keeps_what_it_has() -> None:
    host = [node("node-a", claimed_by=OWNER), node("node-b"), node("node-c", claimed_by=OTHER)]
    result = plan(policies(policy(3)), host, OWNER)
    assert result.keep == ["node-a"]
    assert result.claim == []  # node-b would only be drained for a cluster that still waits
    assert result.release == []
    assert result.shortages == ["promotePolicies[0] needs 3 node(s) matching any labels, 2 available (1 free)"]


def test_the_second_of_two_competing_clusters_waits_with_nothing_claimed() -> None:
    host = [node(f"node-{i}", labels={"type": "kwok"}, claimed_by=OTHER if i < 4 else None) for i in range(6)]
    host.append(node("node-control-plane", labels={"type": "kwok"}, control_plane=True))
    result = plan(policies(policy(4, {"matchLabels": {"type": "kwok"}})), host, OWNER)
    assert result.wanted == [] and result.release == []
    assert result.shortages == ["promotePolicies[0] needs 4 node(s) matching type=kwok, 2 available (2 free)"]


def test_each_short_policy_is_reported_with_its_index() -> None:
    host = [node("node-a", labels={"pool": "gpu"}), node("node-b")]
    spec = policies(policy(1), policy(2, {"matchLabels": {"pool": "gpu"}}))
    result = plan(spec, host, OWNER)
    # policy 0 (any) took node-a, so the gpu policy finds nothing left
    assert result.shortages == ["promotePolicies[1] needs 2 node(s) matching pool=gpu, 0 available (0 free)"]
    assert result.claim == []


def test_a_resources_shortage_says_what_is_needed_and_claims_nothing() -> None:
    host = [node("node-a"), node("node-b")]
    result = plan(dedicated({"cpu": 100, "memory": "1Ti"}), host, OWNER)
    assert result.shortages == ["promoteResources.resources needs cpu=100, memory=1Ti; free nodes do not cover it"]
    assert result.claim == []


# -- resources in Shared mode (the default): a slice of the shared host, no host node --------------------------


@pytest.mark.parametrize("promote", [{"resources": {"cpu": 10, "memory": "100Gi"}},
                                     {"resources": {"cpu": 10, "memory": "100Gi"}, "resourcesMode": "Shared"}],
                         ids=["defaulted", "explicit"])
def test_shared_resources_promote_no_host_node_and_report_no_shortage(promote: Obj) -> None:
    spec = {"promoteResources": promote}
    assert plan(spec, [node("node-a"), node("node-b")], OWNER) == Plan()
    assert plan(spec, [], OWNER) == Plan()  # however little the host has free: the quota is the authority
    assert not requests_nodes(spec)


def test_switching_to_shared_mode_releases_the_nodes_promoted_for_resources() -> None:
    host = [node("node-a", claimed_by=OWNER), node("node-b", claimed_by=OWNER, claimed_at=T1), node("node-c")]
    spec = dedicated({"cpu": 16})
    assert plan(spec, host, OWNER).keep == ["node-a", "node-b"]
    spec["promoteResources"]["resourcesMode"] = "Shared"
    result = plan(spec, host, OWNER)
    assert result.wanted == [] and result.release == ["node-b", "node-a"]  # newest claim first


def test_named_nodes_beside_a_shared_slice_are_still_promoted_whole() -> None:
    host = [node("node1"), node("node2"), node("node-a")]
    spec = {"promoteResources": {"nodeInfos": [{"nodeName": "node2"}], "resources": {"cpu": 64}},
            "promotePolicies": [policy(1)]}
    result = plan(spec, host, OWNER)
    assert result.claim == ["node2", "node-a"] and result.satisfied


# -- explicit nodes ----------------------------------------------------------------------------------


def test_explicit_nodes_are_taken_by_name_in_the_order_given() -> None:
    host = [node("node-a"), node("node1"), node("node2"), node("node3")]
    result = plan({"promoteResources": {"nodes": ["node2", "node1"]}}, host, OWNER)
    assert result.claim == ["node2", "node1"] and result.satisfied


def test_kubenest_node_infos_name_nodes_too() -> None:
    host = [node("node-a"), node("node1"), node("node2")]
    result = plan({"promoteResources": {"nodeInfos": [{"nodeName": "node2"}]}}, host, OWNER)
    assert result.claim == ["node2"] and result.satisfied


def test_a_node_named_in_both_nodes_and_node_infos_is_taken_once() -> None:
    host = [node("node1"), node("node2")]
    spec = {"promoteResources": {"nodes": ["node1", "node1"], "nodeInfos": [{"nodeName": "node1"},
                                                                            {"nodeName": "node2"}]}}
    result = plan(spec, host, OWNER)
    assert result.claim == ["node1", "node2"]


def test_an_explicit_node_already_ours_is_kept() -> None:
    host = [node("node1", claimed_by=OWNER), node("node2")]
    result = plan({"promoteResources": {"nodes": ["node1", "node2"]}}, host, OWNER)
    assert result.keep == ["node1"] and result.claim == ["node2"]


def test_an_explicit_node_dropped_from_the_spec_is_released() -> None:
    host = [node("node1", claimed_by=OWNER), node("node2", claimed_by=OWNER)]
    result = plan({"promoteResources": {"nodes": ["node2"]}}, host, OWNER)
    assert result.keep == ["node2"] and result.release == ["node1"]


def test_missing_and_taken_explicit_nodes_are_reported_by_name() -> None:
    host = [node("node2", claimed_by=OTHER), node("node3")]
    spec = {"promoteResources": {"nodes": ["ghost", "node2"], "nodeInfos": [{"nodeName": "node3"}]}}
    result = plan(spec, host, OWNER)
    assert result.shortages == ["node ghost does not exist", f"node node2 is claimed by {OTHER}"]
    assert result.claim == []  # node3 waits until the whole spec can be met


@pytest.mark.parametrize(("host_node", "message"), [
    (node("node1", control_plane=True), "node node1 is a control-plane node"),
    (node("node1", ready=False), "node node1 is not ready or is cordoned"),
    (cordoned("node1"), "node node1 is not ready or is cordoned"),
], ids=["control-plane", "not-ready", "cordoned"])
def test_ineligible_explicit_nodes_are_reported_by_name(host_node: Obj, message: str) -> None:
    result = plan({"promoteResources": {"nodes": ["node1"]}}, [host_node, node("node2")], OWNER)
    assert result.shortages == [message]
    assert result.wanted == []


# -- resources -----------------------------------------------------------------------------------------


def test_ten_cpus_on_eight_cpu_nodes_take_two_nodes() -> None:
    host = [node(f"node-{c}", cpu="8") for c in "dcba"]
    result = plan(dedicated({"cpu": 10}), host, OWNER)
    assert result.claim == ["node-a", "node-b"] and result.satisfied


def test_exactly_enough_stops_taking_nodes() -> None:
    host = [node(f"node-{c}", cpu="8") for c in "abc"]
    assert plan(dedicated({"cpu": "16"}), host, OWNER).claim == ["node-a", "node-b"]


@pytest.mark.parametrize(("wanted", "count"), [
    ("100Gi", 4),           # 107374182400 bytes > 3 x 32Gi = 103079215104
    ("100G", 3),            # 100000000000 bytes: decimal SI, fits in three
    ("96Gi", 3),
    ("103079215105", 4),    # one byte more than three nodes
    ("0.09375Ti", 3),       # = 96Gi
    ("1e11", 3),            # = 100G
])
def test_memory_quantities_are_parsed_as_kubernetes_does(wanted: str, count: int) -> None:
    host = [node(f"node-{i}", memory="32Gi") for i in range(6)]
    result = plan(dedicated({"memory": wanted}), host, OWNER)
    assert len(result.claim) == count
    assert result.satisfied


def test_allocatable_quantities_are_parsed_as_kubernetes_does() -> None:
    host = [node("node-a", cpu="7800m", memory="34359738368"), node("node-b", cpu="7800m", memory="32768Mi"),
            node("node-c", cpu="7800m", memory="32Gi")]
    assert plan(dedicated({"cpu": "15.6"}), host, OWNER).claim == ["node-a", "node-b"]
    assert len(plan(dedicated({"cpu": "15601m"}), host, OWNER).claim) == 3
    assert plan(dedicated({"memory": "64Gi"}), host, OWNER).claim == ["node-a", "node-b"]


def test_resources_count_assigned_nodes_first_and_keep_them() -> None:
    host = [node("node-a"), node("node-z", claimed_by=OWNER)]
    result = plan(dedicated({"cpu": 8}), host, OWNER)
    assert result.keep == ["node-z"] and result.claim == [] and result.release == []


def test_resources_count_the_nodes_other_rules_already_chose() -> None:
    host = [node("node-a"), node("node-b"), node("node-c")]
    spec = dedicated({"cpu": 16}, nodes=["node-c"])
    assert plan(spec, host, OWNER).claim == ["node-c", "node-a"]


def test_the_kosmos_proposal_example_takes_its_named_nodes_and_leaves_its_resources_to_a_shared_slice() -> None:
    spec = example_spec("kosmos-proposal.yaml")
    assert spec["promoteResources"]["nodes"] == ["node1", "node2"]
    assert "resourcesMode" not in spec["promoteResources"]  # the example as the proposal writes it: Shared
    host = [node("node1"), node("node2"), node("node-extra-1"), node("node-extra-2"), node("node-extra-3"),
            node("node-extra-4"), node("control-plane", control_plane=True)]
    result = plan(spec, host, OWNER)
    assert result.satisfied
    assert result.claim == ["node1", "node2"]
    assert shared_slice(spec) == {"cpu": "10", "memory": "100Gi"}
    assert requests_nodes(spec)


def test_the_kosmos_proposal_example_in_dedicated_mode_takes_its_named_nodes_plus_enough_for_100gi() -> None:
    spec = example_spec("kosmos-proposal.yaml")
    spec["promoteResources"]["resourcesMode"] = "Dedicated"
    host = [node("node1"), node("node2"), node("node-extra-1"), node("node-extra-2"), node("node-extra-3"),
            node("node-extra-4"), node("control-plane", control_plane=True)]
    result = plan(spec, host, OWNER)
    assert result.satisfied
    assert result.claim == ["node1", "node2", "node-extra-1", "node-extra-2"]
    assert allocatable_sum(host, result.wanted, "memory") >= parse_quantity("100Gi")
    assert allocatable_sum(host, result.wanted, "cpu") >= 10
    # and no more than needed: without the last node 100Gi is not covered
    assert allocatable_sum(host, result.wanted[:-1], "memory") < parse_quantity("100Gi")
    assert shared_slice(spec) is None


def test_the_kosmos_proposal_example_waits_when_a_named_node_is_missing() -> None:
    host = [node("node1"), node("node-extra-1"), node("node-extra-2"), node("node-extra-3")]
    result = plan(example_spec("kosmos-proposal.yaml"), host, OWNER)
    assert result.shortages[0] == "node node2 does not exist"
    assert result.claim == []


def test_the_kubenest_example_selector_picks_exactly_that_node() -> None:
    host = [node("kc-aaaaa-s-a0000"), node("kc-aaaaa-s-x6fn2"), node("kc-aaaaa-s-zzzzz"),
            node("aaa-first-by-name")]
    result = plan(example_spec("kubenest.yaml"), host, OWNER)
    assert result.claim == ["kc-aaaaa-s-x6fn2"] and result.satisfied


def test_the_kubenest_example_reports_a_shortage_when_that_node_is_taken() -> None:
    host = [node("kc-aaaaa-s-x6fn2", claimed_by=OTHER), node("kc-aaaaa-s-a0000")]
    result = plan(example_spec("kubenest.yaml"), host, OWNER)
    assert result.wanted == []
    assert result.shortages == ["promotePolicies[0] needs 1 node(s) matching "
                                "kubernetes.io/hostname=kc-aaaaa-s-x6fn2, 0 available (0 free)"]


def test_the_minimal_example_wants_no_nodes() -> None:
    result = plan(example_spec("minimal.yaml"), [node("node-a")], OWNER)
    assert result == Plan()


# -- a node is never counted twice ------------------------------------------------------------------


def test_a_node_is_never_counted_twice_across_rules() -> None:
    host = [node("node1"), node("node-a", labels={"pool": "gpu"}), node("node-b", labels={"pool": "gpu"}),
            node("node-c"), node("node-d"), node("node-e")]
    spec = {"promotePolicies": [policy(1, {"matchLabels": {"pool": "gpu"}}), policy(2)],
            **dedicated({"cpu": 40}, nodes=["node1"], nodeInfos=[{"nodeName": "node1"}])}
    result = plan(spec, host, OWNER)
    assert result.satisfied
    # named node1; gpu policy node-a; any-policy node-b, node-c (node1/node-a already taken);
    # resources: 4 x 8 = 32 < 40, so one more (node-d) -> 40
    assert result.claim == ["node1", "node-a", "node-b", "node-c", "node-d"]
    assert no_duplicates(result)


def test_overlapping_policies_take_distinct_nodes_and_fall_short_honestly() -> None:
    host = [node("node-a", labels={"pool": "gpu"}), node("node-b", labels={"pool": "gpu"})]
    gpu = {"matchLabels": {"pool": "gpu"}}
    result = plan(policies(policy(2, gpu), policy(1, gpu)), host, OWNER)
    assert result.shortages == ["promotePolicies[1] needs 1 node(s) matching pool=gpu, 0 available (0 free)"]
    assert no_duplicates(result)


def test_assigned_nodes_are_kept_once_across_rules() -> None:
    host = [node("node1", claimed_by=OWNER), node("node-a", claimed_by=OWNER, claimed_at=T1), node("node-b")]
    spec = {"promotePolicies": [policy(2)], **dedicated({"cpu": 8}, nodes=["node1"])}
    result = plan(spec, host, OWNER)
    assert result.keep == ["node1", "node-a"] and result.claim == ["node-b"] and result.release == []
    assert no_duplicates(result)


# -- claim_value -----------------------------------------------------------------------------------------


def test_claim_value_is_namespace_dot_name_when_it_fits() -> None:
    assert claim_value("team", "vc") == "team.vc"
    assert claim_value("tenant1", "tenant1-cluster") == "tenant1.tenant1-cluster"
    fits = claim_value("n" * 31, "v" * 31)
    assert fits == "n" * 31 + "." + "v" * 31 and len(fits) == 63


@pytest.mark.parametrize(("namespace", "name"), [
    ("n" * 31, "v" * 32),                           # 64 characters: one too many
    ("n" * 63, "v" * 63),                           # the longest DNS-1123 labels
    ("a" * 24 + "-" + "b" * 38, "c" * 24 + "-" + "d" * 38),  # cut right after a dash
    ("ns", "x" * 24 + "-" + "y" * 60),
    ("tenant-" + "9" * 56, "0-" + "a" * 61),
])
def test_claim_value_of_long_names_is_a_valid_label_value_within_63_characters(namespace: str, name: str) -> None:
    value = claim_value(namespace, name)
    assert len(value) <= 63
    assert label_value_errors(value) == []
    assert claim_value(namespace, name) == value  # stable


def test_long_names_that_share_a_prefix_get_different_claim_values() -> None:
    a = claim_value("n" * 40, "v" * 40 + "-one")
    b = claim_value("n" * 40, "v" * 40 + "-two")
    c = claim_value("n" * 40 + "x", "v" * 40 + "-one")
    assert len({a, b, c}) == 3


def test_the_claim_label_on_a_node_is_what_the_builder_writes_for_long_owners() -> None:
    owner = f"{'n' * 40}/{'v' * 40}"
    host = [node("node-a", claimed_by=owner), node("node-b")]
    assert host[0]["metadata"]["labels"][CLAIM_LABEL] == claim_value("n" * 40, "v" * 40)
    result = plan(policies(policy(1)), host, owner)
    assert result.keep == ["node-a"]  # the owner is read from the annotation, not the (hashed) label
    assert plan(policies(policy(1)), host, OWNER).claim == ["node-b"]


# -- tenant_node ---------------------------------------------------------------------------------------


def test_tenant_node_drops_host_roles_and_the_claim_and_copies_capacity_and_allocatable() -> None:
    host_node = node("node-a", labels={"node-role.kubernetes.io/control-plane": "",
                                       "node-role.kubernetes.io/worker": "",
                                       "node.kubernetes.io/exclude-from-external-load-balancers": "",
                                       "topology.kubernetes.io/zone": "z1", "type": "kwok"},
                     claimed_by=OWNER, cpu="7800m", memory="30Gi")
    host_node["status"]["capacity"] = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    tenant = tenant_node(host_node)
    assert tenant["apiVersion"] == "v1" and tenant["kind"] == "Node"
    assert tenant["metadata"]["name"] == "node-a"
    assert tenant["metadata"]["labels"] == {"kubernetes.io/hostname": "node-a", "kubernetes.io/os": "linux",
                                            "topology.kubernetes.io/zone": "z1", "type": "kwok"}
    assert tenant["metadata"]["annotations"][HOST_NODE_ANNOTATION] == "node-a"
    assert tenant["status"]["capacity"] == {"cpu": "8", "memory": "32Gi", "pods": "110"}
    assert tenant["status"]["allocatable"] == {"cpu": "7800m", "memory": "30Gi", "pods": "110"}
    # the host's cordon, taints, annotations and conditions stay in the host
    assert "spec" not in tenant or not tenant["spec"].get("unschedulable")
    assert CLAIM_ANNOTATION not in tenant["metadata"]["annotations"]
    assert "conditions" not in tenant["status"]


def test_tenant_node_does_not_share_or_modify_the_host_node() -> None:
    host_node = node("node-a", claimed_by=OWNER)
    before = yaml.safe_dump(host_node)
    tenant = tenant_node(host_node)
    tenant["metadata"]["labels"]["new"] = "x"
    assert yaml.safe_dump(host_node) == before
    assert CLAIM_LABEL in host_node["metadata"]["labels"]


def test_tenant_node_of_a_bare_node_has_empty_maps() -> None:
    tenant = tenant_node({"metadata": {"name": "bare"}})
    assert tenant["metadata"]["labels"] == {}
    assert tenant["status"] == {"capacity": {}, "allocatable": {}}



# -- the nodes a namespace may take ---------------------------------------------------------------


def test_a_namespace_bound_to_a_selector_takes_only_matching_free_nodes_and_keeps_what_it_holds() -> None:
    allowed = parse_label_selector("pool=team-a")
    nodes = [node("a1", labels={"pool": "team-a"}), node("b1", labels={"pool": "team-b"}),
             node("held", labels={"pool": "team-b"}, claimed_by=OWNER)]
    result = plan({"promotePolicies": [{"nodeCount": 2}]}, nodes, OWNER, allowed)
    assert result.keep == ["held"] and result.claim == ["a1"] and result.shortages == []
    named = plan({"promoteResources": {"nodes": ["b1"]}}, nodes, OWNER, allowed)
    assert named.claim == [] and named.shortages == [
        "node b1 is not among the nodes this namespace may take (kosmos.io/promotable-nodes: pool=team-a)"]
    short = plan({"promotePolicies": [{"nodeCount": 3}]}, nodes, OWNER, allowed)
    assert short.claim == [] and "needs 3 node(s) matching any labels, 2 available (1 free)" in short.shortages[0]
