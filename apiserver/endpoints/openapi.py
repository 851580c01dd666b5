"""OpenAPI v2 and v3 documents for ``kosmos.io/v1alpha1``, generated from :mod:`apiserver.apis.schema`.

The aggregator merges ``/openapi/v2`` and proxies ``/openapi/v3/apis/kosmos.io/v1alpha1``; kubectl
uses them for ``explain`` (definitions carrying ``x-kubernetes-group-version-kind``) and to decide
which query parameters it may send (``fieldValidation``, ``dryRun``) on which operation. So the
shapes follow what kube-apiserver publishes, and every definition is derived by walking the same
marshmallow fields the server validates with; only apimachinery scalars (Quantity, Time, ...) and
the API-machinery envelopes (Status, DeleteOptions, ...) are declared here.
"""

from __future__ import annotations

import copy
import functools
import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web
from marshmallow import fields

from apiserver.apis.credential import CredentialListSchema, CredentialSchema
from apiserver.apis.resource import VIRTUALCLUSTERCREDENTIALS as CRED
from apiserver.apis.resource import VIRTUALCLUSTERS as VC
from apiserver.apis.schema import ListMetaSchema, VirtualClusterListSchema, VirtualClusterSchema
from apiserver.endpoints.patch import ACCEPTED as ACCEPTED_PATCH_TYPES
from apiserver.machinery.fields import (
    DEFAULT,
    FIELDS_V1_REF,
    META,
    QUANTITY_REF,
    RAW_EXTENSION_REF,
    TIME_REF,
    Array,
    Bool,
    Check,
    FreeObject,
    Int,
    KubeSchema,
    Obj,
    OneOf,
    Range,
    Str,
    iter_schemas,
    merge_extensions,
    struct_extensions,
)

# The PATCH bodies the REST layer accepts (apiserver.endpoints.patch owns the list), exactly the three a
# CRD lists: JSON patch, merge patch, apply patch. Strategic merge is not advertised, so kubectl's
# client-side apply and kubectl edit send JSON merge patches.
PATCH_CONTENT_TYPES: tuple[str, ...] = ACCEPTED_PATCH_TYPES

GROUP_VERSION_PATH = f"apis/{VC.group}/{VC.version}"
_ROOT = f"/{GROUP_VERSION_PATH}"
_GVK = {"group": VC.group, "kind": VC.kind, "version": VC.version}
_TAG = "".join(p if i == 0 else p.capitalize() for i, p in enumerate(VC.group.split("."))) + "_" + VC.version
_OP_INFIX = "".join(p.capitalize() for p in VC.group.split(".")) + VC.version.capitalize()
_JSON, _YAML, _WATCH = "application/json", "application/yaml", "application/json;stream=watch"
_PATCH_REF = f"{META}.Patch"


# --------------------------------------------------------------------------- API-machinery envelopes


def _core_gvk(kind: str, *, per_group: bool = False) -> tuple[dict[str, str], ...]:
    """Kube lists option/event kinds under the core group and under every group serving them."""
    core = {"group": "", "kind": kind, "version": "v1"}
    return (core, {"group": VC.group, "kind": kind, "version": VC.version}) if per_group else (core,)


def _api_version() -> Str:
    return Str("APIVersion defines the versioned schema of this representation of an object.")


def _kind() -> Str:
    return Str("Kind is a string value representing the REST resource this object represents, in CamelCase.")


class StatusCauseSchema(KubeSchema):
    OPENAPI_NAME = f"{META}.StatusCause"
    DESCRIPTION = "StatusCause provides more information about an api.Status failure, including multiple causes."

    reason = Str("A machine-readable description of the cause of the error, such as FieldValueInvalid.")
    message = Str("A human-readable description of the cause of the error.")
    field = Str("The field of the resource that caused the error, in JSON path form such as "
                "spec.promotePolicies[0].nodeCount.")


