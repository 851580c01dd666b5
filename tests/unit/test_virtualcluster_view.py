"""The typed view of a VirtualCluster (apiserver.apis.virtualcluster): thin, read-only, over the dict itself."""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

import pytest

from apiserver.apis import hibernation
from apiserver.apis.compute import asks_for_compute, requests_nodes
from apiserver.apis.resource import CONTROL_PLANE_READY, NODES_READY, READY
from apiserver.apis.sharedslice import shared_slice
from apiserver.apis.virtualcluster import VirtualCluster

T0 = "2025-03-01T12:00:00Z"


def full() -> dict[str, Any]:
    return {
        "apiVersion": "kosmos.io/v1alpha1", "kind": "VirtualCluster",
        "metadata": {"name": "dev", "namespace": "team", "uid": "u-1", "resourceVersion": "42", "generation": 3,
                     "deletionTimestamp": T0, "finalizers": ["kosmos.io/virtualcluster"],
                     "labels": {"tier": "gold"}, "annotations": {"note": "x"}},
        "spec": {"externalIP": "10.0.0.1", "externalIps": ["10.0.0.2", "vc.example.com"],
                 "promotePolicies": [{"nodeCount": 1}],
                 "promoteResources": {"resources": {"cpu": 2, "memory": "4Gi"}},
                 "hibernation": {"afterInactivity": "30m", "wakeOnAccess": False},
                 "backup": {"schedule": "@daily", "keep": 2},
                 "restoreFrom": {"virtualCluster": "prod", "snapshot": "prod-1"},
                 "kubeInKubeConfig": {"forceDestroy": True}},
        "status": {"phase": "Completed", "reason": "Ready", "message": "ready",
                   "conditions": [{"type": CONTROL_PLANE_READY, "status": "True", "lastTransitionTime": T0},
                                  {"type": NODES_READY, "status": "False", "lastTransitionTime": T0}],
                   "controlPlaneEndpoint": "https://10.0.0.1:6443",
                   "nodes": [{"name": "n1", "phase": "Ready"}, {"name": "kosmos-shared-0", "phase": "Ready",
                                                                 "shared": True}],
                   "sharedResources": {"namespace": "vcw-team-dev", "capacity": {"cpu": "2"}},
                   "backups": [{"name": "dev-1"}]},
    }


@pytest.mark.parametrize("obj", [{}, {"metadata": None, "spec": None, "status": None},
                                 {"metadata": [], "spec": "junk", "status": 7}],
                         ids=["missing", "null", "not objects"])
def test_missing_null_or_malformed_sections_read_as_empty_and_fields_as_their_absent_defaults(obj: Any) -> None:
    vc = VirtualCluster(obj)
    meta, spec, status = vc.meta, vc.spec, vc.status
    assert (meta.name, meta.namespace, meta.uid, meta.resource_version, meta.key) == ("", "", "", "", "/")
    assert meta.generation == 1 and meta.deletion_timestamp is None
    assert (list(meta.finalizers), dict(meta.labels), dict(meta.annotations)) == ([], {}, {})
    assert spec.raw == {} and spec.slice is None and not spec.requests_nodes and not spec.asks_for_compute
    assert spec.hibernation == hibernation.HibernationSpec()
    assert spec.backup is None and spec.restore_from is None and not spec.force_destroy
    assert spec.external_ip == "" and spec.external_ips == []
    assert status.raw == {} and (status.phase, status.reason, status.message, status.endpoint) == ("", "", "", "")
    assert status.conditions == [] and status.condition(READY) is None and not status.is_true(READY)
    assert status.true_since(READY) is None
    assert status.nodes == [] and status.promoted_nodes == [] and status.shared_resources is None
    assert status.backups == []


