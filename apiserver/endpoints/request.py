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

from apiserver.apis.resource import VIRTUALCLUSTERS
from apiserver.auth.authn import Attributes
from apiserver.machinery import errors
from apiserver.machinery.golang import parse_int64, parse_uint64
from apiserver.machinery.selectors import (
    DEFAULT_SELECTABLE_FIELDS,
    FieldSelector,
    parse_field_selector,
    parse_label_selector,
)
from apiserver.machinery.validation import validate_field_manager
from apiserver.registry.fieldmanager import manager_from_user_agent
from apiserver.registry.rest import DeleteOptions, ListOptions, WriteOptions

__all__ = ["FIELD_VALIDATION", "RequestInfo", "bool_param", "delete_options", "dry_run", "field_validation",
           "list_options", "request_info", "timeout_seconds", "write_options"]

MUTATING_METHODS = frozenset(("POST", "PUT", "PATCH", "DELETE"))
FIELD_VALIDATION = {"strict": "Strict", "warn": "Warn", "ignore": "Ignore"}
DRY_RUN_ALL = "All"
RESOURCE_ROUTE_PREFIX = "vc."  # the names the server gives the routes of the resource and its subresources


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


def bool_param(query: Any, name: str) -> bool | None:
    """A boolean query parameter; None when absent or empty."""
    value = query.get(name)
    if value is None or value == "":
        return None
    if value in ("true", "1", "True"):
        return True
    if value in ("false", "0", "False"):
        return False
    raise errors.bad_request(f'invalid value for {name}: "{value}": must be a boolean')


def _info(request: web.Request) -> RequestInfo:
    route = request.match_info.route
    route_name = route.name if route is not None else None
    path, method = request.path, request.method
    mutating = method in MUTATING_METHODS
    if route_name is None or not route_name.startswith(RESOURCE_ROUTE_PREFIX):
        verb = {"GET": "get", "HEAD": "get", "POST": "post", "PUT": "put", "PATCH": "patch",
                "DELETE": "delete"}.get(method, method.lower())
        return RequestInfo(Attributes(verb=verb, path=path), watch=False, mutating=mutating)
    info = VIRTUALCLUSTERS
    match = request.match_info
    query = request.rel_url.query
    item = "name" in match
    watch, watch_error = False, None
    if method in ("GET", "HEAD"):
        try:
            watch = bool(bool_param(query, "watch"))
        except errors.ApiError as e:
            watch_error = e
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

def dry_run(values: list[Any]) -> bool:
    """The one rule for ``dryRun`` (query or DeleteOptions): only ``All`` is a value."""
    for value in values:
        if value != DRY_RUN_ALL:
            raise errors.bad_request(f'dryRun: Unsupported value: "{value}": supported values: "All"')
    return bool(values)


def field_validation(query: Any) -> str:
    value = query.get("fieldValidation") or "Warn"
    normalized = FIELD_VALIDATION.get(value.lower())
    if normalized is None:
        raise errors.bad_request(f"fieldValidation must be one of Ignore, Warn, Strict: got {value}")
    return normalized


_BOOLS = {"1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True,
          "0": False, "f": False, "F": False, "FALSE": False, "false": False, "False": False}


def patch_options(request: web.Request, apply: bool) -> WriteOptions:
    """PatchOptions, checked as ``ValidatePatchOptions``: an apply names its fieldManager; ``force``
    is for applies only (even ``force=false`` on another patch is refused)."""
    query = request.rel_url.query
    force = query.get("force")
    parsed = False
    if force is not None:
        if force not in _BOOLS:
            raise errors.bad_request(f'strconv.ParseBool: parsing "{force}": invalid syntax')
        parsed = _BOOLS[force]
    if apply:
        causes = [] if query.get("fieldManager") else [errors.Cause(
            errors.FIELD_VALUE_REQUIRED, "Required value: is required for apply patch", "fieldManager")]
    else:
        causes = [] if force is None else [errors.Cause(
            errors.FIELD_VALUE_FORBIDDEN, "Forbidden: may not be specified for non-apply patch", "force")]
    if causes:
        raise _invalid_options("PatchOptions", causes)
    opts = write_options(request, "PatchOptions")
    opts.force = parsed
    return opts


def write_options(request: web.Request, kind: str = "") -> WriteOptions:
    """A write's options. Given the options ``kind`` (CreateOptions, UpdateOptions, PatchOptions)
    the fieldManager is checked as kube checks it (422), and when absent the manager is named after
    the User-Agent (kube's ``managerOrUserAgent``)."""
    query = request.rel_url.query
    opts = WriteOptions(dry_run=dry_run(query.getall("dryRun", [])), field_validation=field_validation(query),
                        field_manager=query.get("fieldManager", ""))
    if kind:
        causes = validate_field_manager(opts.field_manager, "fieldManager")
        if causes:
            raise _invalid_options(kind, causes)
        opts.field_manager = opts.field_manager or manager_from_user_agent(request.headers.get("User-Agent", ""))
    return opts


# -- list and watch options --------------------------------------------------------------

def _invalid_options(kind: str, causes: list[errors.Cause]) -> errors.ApiError:
    return errors.ApiError(422, "Invalid", f'{kind}.meta.k8s.io "" is invalid: ' + ", ".join(
        f"{c.field}: {c.message}" for c in causes), kind=kind, group="meta.k8s.io", causes=causes)


