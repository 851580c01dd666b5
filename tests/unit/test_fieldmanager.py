"""managedFields on non-apply writes: field sets, FieldsV1 and Update entries as kube-apiserver keeps
them for a CRD. The expected FieldsV1 documents are the verified (✔) examples of
``REFERENCE-SSA.md`` (produced by the upstream field manager), adapted only where the kosmos schema
they were made with and ours name a field differently."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from apiserver.machinery.fieldpath import FieldsV1Error, from_fields_v1, to_fields_v1
from apiserver.machinery.validation import validate_object_meta
from apiserver.registry.fieldmanager import (
    FieldManager,
    decode_managed_fields,
    encode_managed_fields,
    manager_from_user_agent,
    timestamps_only_changed,
)
from apiserver.registry.virtualcluster import VirtualClusterStrategy

GV = "kosmos.io/v1alpha1"
T0 = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
Obj = dict[str, Any]


def manager() -> FieldManager:
    return FieldManager(VirtualClusterStrategy.field_type, GV)


def at(seconds: int) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def vc(spec: Obj | None = None, status: Obj | None = None, **meta: Any) -> Obj:
    out: Obj = {"apiVersion": GV, "kind": "VirtualCluster", "metadata": {"name": "vc1", "namespace": "ns1", **meta}}
    if spec is not None:
        out["spec"] = spec
    if status is not None:
        out["status"] = status
    return out


def stored(obj: Obj, rv: str = "5") -> Obj:
    """What the store holds after a create: system fields the strategy adds are not owned by anyone."""
    obj["metadata"].update(uid="u-1", resourceVersion=rv, generation=1, creationTimestamp="2025-01-01T00:00:00Z")
    return obj


def entries(obj: Obj) -> list[tuple[str, str, str, Obj]]:
    return [(e["manager"], e["operation"], e.get("subresource", ""), e["fieldsV1"])
            for e in obj["metadata"].get("managedFields", [])]


# --------------------------------------------------------------------------- FieldsV1

EXAMPLE_A = {  # ✔ worked example A (an Apply set; all four path element kinds)
    "f:metadata": {"f:finalizers": {'v:"kosmos.io/finalizer"': {}}, "f:labels": {"f:app.kubernetes.io/name": {},
                                                                                  "f:team": {}},
                   "f:ownerReferences": {'k:{"uid":"11111111-2222"}': {".": {}, "f:apiVersion": {}, "f:kind": {},
                                                                         "f:name": {}, "f:uid": {}}}},
    "f:spec": {"f:externalIps": {'v:"10.0.0.1"': {}, 'v:"10.0.0.2"': {}},
               "f:kubeInKubeConfig": {"f:apiServerReplicas": {}},
               "f:pluginOptions": {'k:{"name":"a"}': {".": {}, "f:name": {}, "f:value": {}},
                                   'k:{"name":"b"}': {".": {}, "f:name": {}, "f:value": {}}},
               "f:promoteResources": {"f:resources": {"f:cpu": {}, "f:memory": {}}}},
}


def test_fields_v1_decodes_into_paths_and_encodes_back_byte_for_byte() -> None:
    paths = from_fields_v1(EXAMPLE_A)
    assert ("f:metadata", "f:ownerReferences", 'k:{"uid":"11111111-2222"}') in paths
    assert ("f:metadata", "f:ownerReferences", 'k:{"uid":"11111111-2222"}', "f:uid") in paths
    assert ("f:spec", "f:externalIps", 'v:"10.0.0.1"') in paths
    assert ("f:spec",) not in paths and ("f:metadata", "f:labels") not in paths  # containers only
    assert to_fields_v1(paths) == EXAMPLE_A
    assert list(to_fields_v1(paths)["f:spec"]) == sorted(EXAMPLE_A["f:spec"])


def test_fields_v1_drops_unknown_element_kinds_and_canonicalizes_keys() -> None:
    assert from_fields_v1({"x:later": {}, "f:a": {}}) == {("f:a",)}
    assert from_fields_v1({'k:{ "b": 1, "a": "<"}': {}}) == {('k:{"a":"\\u003c","b":1}',)}
    assert from_fields_v1({}) == set()


@pytest.mark.parametrize("bad", [{"f:a": 1}, {"nocolon": {}}, {"k:{bad": {}}, {"k:[1]": {}}, {"i:x": {}}, []])
def test_malformed_fields_v1_does_not_decode(bad: Any) -> None:
    with pytest.raises(FieldsV1Error):
        from_fields_v1(bad)


# --------------------------------------------------------------------------- Update entries

EXAMPLE_B_BODY = dict(
    spec={"externalIps": ["10.0.0.2", "10.0.0.1"], "promotePolicies": [{"nodeCount": 1}],
          "promoteResources": {"resources": {"cpu": "4"}}, "kubeInKubeConfig": {"apiServerReplicas": 1}},
    status={"phase": "Pending"}, labels={"team": "a"}, finalizers=["kosmos.io/finalizer"])

EXAMPLE_B = {  # ✔ worked example B (pluginOptions there is promotePolicies here: both atomic lists)
    "f:metadata": {"f:finalizers": {".": {}, 'v:"kosmos.io/finalizer"': {}}, "f:labels": {".": {}, "f:team": {}}},
    "f:spec": {".": {}, "f:externalIps": {}, "f:kubeInKubeConfig": {".": {}, "f:apiServerReplicas": {}},
               "f:promotePolicies": {}, "f:promoteResources": {".": {}, "f:resources": {".": {}, "f:cpu": {}}}},
}


def created(name: str = "kubectl-create", now: dt.datetime = T0) -> Obj:
    obj = vc(**EXAMPLE_B_BODY)
    manager().update(None, obj, name, now=now)
    return stored(obj)


def test_a_create_owns_every_new_container_and_leaf_but_not_status_or_system_fields() -> None:
    obj = created()
    assert obj["metadata"]["managedFields"] == [{
        "apiVersion": GV, "fieldsType": "FieldsV1", "fieldsV1": EXAMPLE_B, "manager": "kubectl-create",
        "operation": "Update", "time": "2025-01-01T00:00:00Z"}]


def test_an_update_takes_changed_fields_from_other_managers_without_marking_existing_containers() -> None:
    """Case 12 for updates: kubectl-edit changes kubeconfig and the replicas."""
    live = stored(vc({"kubeconfig": "a", "externalIP": "1.2.3.4", "kubeInKubeConfig": {"apiServerReplicas": 1}}))
    manager().update(None, live, "mgr-a", now=at(0))
    new = vc({"kubeconfig": "b", "externalIP": "1.2.3.4", "kubeInKubeConfig": {"apiServerReplicas": 3}},
             managedFields=live["metadata"]["managedFields"])
    manager().update(live, new, "kubectl-edit", now=at(1))
    assert entries(new) == [
        ("mgr-a", "Update", "", {"f:spec": {".": {}, "f:externalIP": {}, "f:kubeInKubeConfig": {}}}),
        ("kubectl-edit", "Update", "", {"f:spec": {"f:kubeInKubeConfig": {"f:apiServerReplicas": {}},
                                                   "f:kubeconfig": {}}})]


def test_removed_fields_leave_every_entry_and_empty_entries_go() -> None:
    live = stored(vc({"kubeconfig": "a"}))
    manager().update(None, live, "creator", now=at(0))
    new = vc({})
    manager().update(live, new, "editor", now=at(1))
    assert entries(new) == [("creator", "Update", "", {"f:spec": {}})]  # spec itself is still there
    live = stored(new)
    gone = vc()
    manager().update(live, gone, "editor", now=at(2))
    assert "managedFields" not in gone["metadata"]


def test_a_write_that_changes_nothing_adds_or_touches_no_entry() -> None:
    live = created(now=at(0))
    new = vc(**EXAMPLE_B_BODY)
    new["metadata"]["managedFields"] = live["metadata"]["managedFields"]
    manager().update(live, new, "someone-else", now=at(60))
    assert new["metadata"]["managedFields"] == live["metadata"]["managedFields"]


def test_the_same_manager_merges_into_its_entry_and_its_time_moves() -> None:
    live = created(now=at(0))
    new = vc(**{**EXAMPLE_B_BODY, "labels": {"team": "a", "tier": "x"}})
    manager().update(live, new, "kubectl-create", now=at(30))
    [entry] = new["metadata"]["managedFields"]
    assert entry["fieldsV1"]["f:metadata"]["f:labels"] == {".": {}, "f:team": {}, "f:tier": {}}
    assert entry["time"] == "2025-01-01T00:00:30Z"


def test_status_writes_are_separate_entries_that_never_own_spec() -> None:
    """A /status write records status and metadata (kube-apiserver serving the CRD resets only
    spec there, as the differential test shows), with subresource status; the same name on the
    main resource is another entry."""
    live = stored(vc({"kubeconfig": "a"}))
    manager().update(None, live, "vc-controller", now=at(0))
    new = vc({"kubeconfig": "zzz"}, {"phase": "Running"}, labels={"x": "yes"})
    new["metadata"]["managedFields"] = [{"manager": "forged", "operation": "Update", "apiVersion": GV,
                                         "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]
    manager().update(live, new, "vc-controller", "status", now=at(1))
    assert entries(new) == [
        ("vc-controller", "Update", "", {"f:spec": {".": {}, "f:kubeconfig": {}}}),
        ("vc-controller", "Update", "status", {"f:metadata": {"f:labels": {".": {}, "f:x": {}}},
                                               "f:status": {".": {}, "f:phase": {}}})]
    assert new["metadata"]["managedFields"][1]["subresource"] == "status"
    live = stored(new)
    later = vc({"kubeconfig": "a"}, {"phase": "Running", "reason": "Up"})
    manager().update(live, later, "vc-controller", "status", now=at(2))
    assert entries(later)[1][3] == {"f:status": {".": {}, "f:phase": {}, "f:reason": {}}}


def test_status_in_a_main_resource_write_is_not_recorded() -> None:
    live = created()
    new = vc(**{**EXAMPLE_B_BODY, "status": {"phase": "Completed"}})
    new["metadata"]["managedFields"] = live["metadata"]["managedFields"]
    manager().update(live, new, "sneaky")
    assert entries(new) == entries(live)


def test_keyed_lists_and_sets_are_owned_item_by_item() -> None:
    live = stored(vc({}, {"conditions": [{"type": "Ready", "status": "False"}]}))
    manager().update(None, live, "x", now=at(0))
    new = vc({}, {"conditions": [{"type": "Ready", "status": "True"}, {"type": "NodesReady", "status": "True"}]})
    manager().update(live, new, "ctl", "status", now=at(1))
    assert entries(new)[-1][3] == {"f:status": {"f:conditions": {  # both existed: no "."
        'k:{"type":"NodesReady"}': {".": {}, "f:status": {}, "f:type": {}},
        'k:{"type":"Ready"}': {"f:status": {}}}}}
    main = vc({}, ownerReferences=[{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "1"}])
    manager().update(live, main, "gc", now=at(2))
    # OwnerReference is an atomic struct (kube's +structType=atomic): the item is owned whole.
    assert entries(main)[-1][3]["f:metadata"] == {"f:ownerReferences": {".": {}, 'k:{"uid":"1"}': {}}}


def test_more_than_ten_update_managers_fold_the_oldest_into_ancient_changes() -> None:
    """✔ case 27: twelve managers u00..u11 each add a label."""
    live = stored(vc({"kubeconfig": "a"}))
    manager().update(None, live, "creator", now=at(0))
    labels: dict[str, str] = {}
    for i in range(12):
        labels = {**labels, f"l{i:02}": "x"}
        new = vc({"kubeconfig": "a"}, labels=dict(labels), managedFields=live["metadata"]["managedFields"])
        manager().update(live, new, f"u{i:02}", now=at(i + 1))
        live = stored(new)
    names = [e["manager"] for e in live["metadata"]["managedFields"]]
    assert len(names) == 10 and names[0] == "ancient-changes"
    ancient = live["metadata"]["managedFields"][0]
    # creator (t0), u00, u01 and u02 were the oldest; u00 created the labels map, hence its ".".
    assert ancient["fieldsV1"] == {"f:metadata": {"f:labels": {".": {}, "f:l00": {}, "f:l01": {}, "f:l02": {}}},
                                   "f:spec": {".": {}, "f:kubeconfig": {}}}
    assert ancient["time"] == "2025-01-01T00:00:03Z" and "subresource" not in ancient
    assert names[1:] == [f"u{i:02}" for i in range(3, 12)]


# --------------------------------------------------------------------------- user-written managedFields


def test_an_empty_list_or_one_empty_entry_resets_and_later_updates_stay_untracked() -> None:
    for reset in ([], [{}]):
        live = created()
        new = vc(**{**EXAMPLE_B_BODY, "labels": {"team": "b"}}, managedFields=reset)
        manager().update(live, new, "kubectl-patch")
        assert "managedFields" not in new["metadata"]
        live = stored(new)
        later = vc(**{**EXAMPLE_B_BODY, "labels": {"team": "c"}})
        manager().update(live, later, "kubectl-patch")
        assert "managedFields" not in later["metadata"]


def test_entries_that_do_not_decode_are_ignored_and_the_live_ones_kept() -> None:
    live = created()
    for bad in ([{"manager": "x", "operation": "Foo", "apiVersion": GV, "fieldsType": "FieldsV1"}],
                [{"manager": "x", "operation": "Update", "fieldsType": "FieldsV1"}],
                [{"manager": "x", "operation": "Update", "apiVersion": GV}],
                [{"manager": "x", "operation": "Update", "apiVersion": GV, "fieldsType": "FieldsV1",
                  "fieldsV1": {"f:a": 1}}]):
        new = vc(**EXAMPLE_B_BODY, managedFields=bad)
        manager().update(live, new, "kubectl-edit")
        assert new["metadata"]["managedFields"] == live["metadata"]["managedFields"]


def test_decodable_entries_become_the_baseline_normalized_and_sorted() -> None:
    live = created()
    mine = [{"manager": "b", "operation": "Update", "apiVersion": GV, "fieldsType": "FieldsV1",
             "fieldsV1": {"f:spec": {"f:kubeconfig": {}}}, "time": "2025-01-01T02:00:00.5+02:00"},
            {"manager": "a", "operation": "Apply", "apiVersion": GV, "fieldsType": "FieldsV1",
             "fieldsV1": {"f:metadata": {"f:labels": {"f:team": {}}}}}]
    new = vc(**EXAMPLE_B_BODY, managedFields=mine)
    manager().update(live, new, "kubectl-edit")
    assert [(e["manager"], e["operation"], e.get("time")) for e in new["metadata"]["managedFields"]] == [
        ("a", "Apply", None), ("b", "Update", "2025-01-01T00:00:00Z")]


def test_managed_fields_are_validated_with_object_meta() -> None:
    long = "m" * 129
    meta = {"name": "vc1", "namespace": "ns1", "managedFields": [
        {"manager": long, "operation": "Update", "apiVersion": GV, "fieldsType": "FieldsV1"},
        {"manager": "a\x07", "operation": "Update", "apiVersion": GV, "fieldsType": "FieldsV1",
         "subresource": "s" * 257}]}
    assert [(c.field, c.message) for c in validate_object_meta(meta, namespaced=True)] == [
        ("metadata.managedFields[0].manager", "Too long: may not be more than 128 bytes"),
        ("metadata.managedFields[1].manager", 'Invalid value: "a\\a": invalid character U+0007 (at position 1)'),
        ("metadata.managedFields[1].subresource", "Too long: may not be more than 256 bytes")]


def test_entry_order_is_apply_first_then_time_then_manager() -> None:
    managed = decode_managed_fields([
        {"manager": m, "operation": op, "apiVersion": GV, "fieldsType": "FieldsV1", "time": t}
        for m, op, t in (("z", "Update", "2025-01-01T00:00:01Z"), ("b", "Update", "2025-01-01T00:00:00Z"),
                         ("a", "Update", "2025-01-01T00:00:00Z"), ("y", "Apply", "2025-01-01T00:00:09Z"))])
    assert [e["manager"] for e in encode_managed_fields(managed)] == ["y", "a", "b", "z"]


def test_a_timestamp_only_difference_is_recognised() -> None:
    live = created(now=at(0))
    new = created(now=at(5))
    assert timestamps_only_changed(new, live)
    new["metadata"]["labels"] = {"team": "b"}
    assert not timestamps_only_changed(new, live)


@pytest.mark.parametrize(("agent", "name"), [
    ("Go-http-client/1.1", "Go-http-client"), ("kubectl/v1.31.0 (linux/amd64) kubernetes/abc", "kubectl"),
    ("", ""), ("a\tb/1", "ab"), ("x" * 200, "x" * 128), ("é" * 100, "é" * 64)])
def test_the_manager_of_a_request_without_field_manager_is_named_after_its_user_agent(agent: str, name: str) -> None:
    assert manager_from_user_agent(agent) == name


def test_a_write_without_a_manager_name_is_recorded_as_unknown() -> None:
    obj = vc({"kubeconfig": "a"})
    manager().update(None, obj, "")
    assert obj["metadata"]["managedFields"][0]["manager"] == "unknown"
