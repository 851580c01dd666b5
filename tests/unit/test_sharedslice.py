"""How promoteResources.resources is served (apiserver.apis.sharedslice): the rule node selection,
the table and the shared-slice syncer read from one place."""

from __future__ import annotations

from typing import Any

import pytest

from apiserver.apis import schema
from apiserver.apis.sharedslice import (
    DEDICATED,
    RESOURCES_MODES,
    SHARED,
    dedicated_resources,
    quantity_text,
    resources_mode,
    shared_slice,
)
from apiserver.machinery.quantity import parse_quantity

Obj = dict[str, Any]


def promote(**fields: Any) -> Obj:
    return {"promoteResources": fields}


def test_the_modes_are_the_schemas_enum_and_shared_is_its_default() -> None:
    field = schema.PromoteResourcesSchema().fields["resourcesMode"]
    assert RESOURCES_MODES == (DEDICATED, SHARED) == ("Dedicated", "Shared")
    assert field.metadata["default"] == SHARED


@pytest.mark.parametrize(("spec", "mode"), [
    ({}, SHARED),
    (None, SHARED),
    (promote(), SHARED),
    (promote(resourcesMode="Shared"), SHARED),
    (promote(resourcesMode="Dedicated"), DEDICATED),
    ({"promoteResources": None}, SHARED),
    ({"promoteResources": "junk"}, SHARED),
])
def test_resources_mode_reads_an_absent_mode_as_shared(spec: Obj | None, mode: str) -> None:
    assert resources_mode(spec) == mode


def test_resources_in_the_default_mode_are_a_shared_slice() -> None:
    spec = promote(resources={"cpu": 10, "memory": "100Gi"})
    assert shared_slice(spec) == {"cpu": "10", "memory": "100Gi"}
    assert dedicated_resources(spec) == {}


def test_an_explicit_shared_mode_is_the_same_slice_and_named_nodes_beside_it_do_not_matter() -> None:
    spec = promote(nodes=["node1"], resources={"cpu": "500m", "nvidia.com/gpu": 1}, resourcesMode="Shared")
    assert shared_slice(spec) == {"cpu": "500m", "nvidia.com/gpu": "1"}


def test_dedicated_resources_are_no_slice_but_amounts_for_whole_nodes() -> None:
    spec = promote(resources={"cpu": 10, "memory": "100Gi"}, resourcesMode="Dedicated")
    assert shared_slice(spec) is None
    assert dedicated_resources(spec) == {"cpu": "10", "memory": "100Gi"}


@pytest.mark.parametrize("spec", [
    {}, promote(), promote(resources={}), promote(resources=None), promote(nodes=["node1"]),
    promote(resources={}, resourcesMode="Shared"), {"promotePolicies": [{"nodeCount": 2}]},
], ids=["no-spec", "empty", "empty-map", "null", "nodes-only", "empty-shared", "policies-only"])
def test_no_resources_is_no_slice(spec: Obj) -> None:
    assert shared_slice(spec) is None
    assert dedicated_resources(spec) == {}


@pytest.mark.parametrize(("stored", "text"), [
    (10, "10"), (10.0, "10"), (0.5, "0.5"), ("100Gi", "100Gi"), (" 1Ki ", "1Ki"), ("1e3", "1e3"), (1e3, "1000"),
    ("500m", "500m"),
])
def test_quantities_come_back_as_kubernetes_strings_of_the_same_amount(stored: Any, text: str) -> None:
    assert quantity_text(stored) == text
    assert parse_quantity(text) == parse_quantity(str(stored).strip())


def test_the_slice_is_a_copy_the_caller_may_change() -> None:
    spec = promote(resources={"cpu": "1"})
    shared_slice(spec)["cpu"] = "2"  # type: ignore[index]
    assert spec == promote(resources={"cpu": "1"})