def list_options(request: web.Request, watch: bool = False,
                 selectable: tuple[str, ...] = DEFAULT_SELECTABLE_FIELDS) -> ListOptions:
    """ListOptions from the query, validated by kube's rules for list and for watch."""
    query = request.rel_url.query
    info = request_info(request)
    opts = ListOptions()
    if query.get("labelSelector"):
        opts.label_selector = parse_label_selector(query["labelSelector"])
    if info.field_selector_error is not None:
        raise info.field_selector_error
    if info.field_selector is not None:
        info.field_selector.check_supported(selectable)
        opts.field_selector = info.field_selector
    if query.get("limit"):
        limit = parse_int64(query["limit"])
        if limit is None:
            raise errors.bad_request(f'invalid limit "{query["limit"]}": must be an integer')
        opts.limit = max(limit, 0)
    opts.continue_token = query.get("continue", "")
    opts.resource_version = query.get("resourceVersion", "")
    opts.resource_version_match = match = query.get("resourceVersionMatch", "")
    send_initial = query.get("sendInitialEvents")
    causes: list[errors.Cause] = []

    def forbid(fld: str, detail: str) -> None:
        causes.append(errors.Cause(errors.FIELD_VALUE_FORBIDDEN, f"Forbidden: {detail}", fld))

    def unsupported(fld: str, value: str, supported: str) -> None:
        causes.append(errors.Cause(errors.FIELD_VALUE_NOT_SUPPORTED,
                                   f'Unsupported value: "{value}": supported values: {supported}', fld))
    if watch:
        if send_initial is not None and match != "NotOlderThan":
            forbid("resourceVersionMatch", "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan")
        if match:
            if send_initial is None:
                forbid("resourceVersionMatch",
                       "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided")
            if match != "NotOlderThan":
                unsupported("resourceVersionMatch", match, '"NotOlderThan"')
        if bool_param(query, "sendInitialEvents") and not bool_param(query, "allowWatchBookmarks"):
            forbid("allowWatchBookmarks", "sendInitialEvents requires setting allowWatchBookmarks to true")
    else:
        if match:
            if not opts.resource_version:
                forbid("resourceVersionMatch", "resourceVersionMatch is forbidden unless resourceVersion is provided")
            if opts.continue_token:
                forbid("resourceVersionMatch", "resourceVersionMatch is forbidden when continue is provided")
            if match not in ("Exact", "NotOlderThan"):
                unsupported("resourceVersionMatch", match, '"Exact", "NotOlderThan"')
            if match == "Exact" and opts.resource_version == "0":
                forbid("resourceVersionMatch", 'resourceVersionMatch "exact" is forbidden for resourceVersion "0"')
        if send_initial is not None:
            forbid("sendInitialEvents", "sendInitialEvents is forbidden for list")
    if causes:
        raise _invalid_options("ListOptions", causes)
    if opts.continue_token and opts.resource_version not in ("", "0"):
        raise errors.bad_request("specifying resource version is not allowed when using continue")
    if opts.resource_version and opts.resource_version != "0" and parse_uint64(opts.resource_version) is None:
        raise errors.bad_request(f'invalid resource version: "{opts.resource_version}"')
    return opts


def timeout_seconds(request: web.Request) -> float | None:
    """A watch's ``timeoutSeconds``, or None for the server's default."""
    raw = request.rel_url.query.get("timeoutSeconds")
    if not raw:
        return None
    seconds = parse_int64(raw)
    if seconds is None:
        raise errors.bad_request("timeoutSeconds must be an integer")
    return float(seconds)


# -- delete options ----------------------------------------------------------------------

PROPAGATION_POLICIES = ("Orphan", "Background", "Foreground")


def delete_options(body: Any, query: Any) -> DeleteOptions:
    """DeleteOptions from a decoded body (or None) and the query, which wins, as in kube."""
    options = DeleteOptions()
    raw: dict[str, Any] = {}
    if body is not None:
        if not isinstance(body, dict):
            raise errors.bad_request("DeleteOptions must be a JSON object")
        if body.get("kind") not in (None, "DeleteOptions"):
            raise errors.bad_request(f'expected DeleteOptions, got kind "{body.get("kind")}"')
        for name, kind, go_type in (("dryRun", list, "[]string"), ("preconditions", dict, "Preconditions")):
            if body.get(name) is not None and not isinstance(body[name], kind):
                raise errors.bad_request(f"json: cannot unmarshal {type(body[name]).__name__} into Go struct "
                                         f"field DeleteOptions.{name} of type {go_type}")
        raw = body
        options.dry_run = dry_run(body.get("dryRun") or [])
        preconditions = body.get("preconditions") or {}
        options.uid = preconditions.get("uid")
        options.resource_version = preconditions.get("resourceVersion")
    policy = query["propagationPolicy"] if "propagationPolicy" in query else raw.get("propagationPolicy")
    if policy is not None and policy not in PROPAGATION_POLICIES:
        cause = errors.Cause(errors.FIELD_VALUE_NOT_SUPPORTED,
                             f'Unsupported value: "{policy}": supported values: "Foreground", "Background", '
                             f'"Orphan"', "propagationPolicy")
        raise _invalid_options("DeleteOptions", [cause])
    options.propagation_policy = policy
    grace: Any = raw.get("gracePeriodSeconds")
    if "gracePeriodSeconds" in query:
        grace = parse_int64(query["gracePeriodSeconds"])
        if grace is None:
            raise errors.bad_request("gracePeriodSeconds must be an integer")
    if grace is not None and (not isinstance(grace, int) or isinstance(grace, bool) or grace < 0):
        raise errors.bad_request("gracePeriodSeconds must be a non-negative integer")
    options.grace_period_seconds = grace
    return options
