"""The baseline's CustomResourceDefinition, generated from the schema vc-apiserver validates with.

The comparison is only fair if kube-apiserver validates, prunes and prints the same resource, so
the CRD is derived, never hand-written: the OpenAPI v3 definitions of :mod:`apiserver.endpoints.openapi`
are inlined into one structural schema (CRDs allow no ``$ref``) and carry with them the merge
structure (``x-kubernetes-list-type``, ``-list-map-keys``, ``-map-type``) that
:func:`apiserver.machinery.fields.merge_extensions` reads from :mod:`apiserver.apis.schema`; the
printer columns come from the strategy's Table columns. What a CRD cannot express (DNS-name and
label-syntax checks, the computed ``ready/desired`` NODES cell) is approximated and said so in ``docs/benchmarks.md``.
"""

from __future__ import annotations

from typing import Any

from marshmallow import fields

from apiserver.apis import schema
from apiserver.apis.resource import VIRTUALCLUSTERS as VC
from apiserver.endpoints import openapi
from apiserver.machinery import fields as kubefields
from apiserver.registry.virtualcluster import VirtualClusterStrategy

# controller-gen's pattern for resource.Quantity: what kube CRDs use where Go code has a Quantity.
QUANTITY_PATTERN = (r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
                    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")

# JSONPath per Table column. NODES is ``ready/desired`` computed in Python by the strategy; a
# CRD column can only select, so the baseline prints the desired counts of the promote policies.
COLUMN_PATHS = {
    "Phase": ".status.phase",
    "Ready": '.status.conditions[?(@.type=="Ready")].status',
    "Nodes": ".spec.promotePolicies[*].nodeCount",
    "Version": ".status.kubernetesVersion",
    "Age": ".metadata.creationTimestamp",
    "Endpoint": ".status.controlPlaneEndpoint",
}

_UNSUPPORTED_KEYS = ("x-kubernetes-group-version-kind",)


def _classes() -> dict[str, type[kubefields.KubeSchema]]:
    return {cls.OPENAPI_NAME: cls for cls in kubefields.iter_schemas([schema.VirtualClusterSchema])}


class _Inliner:
    """Replaces every ``$ref`` by the definition it names, recursively, adapting scalars."""

    def __init__(self) -> None:
        self.defs = openapi.openapi_v3()["components"]["schemas"]
        self.classes = _classes()

    def definition(self, name: str) -> dict[str, Any]:
        if name == kubefields.QUANTITY_REF:
            return {"anyOf": [{"type": "integer"}, {"type": "string"}], "pattern": QUANTITY_PATTERN,
                    "x-kubernetes-int-or-string": True}
        if name == kubefields.TIME_REF:
            return {"type": "string", "format": "date-time"}
        raw = self.defs[name]
        out = {k: v for k, v in raw.items() if k not in (*_UNSUPPORTED_KEYS, "properties")}
        cls = self.classes.get(name)
        props = raw.get("properties")
        if props is not None:
            out["properties"] = {}
            for key, prop in props.items():
                fld = kubefields.field_of(cls(), key) if cls is not None else None
                out["properties"][key] = self.node(prop, fld)
        return out

    def node(self, node: dict[str, Any], fld: fields.Field | None = None) -> dict[str, Any]:
        node = dict(node)
        ref = node.pop("$ref", None)
        if ref:
            node = {**self.definition(ref.rsplit("/", 1)[-1]), **node}
        # The merge extensions (x-kubernetes-list-type, ...) come with the node: openapi.py puts
        # them beside each property from kubefields.merge_extensions, the one declaration.
        if "items" in node:
            inner = fld.inner if isinstance(fld, fields.List) else None
            node["items"] = self.node(node["items"], inner)
        if isinstance(node.get("additionalProperties"), dict):
            inner = fld.value_field if isinstance(fld, fields.Dict) else None
            node["additionalProperties"] = self.node(node["additionalProperties"], inner)
        return node


def openapi_v3_schema() -> dict[str, Any]:
    """The structural schema of a VirtualCluster: everything inlined, metadata left to the server."""
    inliner = _Inliner()
    root = inliner.definition(schema.VirtualClusterSchema.OPENAPI_NAME)
    # A CRD may not describe or constrain ObjectMeta: kube-apiserver validates it itself.
    root["properties"]["metadata"] = {"type": "object"}
    return root


def printer_columns() -> list[dict[str, Any]]:
    """The strategy's Table columns as CRD printer columns (kube adds NAME by itself)."""
    out = []
    for column in VirtualClusterStrategy.columns:
        if column.name == "Name":
            continue
        entry: dict[str, Any] = {"name": column.name, "type": column.type, "jsonPath": COLUMN_PATHS[column.name],
                                 "description": column.description}
        if column.priority:
            entry["priority"] = column.priority
        out.append(entry)
    return out


def virtualcluster_crd() -> dict[str, Any]:
    """``virtualclusters.kosmos.io``: namespaced, status subresource, shortName vc, category kosmos."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": VC.qualified},
        "spec": {
            "group": VC.group,
            "scope": "Namespaced",
            "names": {"plural": VC.resource, "singular": VC.singular, "kind": VC.kind, "listKind": VC.list_kind,
                      "shortNames": list(VC.short_names), "categories": list(VC.categories)},
            "versions": [{
                "name": VC.version, "served": True, "storage": True,
                "schema": {"openAPIV3Schema": openapi_v3_schema()},
                "subresources": {"status": {}},
                "additionalPrinterColumns": printer_columns(),
            }],
        },
    }