class StatusDetailsSchema(KubeSchema):
    OPENAPI_NAME = f"{META}.StatusDetails"
    DESCRIPTION = ("StatusDetails is a set of additional properties that MAY be set by the server to provide "
                   "additional information about a response.")

    name = Str("The name attribute of the resource associated with the status, if any.")
    group = Str("The group attribute of the resource associated with the status.")
    kind = Str("The kind attribute of the resource associated with the status.")
    uid = Str("UID of the resource, if a single resource can be identified.")
    causes = Array(Obj(StatusCauseSchema), "Extended data associated with the reason, such as every invalid "
                   "field of a 422 Invalid.")
    retryAfterSeconds = Int("If specified, the time in seconds before the operation should be retried.")


class StatusSchema(KubeSchema):
    OPENAPI_NAME = f"{META}.Status"
    DESCRIPTION = "Status is a return value for calls that don't return other objects, and for every failure."
    GVK = _core_gvk("Status")

    apiVersion = _api_version()
    kind = _kind()
    metadata = Obj(ListMetaSchema, "Standard list metadata.")
    status = Str("Status of the operation: Success or Failure.")
    message = Str("A human-readable description of the status of this operation.")
    reason = Str("A machine-readable description of why this operation is in the Failure status, such as "
                 "NotFound, Conflict or Invalid.")
    details = Obj(StatusDetailsSchema, "Extended data associated with the reason.")
    code = Int("Suggested HTTP return code for this status.")


class PreconditionsSchema(KubeSchema):
    OPENAPI_NAME = f"{META}.Preconditions"
    DESCRIPTION = "Preconditions must be fulfilled before an operation (update, delete, etc.) is carried out."

    uid = Str("Specifies the target UID.")
    resourceVersion = Str("Specifies the target ResourceVersion.")


class DeleteOptionsSchema(KubeSchema):
    OPENAPI_NAME = f"{META}.DeleteOptions"
    DESCRIPTION = "DeleteOptions may be provided when deleting an API object."
    GVK = _core_gvk("DeleteOptions", per_group=True)

    apiVersion = _api_version()
    kind = _kind()
    gracePeriodSeconds = Int("Seconds before the object should be deleted; zero means immediately.",
                             format="int64")
    preconditions = Obj(PreconditionsSchema, "Must be fulfilled before a deletion is carried out; otherwise 409 "
                        "Conflict.")
    orphanDependents = Bool("Deprecated: use propagationPolicy. Whether dependents are orphaned.")
    propagationPolicy = Str("Whether and how garbage collection is performed: Orphan, Background or "
                            "Foreground.")
    dryRun = Array(Str(), "When present, modifications are not persisted. Valid value: All.")


class WatchEventSchema(KubeSchema):
    OPENAPI_NAME = f"{META}.WatchEvent"
    DESCRIPTION = "Event represents a single event to a watched resource."
    GVK = _core_gvk("WatchEvent", per_group=True)

    type = Str("ADDED, MODIFIED, DELETED, BOOKMARK or ERROR.", required=True)
    object = FreeObject(RAW_EXTENSION_REF, "The object as of the event: the new state for ADDED and MODIFIED, "
                        "the last state for DELETED, a Status for ERROR, an object carrying only "
                        "metadata.resourceVersion for BOOKMARK.", required=True)


class APIResourceSchema(KubeSchema):
    OPENAPI_NAME = f"{META}.APIResource"
    DESCRIPTION = "APIResource specifies the name of a resource and whether it is namespaced."

    name = Str("The plural name of the resource.", required=True)
    singularName = Str("The singular name of the resource.", required=True)
    namespaced = Bool("Whether the resource is namespaced.", required=True)
    group = Str("The preferred group of the resource; empty means the group of the containing list.")
    version = Str("The preferred version of the resource; empty means the version of the containing list.")
    kind = Str("The kind of the resource.", required=True)
    verbs = Array(Str(), "The supported kube verbs.", required=True)
    shortNames = Array(Str(), "Suggested short names of the resource.")
    categories = Array(Str(), "Grouped resources this resource belongs to (e.g. 'all').")
    storageVersionHash = Str("An opaque hash of the storage version; only equality comparison is valid.")


