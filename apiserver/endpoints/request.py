"""What a request asks for, decoded once (k8s.io/apiserver's ``endpoints/request``): its
:class:`RequestInfo` (verb, resource, whether it is a watch, long-running or mutating), and the
query parameters of kube's ListOptions, DeleteOptions and write options.

The filters (authorization, metrics, max-in-flight) and the handlers all read the same
:func:`request_info`; nothing else decides what kind of request this is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web

from apiserver.apis.resource import RESOURCES
from apiserver.auth.authn import Attributes
from apiserver.machinery import errors, gojson
from apiserver.machinery.golang import go_bad_value, go_quote, parse_int64, parse_int_error
from apiserver.machinery.selectors import (
    DEFAULT_SELECTABLE_FIELDS,
    FieldSelector,
    parse_field_selector,
    parse_label_selector,
)
from apiserver.machinery.validation import validate_field_manager
from apiserver.registry.fieldmanager import manager_from_user_agent
from apiserver.registry.rest import DeleteOptions, ListOptions, WriteOptions

__all__ = ["RequestInfo", "delete_options_from_body", "delete_options_from_query", "list_options",
           "patch_options", "query_bool", "query_int64", "request_info", "timeout_seconds", "validate_delete_options",
           "write_options"]

MUTATING_METHODS = frozenset(("POST", "PUT", "PATCH", "DELETE"))
DRY_RUN_ALL = "All"
RESOURCE_ROUTE_PREFIX = "resource:"  # route names of a resource and its subresources: resource:<plural>.<part>


@dataclass(frozen=True)
class RequestInfo:
    attributes: Attributes  # what the authorizer and the metrics see
    watch: bool
    mutating: bool
    field_selector: FieldSelector | None = None  # parsed once; None when absent or malformed
    field_selector_error: errors.ApiError | None = None
    watch_error: errors.ApiError | None = None  # a malformed ``watch``: the handler's 400 to give

    @property
    def long_running(self) -> bool:
        """Exempt from max-in-flight and request latency (kube's ``LongRunningRequestCheck``)."""
        return self.watch


def query_bool(query: Any, name: str) -> bool | None:
    """A boolean query parameter as kube converts one (``Convert_Slice_string_To_bool``): None when
    absent; "0" and "false" in any case are false, anything else, even empty, is true."""
    value = query.get(name)
    if value is None:
        return None
    return not (value == "0" or value.lower() == "false")


def query_int64(query: Any, name: str) -> int | None:
    """An integer query parameter (Go's ``strconv.ParseInt``): None when absent, 400 in Go's words
    when it does not parse."""
    value = query.get(name)
    if value is None:
        return None
    parsed = parse_int64(value)
    if parsed is None:
        raise errors.bad_request(parse_int_error(value))
    return parsed


def _info(request: web.Request) -> RequestInfo:
    route = request.match_info.route
    route_name = route.name if route is not None else None
    path, method = request.path, request.method
    mutating = method in MUTATING_METHODS
    if route_name is None or not route_name.startswith(RESOURCE_ROUTE_PREFIX):
        verb = {"GET": "get", "HEAD": "get", "POST": "post", "PUT": "put", "PATCH": "patch",
                "DELETE": "delete"}.get(method, method.lower())
        return RequestInfo(Attributes(verb=verb, path=path), watch=False, mutating=mutating)
    info = RESOURCES[route_name[len(RESOURCE_ROUTE_PREFIX):].partition(".")[0]]
    match = request.match_info
    query = request.rel_url.query
    item = "name" in match
    watch, watch_error = False, None
    if method in ("GET", "HEAD"):
        watch = bool(query_bool(query, "watch")) and not item  # a get by name is a get, whatever ?watch says
        verb = ("watch" if watch else "get") if item else ("watch" if watch else "list")
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch",
                "DELETE": "delete" if item else "deletecollection"}.get(method, method.lower())
    object_name = match.get("name", "")
    selector, selector_error = None, None
    if query.get("fieldSelector"):
        try:
            selector = parse_field_selector(query["fieldSelector"], None)
        except errors.ApiError as e:
            selector_error = e  # the handler's 400 to give, after authorization
        if selector is not None and not item and verb in ("list", "watch"):
            object_name = selector.exact_name() or ""
    attrs = Attributes(verb=verb, path=path, resource_request=True, namespace=match.get("namespace", ""),
                       group=info.group, version=info.version, resource=info.resource,
                       subresource=match.get("subresource", ""), name=object_name)
    return RequestInfo(attrs, watch=watch, mutating=mutating, field_selector=selector,
                       field_selector_error=selector_error, watch_error=watch_error)


def request_info(request: web.Request) -> RequestInfo:
    """The request's info, worked out on first use and shared by every filter and the handler."""
    info = request.get("info")
    if info is None:
        info = request["info"] = _info(request)
    return info


# -- write options -----------------------------------------------------------------------

DRY_RUN_VALUES = ('"All"',)
FIELD_VALIDATION_VALUES = ('""', '"Ignore"', '"Strict"', '"Warn"')


