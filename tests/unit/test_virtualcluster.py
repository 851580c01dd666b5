"""The VirtualCluster strategy's own rules."""

from __future__ import annotations

from typing import Any

from apiserver.machinery.errors import Cause
from apiserver.registry.virtualcluster import VirtualClusterStrategy


def vc(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "a", "namespace": "ns"}, "spec": spec}


def test_immutable_fields_show_the_new_value_as_go_does() -> None:
    strategy = VirtualClusterStrategy()
    old = vc(externalIP="10.0.0.1", externalIps=["a.example.com"])
    causes = strategy.validate_update(vc(externalIP="10.0.0.2", externalIps=["a.example.com", "b"]), old)
    assert causes == [
        Cause("FieldValueInvalid", 'Invalid value: "10.0.0.2": field is immutable', "spec.externalIP"),
        Cause("FieldValueInvalid", 'Invalid value: ["a.example.com","b"]: field is immutable', "spec.externalIps")]
    [removed] = strategy.validate_update(vc(externalIps=["a.example.com"]), old)
    assert removed.message == "Invalid value: null: field is immutable"


def row(spec: dict[str, Any], nodes: list[dict[str, Any]] | None = None) -> str:
    """The NODES cell of ``kubectl get vc``."""
    obj: dict[str, Any] = {"metadata": {"name": "a", "namespace": "ns"}, "spec": spec}
    if nodes is not None:
        obj["status"] = {"nodes": nodes}
    columns = [c.name for c in VirtualClusterStrategy.columns]
    return VirtualClusterStrategy().cells(obj)[columns.index("Nodes")]


def test_nodes_counts_the_entries_of_status_nodes_ready_out_of_desired() -> None:
    spec = {"promotePolicies": [{"nodeCount": 2}]}
    assert row(spec) == "0/2"
    assert row(spec, [{"name": "n1", "phase": "Ready"}, {"name": "n2", "phase": "Joining"}]) == "1/2"
    releasing = [{"name": "n1", "phase": "Ready"}, {"name": "n2", "phase": "Ready"}, {"name": "n3", "phase": "Releasing"}]
    assert row(spec, releasing) == "2/3"


def test_nodes_counts_a_shared_slices_virtual_node_like_any_other() -> None:
    shared = {"promoteResources": {"resources": {"cpu": 10, "memory": "100Gi"}}}
    assert row(shared) == "0/1"  # the slice's virtual node, before the syncer lists it
    assert row(shared, [{"name": "kosmos-shared-0", "phase": "Joining", "shared": True}]) == "0/1"
    assert row(shared, [{"name": "kosmos-shared-0", "phase": "Ready", "shared": True}]) == "1/1"
    both = {"promoteResources": {"nodes": ["node1", "node2"], "resources": {"cpu": 10}, "resourcesMode": "Shared"}}
    assert row(both) == "0/3"
    assert row(both, [{"name": "node1", "phase": "Ready"}, {"name": "node2", "phase": "Ready"},
                      {"name": "kosmos-shared-0", "phase": "Ready", "shared": True}]) == "3/3"


def test_nodes_of_dedicated_resources_are_known_from_status_nodes_only() -> None:
    dedicated = {"promoteResources": {"resources": {"cpu": 10}, "resourcesMode": "Dedicated"}}
    assert row(dedicated) == "0/0"  # how many whole nodes cover 10 cpus depends on the host
    assert row(dedicated, [{"name": "n1", "phase": "Ready"}, {"name": "n2", "phase": "Claimed"}]) == "1/2"


def test_nodes_of_a_status_with_malformed_entries_still_renders() -> None:
    assert row({}, ["junk", {"name": "n1", "phase": "Ready"}]) == "1/1"  # type: ignore[list-item]


def test_restore_from_is_set_on_create_only() -> None:
    strategy = VirtualClusterStrategy()
    source = {"virtualCluster": "prod", "snapshot": "prod-20261125-114000"}
    assert strategy.validate_update(vc(restoreFrom=source), vc(restoreFrom=source)) == []
    [changed] = strategy.validate_update(vc(restoreFrom={**source, "snapshot": "other"}), vc(restoreFrom=source))
    assert changed == Cause("FieldValueInvalid", 'Invalid value: {"snapshot":"other","virtualCluster":"prod"}: '
                                                 'field is immutable', "spec.restoreFrom")  # a Go map's key order
    [added] = strategy.validate_update(vc(restoreFrom=source), vc())
    assert added.field == "spec.restoreFrom" and added.message.endswith("field is immutable")
    [removed] = strategy.validate_update(vc(), vc(restoreFrom=source))
    assert removed.message == "Invalid value: null: field is immutable"