class APIResourceListSchema(KubeSchema):
    OPENAPI_NAME = f"{META}.APIResourceList"
    DESCRIPTION = "APIResourceList lists the resources served in a group version and whether they are namespaced."
    GVK = _core_gvk("APIResourceList")

    apiVersion = _api_version()
    kind = _kind()
    groupVersion = Str("The group and version this APIResourceList is for.", required=True)
    resources = Array(Obj(APIResourceSchema), "The resources and whether they are namespaced.", required=True)


_ROOTS: tuple[type[KubeSchema], ...] = (VirtualClusterSchema, VirtualClusterListSchema, CredentialSchema,
                                        CredentialListSchema, StatusSchema, DeleteOptionsSchema, WatchEventSchema,
                                        APIResourceListSchema)


def _scalars(v3: bool) -> dict[str, dict[str, Any]]:
    """apimachinery types that are JSON scalars or opaque objects, not field sets."""
    quantity_type: dict[str, Any] = {"oneOf": [{"type": "string"}, {"type": "number"}]} if v3 else {"type": "string"}
    return {
        QUANTITY_REF: {**quantity_type, "description": (
            "A fixed-point number: a JSON number or a string such as 10, 500m, 100Gi or 1e3 (suffixes n u m k M "
            "G T P E, Ki Mi Gi Ti Pi Ei, or a decimal exponent).")},
        TIME_REF: {"type": "string", "format": "date-time",
                   "description": "An RFC 3339 timestamp with second precision, e.g. 2024-01-02T15:04:05Z."},
        FIELDS_V1_REF: {"type": "object",
                        "description": "The set of fields a manager owns, in the FieldsV1 trie format."},
        RAW_EXTENSION_REF: {"type": "object", "description": "An embedded, complete JSON object."},
        _PATCH_REF: {"type": "object", "description": (
            "The PATCH request body: a JSON patch (RFC 6902), a JSON merge patch (RFC 7386) or a "
            "server-side apply configuration (YAML or JSON).")},
    }


# --------------------------------------------------------------------------- schema walk


def _ref(name: str, v3: bool) -> str:
    return ("#/components/schemas/" if v3 else "#/definitions/") + name


def _property(fld: fields.Field, v3: bool) -> dict[str, Any]:
    prop = _json_schema(fld, v3)
    prop.update(merge_extensions(fld))
    if DEFAULT in fld.metadata:
        prop["default"] = fld.metadata[DEFAULT]
    description = fld.metadata.get("description")
    if description:
        prop["description"] = description
    return prop


def _json_schema(fld: fields.Field, v3: bool) -> dict[str, Any]:
    """The JSON Schema of one field's value: a $ref for named types, else type plus constraints."""
    if isinstance(fld, fields.Nested):
        return {"$ref": _ref(fld.schema.OPENAPI_NAME, v3)}
    ref = getattr(fld, "REF", None)
    if ref:
        return {"$ref": _ref(ref, v3)}
    if isinstance(fld, fields.List):
        return {"type": "array", "items": _property(fld.inner, v3)}
    if isinstance(fld, fields.Dict):
        return {"type": "object", "additionalProperties": _property(fld.value_field, v3)}
    if isinstance(fld, Int):
        out: dict[str, Any] = {"type": "integer", "format": fld.metadata["format"]}
    elif isinstance(fld, Bool):
        out = {"type": "boolean"}
    elif isinstance(fld, Str):
        out = {"type": "string"}
    else:
        raise TypeError(f"no OpenAPI mapping for {type(fld).__name__}")
    for validator in fld.validators:
        out.update(_constraints(validator))
    return out