def _dry_run_causes(values: list[Any]) -> list[errors.Cause]:
    """``ValidateDryRun`` (query or DeleteOptions): only ``All`` is a value."""
    if all(value == DRY_RUN_ALL for value in values):
        return []
    return [errors.Cause(errors.FIELD_VALUE_NOT_SUPPORTED, f"Unsupported value: {go_bad_value(values)}: supported "
                         f"values: {', '.join(DRY_RUN_VALUES)}", "dryRun")]


def _options_causes(query: Any) -> list[errors.Cause]:
    """What ``ValidateCreateOptions``/``UpdateOptions``/``PatchOptions`` find in every write's query:
    the fieldManager, dryRun and fieldValidation (exactly Ignore, Warn or Strict)."""
    causes = validate_field_manager(query.get("fieldManager", ""), "fieldManager")
    causes += _dry_run_causes(query.getall("dryRun", []))
    value = query.get("fieldValidation", "")
    if value not in ("", "Ignore", "Warn", "Strict"):
        causes.append(errors.Cause(errors.FIELD_VALUE_NOT_SUPPORTED, f"Unsupported value: {go_quote(value)}: "
                                   f"supported values: {', '.join(FIELD_VALIDATION_VALUES)}", "fieldValidation"))
    return causes


def patch_options(request: web.Request, apply: bool) -> WriteOptions:
    """PatchOptions, checked as ``ValidatePatchOptions``: an apply names its fieldManager; ``force``
    is for applies only (even ``force=false`` on another patch is refused)."""
    query = request.rel_url.query
    if apply:
        causes = [] if query.get("fieldManager") else [errors.Cause(
            errors.FIELD_VALUE_REQUIRED, "Required value: is required for apply patch", "fieldManager")]
    else:
        causes = [] if "force" not in query else [errors.Cause(
            errors.FIELD_VALUE_FORBIDDEN, "Forbidden: may not be specified for non-apply patch", "force")]
    opts = write_options(request, "PatchOptions", causes)
    opts.force = bool(query_bool(query, "force"))
    return opts


def write_options(request: web.Request, kind: str, causes: list[errors.Cause] | None = None) -> WriteOptions:
    """A write's options (``kind``: CreateOptions, UpdateOptions, PatchOptions), checked as kube
    checks them (422, every cause at once); a fieldManager left out is named after the User-Agent
    (kube's ``managerOrUserAgent``)."""
    query = request.rel_url.query
    causes = (causes or []) + _options_causes(query)
    if causes:
        raise _invalid_options(kind, causes)
    manager = query.get("fieldManager", "") or manager_from_user_agent(request.headers.get("User-Agent", ""))
    return WriteOptions(dry_run=bool(query.getall("dryRun", [])),
                        field_validation=query.get("fieldValidation") or "Warn", field_manager=manager,
                        user=request.get("user"))


# -- list and watch options --------------------------------------------------------------

def _invalid_options(kind: str, causes: list[errors.Cause]) -> errors.ApiError:
    return errors.invalid(kind, "meta.k8s.io", "", causes)


def list_options(request: web.Request, watch: bool = False,
                 selectable: tuple[str, ...] = DEFAULT_SELECTABLE_FIELDS) -> ListOptions:
    """ListOptions from the query, in kube's order: integers parsed (400), selectors parsed (400),
    the options validated by kube's rules for list and for watch (422), the field selector's fields
    checked (400). The resourceVersion and continue token are storage's to judge."""
    query = request.rel_url.query
    info = request_info(request)
    opts = ListOptions()
    query_int64(query, "timeoutSeconds")
    limit = query_int64(query, "limit")
    opts.limit = max(limit or 0, 0)
    if query.get("labelSelector"):
        opts.label_selector = parse_label_selector(query["labelSelector"])
    if info.field_selector_error is not None:
        raise info.field_selector_error
    opts.continue_token = query.get("continue", "")
    opts.resource_version = query.get("resourceVersion", "")
    opts.resource_version_match = match = query.get("resourceVersionMatch", "")
    send_initial = query.get("sendInitialEvents")
    causes: list[errors.Cause] = []

    def forbid(fld: str, detail: str) -> None:
        causes.append(errors.Cause(errors.FIELD_VALUE_FORBIDDEN, f"Forbidden: {detail}", fld))

    def unsupported(fld: str, value: str, supported: str) -> None:
        causes.append(errors.Cause(errors.FIELD_VALUE_NOT_SUPPORTED,
                                   f"Unsupported value: {go_quote(value)}: supported values: {supported}", fld))
    if watch:
        if send_initial is not None and match != "NotOlderThan":
            forbid("resourceVersionMatch", "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan")
        if match:
            if send_initial is None:
                forbid("resourceVersionMatch",
                       "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided")
            if match != "NotOlderThan":
                unsupported("resourceVersionMatch", match, '"NotOlderThan"')
            if opts.continue_token:
                forbid("resourceVersionMatch", "resourceVersionMatch is forbidden when continue is provided")
    else:
        if match:
            if not opts.resource_version:
                forbid("resourceVersionMatch", "resourceVersionMatch is forbidden unless resourceVersion is provided")
            if opts.continue_token:
                forbid("resourceVersionMatch", "resourceVersionMatch is forbidden when continue is provided")
            if match not in ("Exact", "NotOlderThan"):
                unsupported("resourceVersionMatch", match, '"Exact", "NotOlderThan", ""')
            if match == "Exact" and opts.resource_version == "0":
                forbid("resourceVersionMatch", 'resourceVersionMatch "exact" is forbidden for resourceVersion "0"')
        if send_initial is not None:
            forbid("sendInitialEvents", "sendInitialEvents is forbidden for list")
    if causes:
        raise _invalid_options("ListOptions", causes)
    if info.field_selector is not None:
        info.field_selector.check_supported(selectable)
        opts.field_selector = info.field_selector
    return opts


