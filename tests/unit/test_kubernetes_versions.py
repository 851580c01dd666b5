"""spec.kubernetesVersion: what a server offers, how a minor resolves, and which moves kube's skew policy allows."""

from __future__ import annotations

import pytest

from apiserver.apis.kubeversion import Offered, Version, kubelet_errors, move_errors, parse
from apiserver.apis.schema import validate_spec
from apiserver.apis.virtualcluster import VirtualCluster
from reconciler.backup.snapshots import Snapshot
from reconciler.controlplane import upgrades

OFFERED = Offered.of(["v1.34.4", "v1.35.4", "v1.33.9", "v1.34.2"])


def test_the_offer_is_newest_first_and_a_minor_resolves_to_its_newest_patch() -> None:
    assert [str(v) for v in OFFERED.versions] == ["v1.35.4", "v1.34.4", "v1.34.2", "v1.33.9"]
    assert OFFERED.newest == Version(35, 4)
    assert OFFERED.resolve("1.34") == OFFERED.resolve("v1.34") == Version(34, 4)
    assert OFFERED.resolve("v1.34.2") == OFFERED.resolve("1.34.2") == Version(34, 2)
    assert OFFERED.resolve(None) == OFFERED.resolve("") == Version(35, 4)
    assert OFFERED.resolve("1.36") is None and OFFERED.resolve("v1.34.3") is None


def test_a_server_flag_that_names_no_full_version_is_refused() -> None:
    for values in ([], ["1.35"], ["latest"]):
        with pytest.raises(ValueError):
            Offered.of(values)


def test_the_schema_takes_a_full_version_or_a_minor_and_nothing_else() -> None:
    assert parse("v1.35.4") == Version(35, 4) and parse("1.34") == Version(34)
    assert validate_spec({"kubernetesVersion": "1.34"}) == []
    [cause] = validate_spec({"kubernetesVersion": "latest"})
    assert cause.field == "spec.kubernetesVersion" and "should match" in cause.message


def test_a_version_the_server_does_not_offer_is_not_supported_and_the_message_lists_what_is() -> None:
    [cause] = move_errors(OFFERED, "v1.36.0", None)
    assert cause.type == "FieldValueNotSupported" and cause.field == "spec.kubernetesVersion"
    assert '"1.35", "1.34", "1.33", "v1.35.4"' in cause.message


def test_a_running_cluster_moves_one_minor_up_or_any_patch_of_its_own_minor() -> None:
    assert move_errors(OFFERED, "1.34", "v1.33.9") == []
    assert move_errors(OFFERED, "v1.34.2", "v1.34.4") == []  # a patch down, same minor
    [skip] = move_errors(OFFERED, "1.35", "v1.33.9")
    assert skip.type == "FieldValueForbidden" and "the next step is 1.34, then 1.35" in skip.message
    [down] = move_errors(OFFERED, "1.33", "v1.34.4")
    assert down.type == "FieldValueForbidden" and "may not go below 1.34" in down.message
    assert "or upgrade to 1.35" in down.message


def test_a_promoted_kubelet_newer_than_the_version_is_named() -> None:
    [cause] = kubelet_errors(Version(34, 4), {"worker-1": "v1.35.4", "worker-2": "v1.34.4", "odd": "v1.36.0-rc.1"})
    assert "odd (v1.36.0-rc.1), worker-1 (v1.35.4)" in cause.message
    assert kubelet_errors(Version(35, 4), {"worker-1": "v1.35.4"}) == []


def _vc(spec_version: str | None, running: str | None, generation: int = 2, upgrade: dict | None = None) -> VirtualCluster:
    status = {"kubernetesVersion": running} if running else {}
    if upgrade:
        status["upgrade"] = upgrade
    spec = {"kubernetesVersion": spec_version} if spec_version else {}
    return VirtualCluster({"metadata": {"name": "a", "namespace": "n", "generation": generation}, "spec": spec,
                           "status": status})


def test_an_upgrade_is_wanted_when_the_spec_names_another_version_it_may_move_to() -> None:
    assert upgrades.wanted(_vc("1.35", "v1.34.4"), OFFERED) == ("v1.34.4", "v1.35.4")
    assert upgrades.wanted(_vc("1.34", "v1.34.4"), OFFERED) is None
    assert upgrades.wanted(_vc("1.35", None), OFFERED) is None  # not built yet: it is built at 1.35
    assert upgrades.wanted(_vc("1.35", "v1.33.9"), OFFERED) is None  # a skip is never acted on
    assert upgrades.wanted(_vc(None, "v1.34.4"), OFFERED) is None  # unset: it keeps what it runs