def _constraints(validator: Any) -> dict[str, Any]:
    if isinstance(validator, OneOf):
        return {"enum": list(validator.choices)}
    if isinstance(validator, Range):
        bounds = {"minimum": validator.min, "maximum": validator.max}
        return {k: v for k, v in bounds.items() if v is not None}
    if isinstance(validator, Check) and validator.format:
        return {"format": validator.format}
    return {}


def _definition(cls: type[KubeSchema], v3: bool) -> dict[str, Any]:
    schema = cls()
    props = {(f.data_key or name): _property(f, v3) for name, f in schema.fields.items()}
    out: dict[str, Any] = {"description": cls.DESCRIPTION, "type": "object", "properties": props}
    required = [(f.data_key or name) for name, f in schema.fields.items() if f.required]
    if required:
        out["required"] = required
    out.update(struct_extensions(cls))
    if cls.GVK:
        out["x-kubernetes-group-version-kind"] = [dict(g) for g in cls.GVK]
    return out


def _definitions(v3: bool) -> dict[str, dict[str, Any]]:
    defs = {cls.OPENAPI_NAME: _definition(cls, v3) for cls in iter_schemas(_ROOTS)}
    defs.update(_scalars(v3))
    return dict(sorted(defs.items()))


# --------------------------------------------------------------------------- operations


@dataclass(frozen=True)
class Param:
    name: str
    type: str
    description: str
    location: str = "query"


PRETTY = Param("pretty", "string", "If 'true', then the output is pretty printed.")
NAMESPACE = Param("namespace", "string", "object name and auth scope, such as for teams and projects", "path")
NAME = Param("name", "string", f"name of the {VC.kind}", "path")
DRY_RUN = Param("dryRun", "string", "When present, indicates that modifications should not be persisted. Valid "
                "values are: - All: all dry run stages will be processed. Anything else is rejected.")
FIELD_MANAGER = Param("fieldManager", "string", "A name associated with the actor or entity making these "
                      "changes; at most 128 printable characters.")
FIELD_VALIDATION = Param("fieldValidation", "string", "How the server responds to unknown or duplicate fields "
                         "in the request body: Ignore drops them silently; Warn (the default) answers with a "
                         "Warning header per field; Strict fails the request with 400 BadRequest.")
FORCE = Param("force", "boolean", "Force is going to \"force\" Apply requests: the request takes over the "
              "fields other managers own instead of failing with 409 Conflict. Must be unset for non-apply "
              "patch requests.")
LIST_PARAMS = (
    Param("allowWatchBookmarks", "boolean", "Requests watch events of type BOOKMARK, which carry only a "
          "resourceVersion to resume from. Ignored when not watching."),
    Param("continue", "string", "The continue token of a previous, limited list call, to fetch its next page. "
          "An expired token is answered with 410 Expired."),
    Param("fieldSelector", "string", "Restricts the list by fields: metadata.name and metadata.namespace are "
          "supported. Defaults to everything."),
    Param("labelSelector", "string", "Restricts the list by labels (=, ==, !=, in, notin, exists, !exists). "
          "Defaults to everything."),
    Param("limit", "integer", "Maximum number of items to return; when more exist the list metadata carries a "
          "continue token. Not supported when watching."),
    Param("resourceVersion", "string", "Constrains which resource versions the request may be served from; "
          "for a watch, the version to start after. Defaults to unset (most recent)."),
    Param("resourceVersionMatch", "string", "How resourceVersion applies to a list: Exact or NotOlderThan. "
          "Defaults to unset."),
    Param("sendInitialEvents", "boolean", "With watch=true and resourceVersionMatch=NotOlderThan, starts the "
          "watch with synthetic ADDED events for the current state, then a BOOKMARK annotated "
          "k8s.io/initial-events-end."),
    Param("timeoutSeconds", "integer", "Timeout for the list/watch call, regardless of activity."),
    Param("watch", "boolean", "Watch for changes to the described resources and stream them as ADDED, "
          "MODIFIED and DELETED events. Specify resourceVersion to resume."),
)
_LIST_NAMES = {p.name: p for p in LIST_PARAMS}
DELETE_PARAMS = (
    Param("gracePeriodSeconds", "integer", "Seconds before the object should be deleted; zero means "
          "immediately. Defaults to a per-object value."),
    Param("orphanDependents", "boolean", "Deprecated: use propagationPolicy. Whether dependents are "
          "orphaned."),
    Param("propagationPolicy", "string", "Whether and how garbage collection will be performed: Orphan, "
          "Background or Foreground."),
)
EXPIRATION_SECONDS = Param("expirationSeconds", "integer", "Lifetime of the issued client certificate in seconds "
                           "(default 3600, minimum 600, capped by the server).")
