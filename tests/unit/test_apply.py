"""Server-side apply in the field manager: the apply set, the merge, pruning, conflicts and Apply
entries, from the verified (✔) cases of ``REFERENCE-SSA.md`` (§3, §5.2, §5.3, §7, §8), with the
real schema's list types (the differential e2e test checks the same against kube-apiserver)."""

from __future__ import annotations

from typing import Any

import pytest

from apiserver.machinery import errors
from apiserver.machinery.fieldpath import (
    LIST,
    SCALAR,
    STRUCT,
    Type,
    ensure_named,
    merge,
    path_string,
    set_of,
    to_fields_v1,
)
from apiserver.registry.fieldmanager import FieldManager
from apiserver.registry.virtualcluster import VirtualClusterStrategy
from tests.unit.test_fieldmanager import GV, at, entries, stored, vc

Obj = dict[str, Any]
ROOT = VirtualClusterStrategy.field_type


def manager() -> FieldManager:
    return FieldManager(ROOT, GV)


def config(spec: Obj | None = None, status: Obj | None = None, **meta: Any) -> Obj:
    return vc(spec, status, **meta)


def test_the_apply_set_of_example_a_with_the_real_schema() -> None:
    """✔ case 1: example A, where externalIps and pluginOptions are atomic lists (leaves)."""
    applied = config({"externalIps": ["10.0.0.2", "10.0.0.1"], "pluginOptions": [{"name": "b", "value": "2"}],
                      "promoteResources": {"resources": {"cpu": "4", "memory": "8Gi"}},
                      "kubeInKubeConfig": {"apiServerReplicas": 1}},
                     labels={"team": "a", "app.kubernetes.io/name": "vc"}, finalizers=["kosmos.io/finalizer"],
                     ownerReferences=[{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                                       "uid": "11111111-2222"}])
    obj = manager().apply(None, applied, "kubectl", now=at(0))
    assert entries(obj) == [("kubectl", "Apply", "", {
        "f:metadata": {"f:finalizers": {'v:"kosmos.io/finalizer"': {}},
                       "f:labels": {"f:app.kubernetes.io/name": {}, "f:team": {}},
                       "f:ownerReferences": {'k:{"uid":"11111111-2222"}': {}}},
        "f:spec": {"f:externalIps": {}, "f:kubeInKubeConfig": {"f:apiServerReplicas": {}}, "f:pluginOptions": {},
                   "f:promoteResources": {"f:resources": {"f:cpu": {}, "f:memory": {}}}}})]


def test_an_empty_granular_list_contributes_nothing_and_null_and_empty_are_leaves() -> None:
    """✔ §3 and case 18."""
    paths = set_of({"spec": {"externalIps": None, "promoteResources": {"resources": {}, "nodes": []}}}, ROOT)
    assert to_fields_v1(paths) == {"f:spec": {"f:externalIps": {}, "f:promoteResources": {"f:resources": {}}}}