def test_every_field_reads_what_the_object_says() -> None:
    vc = VirtualCluster(full())
    assert (vc.meta.name, vc.meta.namespace, vc.meta.uid, vc.meta.resource_version) == ("dev", "team", "u-1", "42")
    assert vc.meta.key == "team/dev" and vc.meta.generation == 3 and vc.meta.deletion_timestamp == T0
    assert list(vc.meta.finalizers) == ["kosmos.io/virtualcluster"]
    assert vc.meta.labels == {"tier": "gold"} and vc.meta.annotations == {"note": "x"}
    assert vc.spec.external_ip == "10.0.0.1"
    assert vc.spec.external_ips == ["10.0.0.1", "10.0.0.2", "vc.example.com"]  # the single address first
    assert vc.spec.backup == {"schedule": "@daily", "keep": 2}
    assert vc.spec.restore_from == {"virtualCluster": "prod", "snapshot": "prod-1"}
    assert vc.spec.force_destroy
    assert (vc.status.phase, vc.status.reason, vc.status.message) == ("Completed", "Ready", "ready")
    assert vc.status.endpoint == "https://10.0.0.1:6443"
    assert vc.status.shared_resources == {"namespace": "vcw-team-dev", "capacity": {"cpu": "2"}}
    assert vc.status.backups == [{"name": "dev-1"}]


def test_promoted_nodes_are_the_status_nodes_but_a_shared_slices_virtual_one() -> None:
    vc = VirtualCluster(full())
    assert [n["name"] for n in vc.status.nodes] == ["n1", "kosmos-shared-0"]
    assert vc.status.promoted_nodes == [{"name": "n1", "phase": "Ready"}]


def test_a_condition_is_found_by_its_type_and_says_whether_and_since_when_it_is_true() -> None:
    status = VirtualCluster(full()).status
    assert status.condition(CONTROL_PLANE_READY) == {"type": CONTROL_PLANE_READY, "status": "True",
                                                     "lastTransitionTime": T0}
    assert status.condition(READY) is None
    assert status.is_true(CONTROL_PLANE_READY) and not status.is_true(NODES_READY) and not status.is_true(READY)
    assert status.true_since(CONTROL_PLANE_READY) == dt.datetime(2025, 3, 1, 12, tzinfo=dt.UTC)
    assert status.true_since(NODES_READY) is None  # False: not since anything


def test_the_spec_answers_through_the_rule_modules_not_a_reading_of_its_own() -> None:
    obj = full()
    spec = VirtualCluster(obj).spec
    assert spec.slice == shared_slice(obj["spec"]) == {"cpu": "2", "memory": "4Gi"}
    assert spec.requests_nodes is requests_nodes(obj["spec"]) is True
    assert spec.asks_for_compute is asks_for_compute(obj["spec"]) is True
    assert spec.hibernation == hibernation.read_spec(obj["spec"]["hibernation"])
    assert spec.hibernation.after_inactivity == dt.timedelta(minutes=30) and not spec.hibernation.wake_on_access


def test_the_view_holds_the_dict_itself_and_its_sections_without_copying_them() -> None:
    obj = full()
    vc = VirtualCluster(obj)
    assert vc.raw is obj
    assert vc.meta.raw is obj["metadata"] and vc.spec.raw is obj["spec"] and vc.status.raw is obj["status"]
    assert vc.status.conditions is obj["status"]["conditions"]
    assert vc.status.condition(NODES_READY) is obj["status"]["conditions"][1]
    assert vc.status.nodes is obj["status"]["nodes"] and vc.meta.finalizers is obj["metadata"]["finalizers"]
    assert vc.spec.restore_from is obj["spec"]["restoreFrom"]
    obj["status"]["phase"] = "Updating"  # a view made earlier sees what the dict says now
    assert vc.status.phase == "Updating"


@pytest.mark.parametrize("obj", [full(), {}, {"status": None, "spec": {}}], ids=["full", "empty", "sparse"])
def test_reading_every_field_leaves_the_dict_as_it_was(obj: dict[str, Any]) -> None:
    before = copy.deepcopy(obj)
    vc = VirtualCluster(obj)
    for section in (vc.meta, vc.spec, vc.status):
        for name in dir(type(section)):
            if isinstance(getattr(type(section), name, None), property):
                getattr(section, name)
    for type_ in (CONTROL_PLANE_READY, NODES_READY, READY):
        vc.status.condition(type_), vc.status.is_true(type_), vc.status.true_since(type_)
    assert obj == before


def test_a_missing_section_reads_as_an_empty_dict_of_its_own_that_reaches_nothing() -> None:
    obj: dict[str, Any] = {"metadata": {"name": "dev"}}
    VirtualCluster(obj).status.raw["phase"] = "Completed"
    assert obj == {"metadata": {"name": "dev"}} and VirtualCluster(obj).status.phase == ""