WRITE_PARAMS = (DRY_RUN, FIELD_MANAGER, FIELD_VALIDATION)
DELETECOLLECTION_PARAMS = tuple(sorted((*LIST_PARAMS, DRY_RUN, *DELETE_PARAMS), key=lambda p: p.name))
KUBECONFIG_SCHEMA = {
    "type": "object",
    "description": "A kubeconfig (apiVersion v1, kind Config) for the tenant cluster, with a client certificate "
                   "minted for the caller; usable directly as a --kubeconfig file.",
}


@dataclass(frozen=True)
class Operation:
    """One HTTP operation, version-neutral; rendered into v2 and v3 shapes."""

    method: str
    verb: str  # kube's operation verb: list, create, read, replace, patch, delete, deletecollection
    action: str | None  # x-kubernetes-action
    description: str
    operation_id: str
    params: tuple[Param, ...] = ()
    body: str | None = None  # request definition name
    body_required: bool = True
    responses: dict[str, str | dict[str, Any]] = field(default_factory=dict)  # code -> definition or schema
    produces: tuple[str, ...] = (_JSON, _YAML)
    consumes: tuple[str, ...] = ("*/*",)
    gvk: bool = True
    kind: str = VC.kind  # of x-kubernetes-group-version-kind


def _op_id(verb: str, suffix: str) -> str:
    return f"{verb}{_OP_INFIX}{suffix}"


def _resource_ops(sub: str) -> list[Operation]:
    """get/put/patch of the object (``sub`` "") or of its status subresource (``sub`` "status")."""
    kind, title = VC.kind, sub.capitalize()
    of = f" {sub} of" if sub else ""
    suffix = f"Namespaced{kind}{title}"
    return [
        Operation("get", "read", "get", f"read{of} the specified {kind}", _op_id("read", suffix),
                  responses={"200": VirtualClusterSchema.OPENAPI_NAME}),
        Operation("put", "replace", "put", f"replace{of} the specified {kind}", _op_id("replace", suffix),
                  WRITE_PARAMS, VirtualClusterSchema.OPENAPI_NAME,
                  responses={"200": VirtualClusterSchema.OPENAPI_NAME, "201": VirtualClusterSchema.OPENAPI_NAME}),
        Operation("patch", "patch", "patch", f"partially update{of} the specified {kind}",
                  _op_id("patch", suffix), (*WRITE_PARAMS, FORCE), _PATCH_REF,
                  responses={"200": VirtualClusterSchema.OPENAPI_NAME, "201": VirtualClusterSchema.OPENAPI_NAME},
                  consumes=PATCH_CONTENT_TYPES),
    ]


