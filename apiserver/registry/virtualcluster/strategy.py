"""The VirtualCluster strategy: the rules particular to this resource (API.md)."""

from __future__ import annotations

from typing import Any

from apiserver.apis import rotation, schema
from apiserver.apis.conditions import find_condition
from apiserver.apis.resource import FINALIZER, VIRTUALCLUSTERS
from apiserver.apis.sharedslice import shared_slice
from apiserver.machinery.errors import FIELD_VALUE_INVALID, Cause
from apiserver.machinery.fieldpath import type_of
from apiserver.machinery.golang import go_bad_value, go_quote
from apiserver.machinery.jsonutil import Obj
from apiserver.machinery.timefmt import age
from apiserver.registry.rest import Column, keep_status, status_update, validate_type_meta

IMMUTABLE_SPEC_FIELDS = ("externalIP", "externalIps", "restoreFrom", "import")


def _status_nodes(obj: Obj) -> list[Obj]:
    nodes = (obj.get("status") or {}).get("nodes") or []
    return [n for n in nodes if isinstance(n, dict)] if isinstance(nodes, list) else []


def desired_nodes(obj: Obj) -> int:
    """How many nodes the spec asks for, as far as the spec alone can tell, or how many
    ``status.nodes`` lists if that is more (resources served by whole nodes, nodes being released).

    A shared slice counts as one node: the virtual node that serves it, listed in ``status.nodes``
    with ``shared: true``."""
    spec = obj.get("spec") or {}
    count = sum(int(p.get("nodeCount") or 0) for p in spec.get("promotePolicies") or [])
    resources = spec.get("promoteResources") or {}
    named = set(resources.get("nodes") or []) | {i.get("nodeName") for i in resources.get("nodeInfos") or []}
    count += len(named)
    if shared_slice(spec) is not None:
        count += 1
    return max(count, len(_status_nodes(obj)))


def ready_nodes(obj: Obj) -> int:
    """The ``status.nodes`` entries that are Ready: promoted host nodes and a shared slice's virtual node alike."""
    return sum(1 for n in _status_nodes(obj) if n.get("phase") == "Ready")


def _unstructured(value: Any) -> Any:
    """An object as Go holds it unstructured (a map: its keys marshal sorted), whatever order it came in."""
    if isinstance(value, dict):
        return {k: _unstructured(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_unstructured(v) for v in value]
    return value


STANDARD_FINALIZERS = ("orphan", "foregroundDeletion", "kubernetes")


def _finalizer_warnings(new: Obj, old: Obj | None) -> list[str]:
    """A CRD's warnings for finalizers a write adds without a domain (``validateKubeFinalizerName``)."""
    added = set(new["metadata"].get("finalizers") or [])
    if old is not None:
        added -= set(old["metadata"].get("finalizers") or [])
    out = []
    for name in sorted(f for f in added if isinstance(f, str)):
        if "/" in name or name in STANDARD_FINALIZERS:
            continue
        path = " including a path (/)" if "." in name else ""
        out.append(f"metadata.finalizers: {go_quote(name)}: prefer a domain-qualified finalizer name{path} to avoid "
                   "accidental conflicts with other finalizer writers")
    return out


class VirtualClusterStrategy:
    info = VIRTUALCLUSTERS
    field_type = type_of(schema.VirtualClusterSchema)
    columns = (
        Column("Name", "string", "Name must be unique within a namespace.", format="name"),
        Column("Phase", "string", "Lifecycle phase of the virtual cluster."),
        Column("Ready", "string", "Status of the Ready condition."),
        Column("Nodes", "string", "Nodes that are ready, out of those desired: promoted host nodes and the virtual "
                                  "node of a shared slice."),
        Column("Version", "string", "Kubernetes version the control plane runs."),
        Column("Age", "date", "Time since the object was created."),
        Column("Endpoint", "string", "URL of the tenant kube-apiserver.", priority=1),
    )

    def prepare_for_create(self, obj: Obj) -> None:
        obj.pop("status", None)
        obj.setdefault("spec", {})
        meta = obj["metadata"]
        meta["generation"] = 1
        finalizers = list(meta.get("finalizers") or [])
        if FINALIZER not in finalizers:
            finalizers.append(FINALIZER)
        meta["finalizers"] = finalizers

    def prepare_for_update(self, new: Obj, old: Obj) -> None:
        keep_status(new, old)
        new.setdefault("spec", {})
        generation = int(old["metadata"].get("generation", 1))
        if new.get("spec") != old.get("spec"):
            generation += 1
        new["metadata"]["generation"] = generation

    def prepare_for_status_update(self, new: Obj, old: Obj) -> Obj:
        return status_update(new, old)

    def warnings_on_create(self, obj: Obj) -> list[str]:
        return _finalizer_warnings(obj, None)

    def warnings_on_update(self, new: Obj, old: Obj) -> list[str]:
        return _finalizer_warnings(new, old)

    def validate_type(self, obj: Obj) -> list[Cause]:
        return validate_type_meta(self.info, obj)

    def validate(self, obj: Obj) -> list[Cause]:
        return (schema.validate_spec(obj.get("spec")) + schema.import_conflicts(obj.get("spec")) +
                rotation.request_errors(obj) + schema.validate_status(obj.get("status")))

    def validate_update(self, new: Obj, old: Obj) -> list[Cause]:
        # Ratcheting, as kube does for CRDs: what an update leaves as it was is not judged again.
        causes = []
        if new.get("spec") != old.get("spec"):
            causes += schema.validate_spec(new.get("spec")) + schema.import_conflicts(new.get("spec"))
        if (new.get("metadata") or {}).get("annotations") != (old.get("metadata") or {}).get("annotations"):
            causes += rotation.request_errors(new)
        if new.get("status") != old.get("status"):
            causes += schema.validate_status(new.get("status"))
        new_spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
        if not isinstance(new_spec, dict):  # validate() has said what is wrong with it
            return causes
        for name in IMMUTABLE_SPEC_FIELDS:
            if new_spec.get(name) != old_spec.get(name):
                causes.append(Cause(FIELD_VALUE_INVALID,
                                    f"Invalid value: {go_bad_value(_unstructured(new_spec.get(name)))}: field is "
                                    f"immutable",
                                    f"spec.{name}"))
        return causes

    def validate_status(self, obj: Obj) -> list[Cause]:
        return schema.validate_status(obj.get("status"))

    def prune(self, obj: Obj) -> list[str]:
        return schema.prune_unknown_fields(obj)

    def cells(self, obj: Obj) -> list[Any]:
        meta = obj.get("metadata") or {}
        status = obj.get("status") or {}
        ready = find_condition(status.get("conditions"), "Ready")
        # A value the object does not have is a null cell, as a CRD's printer column gives it
        # (kubectl prints <none>).
        return [
            meta.get("name", ""),
            status.get("phase"),
            ready.get("status") if ready else None,
            f"{ready_nodes(obj)}/{desired_nodes(obj)}",
            status.get("kubernetesVersion"),
            age(meta.get("creationTimestamp")),
            status.get("controlPlaneEndpoint"),
        ]
