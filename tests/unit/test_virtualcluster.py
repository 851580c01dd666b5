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