def _paths_table() -> dict[str, tuple[tuple[Param, ...], list[Operation]]]:
    """Every path: its path-level parameters and operations."""
    kind, obj, lst = VC.kind, VirtualClusterSchema.OPENAPI_NAME, VirtualClusterListSchema.OPENAPI_NAME
    status = StatusSchema.OPENAPI_NAME
    namespaced = f"{_ROOT}/namespaces/{{namespace}}/{VC.resource}"
    list_op = {"responses": {"200": lst}, "produces": (_JSON, _YAML, _WATCH), "params": LIST_PARAMS}
    return {
        f"{_ROOT}/": ((), [Operation(
            "get", "get", None, "get available resources", _op_id("get", "APIResources"),
            responses={"200": APIResourceListSchema.OPENAPI_NAME}, gvk=False,
            consumes=(_JSON, _YAML, "application/vnd.kubernetes.protobuf"))]),
        f"{_ROOT}/{VC.resource}": ((PRETTY,), [Operation(
            "get", "list", "list", f"list or watch objects of kind {kind}",
            _op_id("list", f"{kind}ForAllNamespaces"), **list_op)]),
        namespaced: ((NAMESPACE, PRETTY), [
            Operation("get", "list", "list", f"list or watch objects of kind {kind}",
                      _op_id("list", f"Namespaced{kind}"), **list_op),
            Operation("post", "create", "post", f"create a {kind}", _op_id("create", f"Namespaced{kind}"),
                      WRITE_PARAMS, obj, responses={"200": obj, "201": obj, "202": obj}),
            Operation("delete", "deletecollection", "deletecollection", f"delete collection of {kind}",
                      _op_id("delete", f"CollectionNamespaced{kind}"), DELETECOLLECTION_PARAMS,
                      DeleteOptionsSchema.OPENAPI_NAME, False, responses={"200": status}),
        ]),
        f"{namespaced}/{{name}}": ((NAME, NAMESPACE, PRETTY), [
            *_resource_ops(""),
            Operation("delete", "delete", "delete", f"delete a {kind}", _op_id("delete", f"Namespaced{kind}"),
                      (DRY_RUN, *DELETE_PARAMS), DeleteOptionsSchema.OPENAPI_NAME, False,
                      responses={"200": obj, "202": obj}),
        ]),
        f"{namespaced}/{{name}}/status": ((NAME, NAMESPACE, PRETTY), _resource_ops("status")),
        f"{namespaced}/{{name}}/kubeconfig": ((NAME, NAMESPACE, PRETTY), [Operation(
            "get", "read", "get", f"read kubeconfig of the specified {kind}",
            _op_id("read", f"Namespaced{kind}Kubeconfig"), (EXPIRATION_SECONDS,),
            responses={"200": KUBECONFIG_SCHEMA})]),
        f"{namespaced}/{{name}}/credentials": ((NAME, NAMESPACE, PRETTY), [Operation(
            "get", "read", "get", f"read the caller's own credentials for the specified {kind}",
            _op_id("read", f"Namespaced{kind}Credentials"), responses={"200": CredentialListSchema.OPENAPI_NAME})]),
        **_credential_paths(),
    }


def _credential_paths() -> dict[str, tuple[tuple[Param, ...], list[Operation]]]:
    """The credentials the kubeconfig subresource issued: read, list, watch and delete only."""
    kind, obj, lst = CRED.kind, CredentialSchema.OPENAPI_NAME, CredentialListSchema.OPENAPI_NAME
    namespaced = f"{_ROOT}/namespaces/{{namespace}}/{CRED.resource}"
    list_op = {"responses": {"200": lst}, "produces": (_JSON, _YAML, _WATCH), "params": LIST_PARAMS, "kind": kind}
    name = Param("name", "string", f"name of the {kind}", "path")
    return {
        f"{_ROOT}/{CRED.resource}": ((PRETTY,), [Operation(
            "get", "list", "list", f"list or watch objects of kind {kind}",
            _op_id("list", f"{kind}ForAllNamespaces"), **list_op)]),
        namespaced: ((NAMESPACE, PRETTY), [
            Operation("get", "list", "list", f"list or watch objects of kind {kind}",
                      _op_id("list", f"Namespaced{kind}"), **list_op),
            Operation("delete", "deletecollection", "deletecollection", f"delete (revoke) a collection of {kind}",
                      _op_id("delete", f"CollectionNamespaced{kind}"), DELETECOLLECTION_PARAMS,
                      DeleteOptionsSchema.OPENAPI_NAME, False, responses={"200": StatusSchema.OPENAPI_NAME},
                      kind=kind),
        ]),
        f"{namespaced}/{{name}}": ((name, NAMESPACE, PRETTY), [
            Operation("get", "read", "get", f"read the specified {kind}", _op_id("read", f"Namespaced{kind}"),
                      responses={"200": obj}, kind=kind),
            Operation("delete", "delete", "delete", f"delete (revoke) a {kind}", _op_id("delete", f"Namespaced{kind}"),
                      (DRY_RUN, *DELETE_PARAMS), DeleteOptionsSchema.OPENAPI_NAME, False,
                      responses={"200": StatusSchema.OPENAPI_NAME}, kind=kind),
        ]),
    }