def timeout_seconds(request: web.Request) -> float | None:
    """A watch's ``timeoutSeconds``, or None for the server's default."""
    seconds = query_int64(request.rel_url.query, "timeoutSeconds")
    return None if seconds is None else float(seconds)


# -- delete options ----------------------------------------------------------------------

PROPAGATION_POLICIES = ("Orphan", "Background", "Foreground")
DELETE_OPTIONS_VERSIONS = ("meta.k8s.io/v1", "meta.k8s.io/v1beta1", "v1")  # registered for DeleteOptions
_DELETE_OPTIONS_FIELDS = {"gracePeriodSeconds": "int64", "propagationPolicy": "v1.DeletionPropagation",
                          "orphanDependents": "bool", "dryRun": "[]string", "preconditions": "v1.Preconditions",
                          "kind": "string", "apiVersion": "string"}


def delete_options_from_body(document: Any) -> DeleteOptions:
    """DeleteOptions from a body's document (syntax already checked), as kube's codec for meta
    types decodes it: the kind found first, then each field in its Go type. The query is not read."""
    find_kind = 'struct { APIVersion string "json:\\"apiVersion,omitempty\\""; Kind string "json:\\"kind,omitempty\\"" }'
    if document is not None and not isinstance(document, dict):
        raise errors.bad_request("couldn't get version/kind; json parse error: " + gojson.type_error(document, find_kind))
    body = document or {}
    for key in ("apiVersion", "kind"):
        if body.get(key) is not None and not isinstance(body[key], str):
            raise errors.bad_request("couldn't get version/kind; json parse error: "
                                     + gojson.type_error(body[key], "string", "." + key))
    api_version = body.get("apiVersion") or "meta.k8s.io/v1"
    kind = body.get("kind") or "DeleteOptions"
    if api_version.count("/") > 1:
        raise errors.bad_request(f"unexpected GroupVersion string: {api_version}")
    if kind != "DeleteOptions" or api_version not in DELETE_OPTIONS_VERSIONS:
        raise errors.bad_request(f'no kind "{kind}" is registered for version "{api_version}" in scheme '
                                 '"pkg/runtime/scheme.go:111"')
    for name, go_type in _DELETE_OPTIONS_FIELDS.items():
        value = body.get(name)
        if value is None:
            continue
        kind_of = {"int64": int | float, "bool": bool, "[]string": list, "v1.Preconditions": dict}.get(go_type, str)
        if not isinstance(value, kind_of) or (go_type == "int64" and isinstance(value, bool)):
            raise errors.bad_request(gojson.type_error(value, go_type, f"DeleteOptions.{name}"))
    options = DeleteOptions(dry_run_values=[v for v in body.get("dryRun") or []])
    preconditions = body.get("preconditions") or {}
    for name, go_type in (("uid", "types.UID"), ("resourceVersion", "string")):
        value = preconditions.get(name)
        if value is not None and not isinstance(value, str):
            raise errors.bad_request(gojson.type_error(value, go_type, f"Preconditions.preconditions.{name}"))
    options.uid = preconditions.get("uid")
    options.resource_version = preconditions.get("resourceVersion")
    options.propagation_policy = body.get("propagationPolicy")
    options.grace_period_seconds = body.get("gracePeriodSeconds")
    return options


def delete_options_from_query(query: Any) -> DeleteOptions:
    """DeleteOptions from the query (a DELETE without a body): integers as Go parses them."""
    return DeleteOptions(dry_run_values=list(query.getall("dryRun", [])),
                         propagation_policy=query.get("propagationPolicy"),
                         grace_period_seconds=query_int64(query, "gracePeriodSeconds"))


def validate_delete_options(options: DeleteOptions) -> DeleteOptions:
    """``ValidateDeleteOptions`` (422, every cause at once)."""
    causes = []
    policy = options.propagation_policy
    if policy is not None and policy not in PROPAGATION_POLICIES:
        causes.append(errors.Cause(errors.FIELD_VALUE_NOT_SUPPORTED, f"Unsupported value: {go_quote(policy)}: "
                                   'supported values: "Foreground", "Background", "Orphan", "nil"',
                                   "propagationPolicy"))
    causes += _dry_run_causes(options.dry_run_values)
    if causes:
        raise _invalid_options("DeleteOptions", causes)
    options.dry_run = bool(options.dry_run_values)
    return options