def test_a_rolled_back_version_is_not_tried_again_until_the_spec_changes() -> None:
    failed = {"state": "RolledBack", "toVersion": "v1.35.4", "observedGeneration": 2}
    assert upgrades.wanted(_vc("1.35", "v1.34.4", 2, failed), OFFERED) is None
    assert upgrades.wanted(_vc("1.35", "v1.34.4", 3, failed), OFFERED) == ("v1.34.4", "v1.35.4")


def test_the_version_run_is_the_status_once_it_ran_else_the_spec_else_the_newest() -> None:
    assert upgrades.running_version(_vc("1.35", "v1.34.4"), OFFERED) == "v1.34.4"
    assert upgrades.running_version(_vc("1.34", None), OFFERED) == "v1.34.4"
    assert upgrades.running_version(_vc(None, None), OFFERED) == "v1.35.4"


def test_a_pre_upgrade_snapshot_says_so_in_status_backups() -> None:
    assert Snapshot("a-20261129-101010-preupgrade", "t", 1, 2).status()["reason"] == "PreUpgrade"
    assert Snapshot("a-20261129-101010", "t", 1, 2).status()["reason"] == "Scheduled"


def test_no_node_whose_kubelet_is_newer_than_the_tenant_is_newly_promoted() -> None:
    from reconciler.nodes import selection

    def node(name: str, kubelet: str) -> dict:
        return {"metadata": {"name": name, "labels": {"pool": "a"}},
                "status": {"conditions": [{"type": "Ready", "status": "True"}], "nodeInfo": {"kubeletVersion": kubelet}}}
    nodes = [node("new", "v1.35.4"), node("old", "v1.34.4"), node("kwok", "fake")]
    policy = {"promotePolicies": [{"labelSelector": {"matchLabels": {"pool": "a"}}, "nodeCount": 2}]}
    assert selection.plan(policy, nodes, "n/a", version="v1.34.4").claim == ["kwok", "old"]
    named = selection.plan({"promoteResources": {"nodes": ["new"]}}, nodes, "n/a", version="v1.34.4")
    assert named.claim == [] and named.shortages == ["node new runs kubelet v1.35.4, newer than the tenant's v1.34.4"]
    assert selection.plan({"promoteResources": {"nodes": ["new"]}}, nodes, "n/a", version="v1.35.4").claim == ["new"]


def test_a_kubelet_of_a_newer_patch_of_the_same_minor_is_within_the_skew_policy() -> None:
    assert kubelet_errors(Version(35, 4), {"worker-1": "v1.35.9"}) == []
    assert kubelet_errors(Version(34, 4), {"worker-1": "v1.35.0"}) != []


def test_a_version_the_server_no_longer_offers_moves_to_its_minors_newest_patch() -> None:
    replaced = Offered.of(["v1.35.6", "v1.34.4"])
    assert upgrades.running_version(_vc(None, "v1.35.4"), replaced) == "v1.35.6"
    assert upgrades.wanted(_vc(None, "v1.35.4"), replaced) == ("v1.35.4", "v1.35.6")
    assert upgrades.wanted(_vc("1.35", "v1.35.4"), replaced) == ("v1.35.4", "v1.35.6")
    assert upgrades.running_version(_vc(None, "v1.33.1"), replaced) == "v1.33.1"  # no patch of it here: said so


def test_a_new_upgrade_forgets_the_last_ones_snapshot_and_outcome() -> None:
    from reconciler.controlplane import status
    last = {"state": "RolledBack", "snapshot": "a-1-preupgrade", "message": "failed", "durationSeconds": 3,
            "completionTime": "t", "toVersion": "v1.35.4", "observedGeneration": 2}
    outcome = status.upgrading(_vc("1.35", "v1.34.4", 3, last).raw, "v1.34.4", "v1.35.4", "2026-11-29T00:00:00Z")
    upgrade = outcome.status["upgrade"]
    assert {k: upgrade[k] for k in ("snapshot", "message", "durationSeconds", "completionTime")} == dict.fromkeys(
        ("snapshot", "message", "durationSeconds", "completionTime"))  # null: the merge patch removes them
    assert upgrade["state"] == "InProgress" and upgrade["observedGeneration"] == 3