_STATUS_TEXT = {"200": "OK", "201": "Created", "202": "Accepted", "401": "Unauthorized"}


def _response_schema(target: str | dict[str, Any], v3: bool) -> dict[str, Any]:
    return {"$ref": _ref(target, v3)} if isinstance(target, str) else dict(target)


def _param_v2(p: Param) -> dict[str, Any]:
    out = {"uniqueItems": True, "type": p.type, "description": p.description, "name": p.name, "in": p.location}
    return {**out, "required": True} if p.location == "path" else out


def _param_v3(p: Param) -> dict[str, Any]:
    out = {"name": p.name, "in": p.location, "description": p.description,
           "schema": {"type": p.type, "uniqueItems": True}}
    return {**out, "required": True} if p.location == "path" else out


def _extensions(op: Operation) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if op.action:
        out["x-kubernetes-action"] = op.action
    if op.gvk:
        out["x-kubernetes-group-version-kind"] = {**_GVK, "kind": op.kind}
    return out


def _operation_v2(op: Operation) -> dict[str, Any]:
    params = [_param_v2(p) for p in op.params]
    if op.body:
        params.insert(0, {"name": "body", "in": "body", "required": op.body_required,
                          "schema": {"$ref": _ref(op.body, False)}})
    responses: dict[str, Any] = {
        code: {"description": _STATUS_TEXT[code], "schema": _response_schema(target, False)}
        for code, target in op.responses.items()}
    responses["401"] = {"description": "Unauthorized"}
    return {"description": op.description, "consumes": list(op.consumes), "produces": list(op.produces),
            "schemes": ["https"], "tags": [_TAG], "operationId": op.operation_id, "parameters": params,
            "responses": responses, **_extensions(op)}


def _operation_v3(op: Operation) -> dict[str, Any]:
    out: dict[str, Any] = {"description": op.description, "tags": [_TAG], "operationId": op.operation_id,
                           "parameters": [_param_v3(p) for p in op.params]}
    if op.body:
        schema = {"$ref": _ref(op.body, True)}
        # A map in kube's v3 document: its media types in sorted order, as kube-apiserver lists them.
        out["requestBody"] = {"content": {ct: {"schema": dict(schema)} for ct in sorted(op.consumes)},
                              "required": op.body_required}
    responses: dict[str, Any] = {
        code: {"description": _STATUS_TEXT[code],
               "content": {ct: {"schema": _response_schema(target, True)} for ct in op.produces}}
        for code, target in op.responses.items()}
    responses["401"] = {"description": "Unauthorized"}
    out["responses"] = responses
    return {**out, **_extensions(op)}


def _paths(v3: bool) -> dict[str, Any]:
    render_param, render_op = (_param_v3, _operation_v3) if v3 else (_param_v2, _operation_v2)
    out: dict[str, Any] = {}
    for path, (params, ops) in _paths_table().items():
        item: dict[str, Any] = {op.method: render_op(op) for op in ops}
        if params:
            item["parameters"] = [render_param(p) for p in params]
        out[path] = item
    return out


# --------------------------------------------------------------------------- documents