@pytest.mark.parametrize("obj", [
    config({"externalIps": ["10.0.0.2"], "pluginOptions": [{"name": "b", "value": "2"}],
            "promoteResources": {"resources": {"cpu": "4"}, "nodes": []}, "kubeInKubeConfig": {}},
           labels={"team": "a"}, finalizers=["kosmos.io/finalizer"],
           ownerReferences=[{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u1"}]),
    config({"promotePolicies": [{"labelSelector": {"matchLabels": {"zone": "a"}}, "nodeCount": 2}],
            "unknownField": {"deep": {"x": 1}}}, {"phase": "Pending", "nodes": [{"name": "n1", "phase": "Ready"}]},
           annotations={"a": "b"}),
    config({"promoteResources": {"resources": None}}),
])
def test_a_named_set_of_is_the_set_with_its_struct_fields_named_in_one_walk(obj: Obj) -> None:
    assert set_of(obj, ROOT, named=True) == ensure_named(set_of(obj, ROOT), ROOT)


def test_reapplying_the_same_configuration_keeps_the_entry_and_its_time() -> None:
    """✔ case 2."""
    applied = config({"kubeconfig": "a"})
    first = stored(manager().apply(None, applied, "kubectl", now=at(0)))
    again = manager().apply(first, applied, "kubectl", now=at(5))
    assert again["metadata"]["managedFields"] == first["metadata"]["managedFields"]
    assert again == first


def test_applying_values_already_there_co_owns_them_without_a_time() -> None:
    """✔ case 11: a new applier of identical values gets an entry without time, no conflict."""
    live = stored(vc({"kubeconfig": "a"}))
    manager().update(None, live, "kubectl-create", now=at(0))
    obj = manager().apply(live, config({"kubeconfig": "a"}), "kubectl", now=at(1))
    mf = obj["metadata"]["managedFields"]
    assert [(e["manager"], e["operation"], "time" in e) for e in mf] == [
        ("kubectl", "Apply", False), ("kubectl-create", "Update", True)]


def _edited() -> Obj:
    """✔ case 12: mgr-a applies, kubectl-edit changes two of its fields."""
    live = stored(manager().apply(None, config({"kubeconfig": "a", "externalIps": ["1.1.1.1"],
                                                "kubeInKubeConfig": {"apiServerReplicas": 1}}), "mgr-a", now=at(0)))
    edited = vc({"kubeconfig": "b", "externalIps": ["1.1.1.1"], "kubeInKubeConfig": {"apiServerReplicas": 3}})
    edited["metadata"].update({k: v for k, v in live["metadata"].items() if k != "managedFields"})
    edited["metadata"]["managedFields"] = live["metadata"]["managedFields"]
    manager().update(live, edited, "kubectl-edit", now=at(1))
    assert entries(edited) == [
        ("mgr-a", "Apply", "", {"f:spec": {"f:externalIps": {}}}),
        ("kubectl-edit", "Update", "", {"f:spec": {"f:kubeInKubeConfig": {"f:apiServerReplicas": {}},
                                                   "f:kubeconfig": {}}})]
    return edited


def test_conflicts_are_one_409_cause_per_field_in_kubes_words() -> None:
    """✔ case 13 and §7."""
    live = _edited()
    changed = config({"kubeconfig": "c", "externalIps": ["1.1.1.1"], "kubeInKubeConfig": {"apiServerReplicas": 5}})
    with pytest.raises(errors.ApiError) as caught:
        manager().apply(live, changed, "mgr-a", now=at(2))
    e = caught.value
    assert (e.code, e.reason) == (409, "Conflict")
    assert e.message == ('Apply failed with 2 conflicts: conflicts with "kubectl-edit" using kosmos.io/v1alpha1:\n'
                         "- .spec.kubeconfig\n- .spec.kubeInKubeConfig.apiServerReplicas")
    assert [(c.type, c.message, c.field) for c in e.causes] == [
        ("FieldManagerConflict", 'conflict with "kubectl-edit" using kosmos.io/v1alpha1', ".spec.kubeconfig"),
        ("FieldManagerConflict", 'conflict with "kubectl-edit" using kosmos.io/v1alpha1',
         ".spec.kubeInKubeConfig.apiServerReplicas")]
    assert set(e.status()["details"]) == {"causes"}  # no name, group or kind
    with pytest.raises(errors.ApiError) as one:
        manager().apply(live, config({"kubeconfig": "c"}), "mgr-a", now=at(2))
    assert one.value.message == ('Apply failed with 1 conflict: conflict with "kubectl-edit" using '
                                 "kosmos.io/v1alpha1: .spec.kubeconfig")


def test_force_takes_the_fields_over_and_unapplied_fields_go() -> None:
    """✔ cases 14 and 15."""
    live = _edited()
    changed = config({"kubeconfig": "c", "externalIps": ["1.1.1.1"], "kubeInKubeConfig": {"apiServerReplicas": 5}})
    forced = stored(manager().apply(live, changed, "mgr-a", force=True, now=at(2)))
    assert [e[0] for e in entries(forced)] == ["mgr-a"]
    dropped = manager().apply(forced, config({"kubeconfig": "c"}), "mgr-a", now=at(3))
    assert dropped["spec"] == {"kubeconfig": "c"}


def test_a_shared_field_stays_until_its_last_applier_drops_it() -> None:
    """✔ case 16: managedFields absent at the end."""
    live = stored(manager().apply(None, config({"kubeconfig": "a"}), "one", now=at(0)))
    live = stored(manager().apply(live, config({"kubeconfig": "a"}), "two", now=at(1)))
    live = stored(manager().apply(live, config(), "one", now=at(2)))
    assert live["spec"] == {"kubeconfig": "a"} and [e[0] for e in entries(live)] == ["two"]
    last = manager().apply(live, config(), "two", now=at(3))
    assert "kubeconfig" not in last.get("spec", {}) and "managedFields" not in last["metadata"]


def test_an_apply_through_status_owns_status_and_metadata_but_not_spec() -> None:
    live = stored(vc({"kubeconfig": "a"}))
    manager().update(None, live, "kubectl-create", now=at(0))
    obj = manager().apply(live, config({"kubeconfig": "zzz"}, {"phase": "Completed"}, labels={"x": "yes"}),
                          "vc-controller", "status", now=at(1))
    assert entries(obj)[0] == ("vc-controller", "Apply", "status",
                               {"f:metadata": {"f:labels": {"f:x": {}}}, "f:status": {"f:phase": {}}})


def test_an_object_without_entries_is_owned_by_before_first_apply() -> None:
    """✔ case 24: then an apply changing a value conflicts with it."""
    live = stored(vc({"kubeconfig": "a"}))
    with pytest.raises(errors.ApiError) as caught:
        manager().apply(live, config({"kubeconfig": "b"}), "one", now=at(1))
    assert caught.value.message == ('Apply failed with 1 conflict: conflict with "before-first-apply" using '
                                    "kosmos.io/v1alpha1: .spec.kubeconfig")


@pytest.mark.parametrize(("live", "applied", "merged"), [
    (["a", "b", "c", "d"], ["a", "aprime", "c", "cprime"], ["a", "b", "aprime", "c", "d", "cprime"]),
    (["a", "b", "c", "d"], ["a", "aprime"], ["a", "b", "c", "d", "aprime"]),
])
def test_merged_sets_keep_live_order_and_place_new_items_before_the_next_shared_one(
        live: list[str], applied: list[str], merged: list[str]) -> None:
    """✔ §5.3."""
    t = Type(STRUCT, fields={"items": Type(LIST, elem=Type(SCALAR), relationship="set")})
    assert merge({"items": live}, {"items": applied}, t) == {"items": merged}


def test_paths_print_as_structured_merge_diff_prints_them() -> None:
    assert path_string(("f:metadata", "f:labels", "f:app.kubernetes.io/name")) == \
        ".metadata.labels.app.kubernetes.io/name"
    assert path_string(("f:spec", 'k:{"name":"a"}', "f:value")) == '.spec[name="a"].value'
    assert path_string(("f:spec", 'v:"a"')) == '.spec[="a"]'


def test_a_keyed_item_the_manager_stops_applying_goes_whole() -> None:
    """✔ §5.2.5: the item and the fields in it go together (the differential test checks the order)."""
    first = config({"promoteResources": {"nodeInfos": [{"nodeName": "a"}, {"nodeName": "b"}], "nodes": ["x", "y"]}})
    live = stored(manager().apply(None, first, "one", now=at(0)))
    kept = config({"promoteResources": {"nodeInfos": [{"nodeName": "b"}], "nodes": ["y"]}})
    obj = manager().apply(live, kept, "one", now=at(1))
    assert obj["spec"]["promoteResources"] == {"nodeInfos": [{"nodeName": "b"}], "nodes": ["y"]}


def test_a_struct_an_entry_holds_itself_stays_with_the_fields_still_applied_in_it() -> None:
    """An Update entry folded into an Apply entry (Flux's cleanup, kubectl's migration) holds
    ``spec`` itself (``"."``); applying only some of its fields keeps those and drops the rest, as
    structured-merge-diff prunes: what any manager owns comes back, what only the entry held goes."""
    live = stored(vc({"kubeconfig": "a", "externalIps": ["10.0.0.1"], "kubeInKubeConfig": {"apiServerReplicas": 1}}))
    manager().update(None, live, "kubectl-client-side-apply", now=at(0))
    folded = live["metadata"]["managedFields"][0]
    assert folded["fieldsV1"]["f:spec"]["."] == {}
    live["metadata"]["managedFields"] = [{**folded, "manager": "kustomize-controller", "operation": "Apply"}]
    obj = manager().apply(live, config({"kubeconfig": "b", "externalIps": ["10.0.0.1"]}), "kustomize-controller",
                          force=True, now=at(1))
    assert obj["spec"] == {"kubeconfig": "b", "externalIps": ["10.0.0.1"]}
    assert entries(obj) == [("kustomize-controller", "Apply", "", {"f:spec": {"f:externalIps": {},
                                                                              "f:kubeconfig": {}}})]


def test_fields_under_a_pruned_struct_that_the_applier_never_held_come_back() -> None:
    """The applier held ``spec.kubeInKubeConfig.apiServerReplicas``; a field beside it that no one
    owns (a default) goes with the struct, but a field elsewhere in ``spec`` stays."""
    live = stored(manager().apply(None, config({"kubeconfig": "a", "kubeInKubeConfig": {"apiServerReplicas": 1}}),
                                  "one", now=at(0)))
    live["spec"]["kubeInKubeConfig"]["apiServerServiceType"] = "hostNetwork"  # defaulted, owned by no one
    live["spec"]["externalIP"] = "10.0.0.9"  # written without tracking
    obj = manager().apply(live, config({"kubeconfig": "a"}), "one", now=at(1))
    assert obj["spec"] == {"kubeconfig": "a", "externalIP": "10.0.0.9"}


def test_kubectl_is_forgiven_conflicts_with_its_client_side_apply_and_rewrites_the_annotation() -> None:
    """✔ case 29: for kubectl only; the annotation becomes the applied configuration plus a newline."""
    import json

    last = config({"kubeconfig": "a"})
    live = stored(config({"kubeconfig": "a"}, annotations={
        "kubectl.kubernetes.io/last-applied-configuration": json.dumps(last)}))
    manager().update(None, live, "kubectl-client-side-apply", now=at(0))
    changed = config({"kubeconfig": "b"})
    obj = manager().apply(live, changed, "kubectl", now=at(1))
    assert obj["spec"]["kubeconfig"] == "b"
    assert obj["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] == \
        json.dumps(changed, separators=(",", ":"), sort_keys=True) + "\n"
    with pytest.raises(errors.ApiError):
        manager().apply(live, changed, "argocd-controller", now=at(1))