_INFO = {"title": "vc-apiserver", "version": VC.version,
         "description": f"VirtualClusters ({VC.group}/{VC.version}): tenant Kubernetes control planes."}
_BEARER = {"type": "apiKey", "description": "Bearer Token authentication", "name": "authorization",
           "in": "header"}


@functools.cache
def _v2() -> dict[str, Any]:
    return {"swagger": "2.0", "info": dict(_INFO), "paths": _paths(False), "definitions": _definitions(False),
            "securityDefinitions": {"BearerToken": dict(_BEARER)}, "security": [{"BearerToken": []}]}


@functools.cache
def _v3() -> dict[str, Any]:
    return {"openapi": "3.0.0", "info": dict(_INFO), "paths": _paths(True),
            "components": {"schemas": _definitions(True), "securitySchemes": {"BearerToken": dict(_BEARER)}},
            "security": [{"BearerToken": []}]}


def openapi_v2() -> dict[str, Any]:
    """The Swagger 2.0 document served at ``/openapi/v2`` (a fresh copy: callers may mutate it)."""
    return copy.deepcopy(_v2())


def openapi_v3() -> dict[str, Any]:
    """The OpenAPI 3.0 document served at ``/openapi/v3/apis/kosmos.io/v1alpha1`` (a fresh copy)."""
    return copy.deepcopy(_v3())


def canonical_json(document: dict[str, Any]) -> bytes:
    """Key-sorted compact JSON: the bytes to serve and to hash, stable across runs."""
    return orjson.dumps(document, option=orjson.OPT_SORT_KEYS)


def document_hash(document: dict[str, Any]) -> str:
    """Uppercase hex sha512 of a document's canonical JSON: kube's ``?hash=`` and a stable ETag."""
    return hashlib.sha512(canonical_json(document)).hexdigest().upper()


def openapi_v3_hash(document: dict[str, Any] | None = None) -> str:
    """The ``?hash=`` of the v3 document (changes whenever the document does)."""
    return document_hash(_v3() if document is None else document)


def openapi_v3_discovery(hash: str) -> dict[str, Any]:
    """The ``/openapi/v3`` index, pointing the aggregator at our single group-version document."""
    url = f"/openapi/v3/{GROUP_VERSION_PATH}?hash={hash}"
    return {"paths": {GROUP_VERSION_PATH: {"serverRelativeURL": url}}}


def routes() -> list[web.RouteDef]:
    """``/openapi/v2`` and ``/openapi/v3`` (index and group-version), with ETags and immutable hashes."""
    v2_body = orjson.dumps(openapi_v2())
    v3_doc = openapi_v3()
    v3_body = orjson.dumps(v3_doc)
    v3_hash = document_hash(v3_doc)
    v3_index = orjson.dumps(openapi_v3_discovery(v3_hash))
    etag_v2 = f'"{document_hash(openapi_v2())}"'
    etag_v3 = f'"{v3_hash}"'

    def serve(body: bytes, etag: str) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handler(request: web.Request) -> web.Response:
            headers = {"ETag": etag, "Vary": "Accept"}
            if request.headers.get("If-None-Match") == etag:
                return web.Response(status=304, headers=headers)
            return web.Response(body=body, content_type="application/json", headers=headers)
        return handler

    async def v3_group(request: web.Request) -> web.Response:
        headers = {"ETag": etag_v3}
        if request.rel_url.query.get("hash") == v3_hash:
            headers["Cache-Control"] = "public, immutable"
            headers["Expires"] = "Thu, 01 Jan 2099 00:00:00 GMT"
        if request.headers.get("If-None-Match") == etag_v3:
            return web.Response(status=304, headers=headers)
        return web.Response(body=v3_body, content_type="application/json", headers=headers)

    return [web.get("/openapi/v2", serve(v2_body, etag_v2)),
            web.get("/openapi/v3", serve(v3_index, f'"{v3_hash}-index"')),
            web.get(f"/openapi/v3/apis/{VC.group_version}", v3_group)]
