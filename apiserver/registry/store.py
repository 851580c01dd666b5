"""Generic REST storage: Kubernetes object semantics on top of :class:`~apiserver.storage.etcd3.Store`.

What every resource shares lives here (ObjectMeta system fields, decoding and
fieldValidation, preconditions, finalizers and graceful deletion, dry-run, list
paging and watch); what is particular to a resource comes from its
:class:`~apiserver.registry.rest.Strategy`.
"""

from __future__ import annotations

import base64
import binascii
import json
import posixpath
import re
import secrets
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from apiserver.endpoints import patch
from apiserver.endpoints.negotiation import MAX_NESTING_DEPTH, check_nesting, json_copy, now_rfc3339
from apiserver.machinery import errors
from apiserver.machinery import validation as names
from apiserver.machinery.selectors import (
    FieldSelector,
    LabelSelector,
    parse_field_selector,
    parse_label_selector,
)
from apiserver.registry.admission import Admission
from apiserver.registry.rest import Strategy
from apiserver.storage.cacher import Entry, Event, Watcher
from apiserver.storage.etcd3 import Obj, Store

FIELD_SELECTORS = ("metadata.name", "metadata.namespace")
DRY_RUN_ALL = "All"
CONTINUE_VERSION = "meta.k8s.io/v1"


@dataclass
class WriteOptions:
    dry_run: bool = False
    field_validation: str = "Warn"  # Strict | Warn | Ignore
    field_manager: str = ""


@dataclass
class Result:
    obj: Obj
    warnings: list[str] = field(default_factory=list)
    created: bool = False


@dataclass
class ListOptions:
    label_selector: LabelSelector | None = None
    field_selector: FieldSelector | None = None
    limit: int = 0
    continue_token: str = ""
    resource_version: str = ""
    resource_version_match: str = ""

    def predicate(self) -> Callable[[Entry], bool]:
        labels = self.label_selector
        fields = self.field_selector
        if (labels is None or labels.empty) and fields is None:
            return lambda _e: True

        def matches(entry: Entry) -> bool:
            if labels is not None and not labels.matches(entry.labels):
                return False
            if fields is not None and not fields.matches(
                    {"metadata.name": entry.name, "metadata.namespace": entry.namespace}):
                return False
            return True
        return matches

    @property
    def filtered(self) -> bool:
        return (self.label_selector is not None and not self.label_selector.empty) or self.field_selector is not None


def parse_list_options(query: dict[str, str], watch: bool = False) -> ListOptions:
    """ListOptions from a query, validated by kube's rules for list and for watch."""
    opts = ListOptions()
    if query.get("labelSelector"):
        opts.label_selector = parse_label_selector(query["labelSelector"])
    if query.get("fieldSelector"):
        opts.field_selector = parse_field_selector(query["fieldSelector"], FIELD_SELECTORS)
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
        raise errors.ApiError(422, "Invalid", 'ListOptions.meta.k8s.io "" is invalid: ' + ", ".join(
            f"{c.field}: {c.message}" for c in causes), kind="ListOptions", group="meta.k8s.io", causes=causes)
    if opts.continue_token and opts.resource_version not in ("", "0"):
        raise errors.bad_request("specifying resource version is not allowed when using continue")
    if opts.resource_version and opts.resource_version != "0":
        parse_rv(opts.resource_version)
    return opts


MAX_INT64 = 2**63 - 1


def parse_int64(value: str) -> int | None:
    """Go's ``strconv.ParseInt(value, 10, 64)``: ASCII digits with an optional sign, in int64 range."""
    if not re.fullmatch(r"[+-]?[0-9]+", value):
        return None
    number = int(value)
    return number if -MAX_INT64 - 1 <= number <= MAX_INT64 else None


def parse_rv(value: str) -> int:
    """A resourceVersion is an etcd revision: a non-negative int64 in decimal."""
    if not re.fullmatch(r"[0-9]+", value) or int(value) > MAX_INT64:
        raise errors.bad_request(f'invalid resource version: "{value}"')
    return int(value)


def encode_continue(rv: int, start: str) -> str:
    token = orjson.dumps({"v": CONTINUE_VERSION, "rv": rv, "start": start})
    return base64.urlsafe_b64encode(token).decode().rstrip("=")


def decode_continue(token: str) -> tuple[int, str]:
    """(revision, start key relative to the list's prefix); 400 for anything forged."""
    try:
        padded = token + "=" * (-len(token) % 4)
        data = orjson.loads(base64.urlsafe_b64decode(padded))
        if not isinstance(data, dict) or data.get("v") != CONTINUE_VERSION:
            raise ValueError("unsupported version")
        rv, start = data["rv"], data["start"]
        if type(rv) is not int or not isinstance(start, str):
            raise ValueError("malformed")
    except (ValueError, KeyError, TypeError, binascii.Error, orjson.JSONDecodeError):
        raise errors.bad_request("continue key is not valid: incorrect encoded start resourceVersion") from None
    key = start.rstrip("\0")
    if not 0 < rv <= MAX_INT64 or not key or key.startswith("/") or posixpath.normpath(key) != key \
            or ".." in key.split("/"):
        raise errors.bad_request(f"continue key is not valid: {start!r}")
    return rv, start


def generate_name(base: str) -> str:
    """kube's name generator: the prefix (at most 58 characters) and five random characters."""
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    return base[:58] + "".join(secrets.choice(alphabet) for _ in range(5))


def load_body(body: bytes) -> Any:
    """Decode a JSON (or YAML) request body; 400 on anything malformed."""
    if not body:
        raise errors.bad_request("the request body is empty")
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        # What Go's decoder takes and orjson does not: integers beyond 64 bits (validation
        # answers for them) and unpaired surrogate escapes (decoded as U+FFFD, as Go does).
        # NaN and Infinity are not JSON: refused, as Go does.
        try:
            document = json.loads(body, parse_constant=_not_json)
        except RecursionError:
            raise errors.bad_request("the body of the request could not be decoded as JSON: exceeded max depth "
                                     f"of {MAX_NESTING_DEPTH}") from None
        except (ValueError, UnicodeDecodeError) as e:
            raise errors.bad_request(f"the body of the request could not be decoded as JSON: {e}") from None
        check_nesting(document)
        return _replace_surrogates(document)
    check_nesting(document, raw=body)
    return document


def _not_json(constant: str) -> Any:
    raise ValueError(f"invalid character '{constant[0]}' looking for beginning of value")


def _replace_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        return re.sub("[\ud800-\udfff]", "\ufffd", value)
    if isinstance(value, list):
        return [_replace_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {_replace_surrogates(k): _replace_surrogates(v) for k, v in value.items()}
    return value


def find_duplicate_fields(body: bytes) -> list[str]:
    """Duplicate keys in a JSON body (orjson silently keeps the last one)."""
    dups: list[str] = []

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                dups.append(k)
            seen.add(k)
        return dict(pairs)
    try:
        json.loads(body, object_pairs_hook=hook)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return []
    return dups


class Registry:
    """Kubernetes semantics for one resource."""

    def __init__(self, store: Store, strategy: Strategy, admission: Sequence[Admission] = ()) -> None:
        self.store = store
        self.strategy = strategy
        self.info = strategy.info
        self.admission = list(admission)

    # -- helpers ---------------------------------------------------------------------

    def _invalid(self, name: str, causes: list[errors.Cause]) -> errors.ApiError:
        return errors.invalid(self.info.kind, self.info.group, name, causes)

    def check_type(self, obj: Any) -> Obj:
        """The body must be this kind in this group-version (kube answers 400 otherwise)."""
        if not isinstance(obj, dict):
            raise errors.bad_request("the body of the request must be a JSON object")
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if not api_version or not kind:
            raise errors.bad_request("Object 'Kind' is missing in the request body" if not kind
                                     else "Object 'apiVersion' is missing in the request body")
        if api_version != self.info.group_version or kind != self.info.kind:
            raise errors.bad_request(
                f"the API version in the data ({api_version}) does not match the expected API version "
                f"({self.info.group_version})" if api_version != self.info.group_version else
                f"the kind in the data ({kind}) does not match the expected kind ({self.info.kind})")
        meta = obj.get("metadata")
        if meta is None:  # absent or null (a patch may remove it)
            obj["metadata"] = meta = {}
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be an object")
        return obj

    def _field_validation(self, obj: Obj, opts: WriteOptions, body: bytes | None) -> list[str]:
        """Apply fieldValidation: Strict → 400, Warn → warnings; unknown fields are pruned."""
        unknown = self.strategy.prune(obj)
        if opts.field_validation == "Ignore":
            return []
        problems = [f'unknown field "{p}"' for p in unknown]
        if body is not None:
            problems += [f'duplicate field "{d}"' for d in find_duplicate_fields(body)]
        if problems and opts.field_validation == "Strict":
            raise errors.bad_request("strict decoding error: " + ", ".join(problems))
        return problems

    def _check_namespace(self, obj: Obj, namespace: str) -> None:
        meta = obj["metadata"]
        body_ns = meta.get("namespace")
        if body_ns and body_ns != namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request")
        meta["namespace"] = namespace

    def _validate_create(self, obj: Obj) -> None:
        causes = names.validate_object_meta(obj["metadata"], namespaced=True) + self.strategy.validate(obj)
        if causes:
            name = obj["metadata"].get("name") or obj["metadata"].get("generateName") or ""
            raise self._invalid(name if isinstance(name, str) else "", causes)

    # -- reads -----------------------------------------------------------------------

    async def get(self, namespace: str, name: str, resource_version: str = "") -> Obj:
        """A private copy of the object: the caller may change it (the cache's copy is shared)."""
        return orjson.loads((await self.get_entry(namespace, name, resource_version)).json())

    async def get_entry(self, namespace: str, name: str, resource_version: str = "") -> Entry:
        """One object: ``resourceVersion=0`` any cached state, otherwise the current one.

        The current state comes from the watch cache once it has caught up with etcd's revision
        read after the request arrived (linearizable, as a quorum read of etcd is); from etcd
        when the cache cannot catch up in time.
        """
        cache = self.store.cache
        if resource_version != "0":
            if not cache.ready:
                return await self.store.read(namespace, name)
            try:
                await cache.wait_consistent()
            except errors.ApiError as e:
                if e.code != 504:
                    raise
                return await self.store.read(namespace, name)
        entry = cache.get(namespace, name)
        if entry is None:
            raise errors.not_found(self.info.resource, self.info.group, name)
        return entry

    async def list(self, namespace: str | None, opts: ListOptions) -> tuple[list[Entry], dict[str, Any]]:
        """Objects and list metadata (resourceVersion, continue, remainingItemCount)."""
        cache = self.store.cache
        predicate = opts.predicate()
        if opts.continue_token:
            rv, start = decode_continue(opts.continue_token)
            after = self.store.layout.namespace_prefix(namespace) + start.rstrip("\0")
            if cache.ready and rv <= cache.rv and (snapshot := cache.entries_at(rv, namespace, after)) is not None:
                return self._page(snapshot, rv, namespace, opts, predicate)
            try:
                return await self._list_from_etcd(namespace, opts, predicate, rv, after)
            except errors.ApiError as e:
                if e.reason != "Timeout":
                    raise
                # A revision etcd has not reached yet: no server issued this token.
                raise errors.bad_request(f"continue key is not valid: resource version {rv} is in the future") \
                    from None
        if opts.resource_version_match == "Exact":
            rv = parse_rv(opts.resource_version)
            return await self._list_from_etcd(namespace, opts, predicate, rv, None)
        if opts.resource_version == "":
            try:
                await cache.wait_consistent()
            except errors.ApiError as e:
                if e.code != 504:
                    raise
                # As kube-apiserver does: what the cache cannot serve consistently in time, etcd does.
                return await self._list_from_etcd(namespace, opts, predicate, 0, None)
        elif opts.resource_version != "0":
            await cache.wait_fresh(parse_rv(opts.resource_version))
        elif not cache.ready:
            raise errors.service_unavailable("the watch cache is initializing")
        pinned = opts.label_selector.indexable() if opts.label_selector is not None else None
        if pinned is not None:
            entries: Iterable[Entry] = cache.entries_labelled(namespace, pinned.key, pinned.values)
        else:
            entries = cache.sorted_entries(namespace)
        return self._page(entries, cache.rv, namespace, opts, predicate)

    def _page(self, entries: Iterable[Entry], rv: int, namespace: str | None, opts: ListOptions,
              predicate: Callable[[Entry], bool]) -> tuple[list[Entry], dict[str, Any]]:
        """Up to ``limit`` matching entries of a snapshot at ``rv``, with what a next page needs."""
        items: list[Entry] = []
        remaining = 0
        last_key = ""
        more = False
        for entry in entries:
            if not predicate(entry):
                continue
            if opts.limit and len(items) >= opts.limit:
                more = True
                if opts.filtered:
                    break
                remaining += 1
                continue
            items.append(entry)
            last_key = entry.key
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if more:
            meta["continue"] = self._continue_for(namespace, rv, last_key)
            if not opts.filtered:
                meta["remainingItemCount"] = remaining
        return items, meta

    def _continue_for(self, namespace: str | None, rv: int, last_key: str) -> str:
        prefix = self.store.layout.namespace_prefix(namespace)
        return encode_continue(rv, last_key[len(prefix):] + "\0")

    async def _list_from_etcd(self, namespace: str | None, opts: ListOptions, predicate: Callable[[Entry], bool],
                              rv: int, after_key: str | None) -> tuple[list[Entry], dict[str, Any]]:
        """A list at an exact revision, read page by page from etcd until ``limit`` match."""
        items: list[Entry] = []
        last_key = after_key
        while True:
            need = opts.limit - len(items) if opts.limit else 0
            page = max(need, 500) if need and opts.filtered else need
            entries, more, rv = await self.store.list_snapshot(namespace, rv, last_key, page)
            for i, entry in enumerate(entries):
                last_key = entry.key
                if predicate(entry):
                    items.append(entry)
                if opts.limit and len(items) >= opts.limit:
                    more = more or i < len(entries) - 1
                    break
            if not more or not entries or (opts.limit and len(items) >= opts.limit):
                break
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if more and last_key:
            meta["continue"] = self._continue_for(namespace, rv, last_key)
        return items, meta

    def watch(self, namespace: str | None, opts: ListOptions, bookmarks: bool,
              send_initial_events: bool | None) -> tuple[Watcher, list[Event], int | None]:
        """Register a watcher. Returns it, its backlog, and the revision of the initial
        state when the client asked for initial events (else None)."""
        cache = self.store.cache
        predicate = opts.predicate()
        rv_text = opts.resource_version
        if send_initial_events or (send_initial_events is None and rv_text in ("", "0")):
            watcher, backlog, rv = cache.watch_with_state(namespace, predicate, bookmarks)
            return watcher, backlog, rv
        if rv_text in ("", "0"):
            watcher, backlog = cache.watch_from(cache.rv, namespace, predicate, bookmarks)
            return watcher, backlog, None
        watcher, backlog = cache.watch_from(parse_rv(rv_text), namespace, predicate, bookmarks)
        return watcher, backlog, None

    # -- writes ----------------------------------------------------------------------

    async def create(self, namespace: str, body: bytes, opts: WriteOptions) -> Result:
        obj = self.check_type(load_body(body))
        warnings = self._field_validation(obj, opts, body)
        self._check_namespace(obj, namespace)
        meta = obj["metadata"]
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = generate_name(str(meta["generateName"]))
        for system_field in ("uid", "resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds",
                             "selfLink", "managedFields"):
            meta.pop(system_field, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        self.strategy.prepare_for_create(obj)
        self._validate_create(obj)
        for plugin in self.admission:
            await plugin.admit_create(self.info, obj)
        if opts.dry_run:
            if self.store.cache.get(namespace, meta["name"]) is not None:
                raise errors.already_exists(self.info.resource, self.info.group, meta["name"])
            return Result(obj, warnings, created=True)
        return Result(await self.store.create(obj), warnings, created=True)

    async def update(self, namespace: str, name: str, body: bytes, opts: WriteOptions,
                     subresource: str = "") -> Result:
        obj = self.check_type(load_body(body))
        warnings = self._field_validation(obj, opts, body)
        self._check_namespace(obj, namespace)
        body_name = obj["metadata"].get("name")
        if body_name and body_name != name:
            raise errors.bad_request(
                f"the name of the object ({body_name}) does not match the name on the URL ({name})")
        obj["metadata"]["name"] = name
        rv = obj["metadata"].get("resourceVersion")
        if not rv:
            raise self._invalid(name, [errors.Cause(
                errors.FIELD_VALUE_INVALID,
                "Invalid value: 0x0: must be specified for an update", "metadata.resourceVersion")])

        async def replace(current: Obj) -> Obj:
            return self._prepare_update(json_copy(obj), current, subresource)
        return await self._write_update(namespace, name, replace, opts, warnings, expected_rv=str(rv))

    async def patch(self, namespace: str, name: str, content_type: str, body: bytes, opts: WriteOptions,
                    subresource: str = "") -> Result:
        media = content_type.split(";")[0].strip().lower()
        if media not in patch.ACCEPTED:
            raise errors.unsupported_media_type(media, list(patch.ACCEPTED))
        warnings: list[str] = []

        async def apply_patch(current: Obj) -> Obj:
            patched = patch.apply(media, current, body)
            self.check_type(patched)
            warnings[:] = self._field_validation(patched, opts, None)
            meta = patched["metadata"]
            if meta.get("name", name) != name:
                raise errors.bad_request(
                    f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})")
            if meta.get("namespace", namespace) != namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request")
            meta["name"], meta["namespace"] = name, namespace
            if str(meta.get("resourceVersion", "")) != current["metadata"]["resourceVersion"]:
                raise errors.conflict(self.info.resource, self.info.group, name, errors.CONFLICT_MODIFIED)
            return self._prepare_update(patched, current, subresource)
        return await self._write_update(namespace, name, apply_patch, opts, warnings)

    def _prepare_update(self, new: Obj, old: Obj, subresource: str) -> Obj:
        """System fields restored from the stored object, then the strategy's rules, then validation."""
        if subresource == "status":
            new = self.strategy.prepare_for_status_update(new, old)
            causes = self.strategy.validate_status(new)
        else:
            meta, old_meta = new["metadata"], old["metadata"]
            if meta.get("uid") and meta["uid"] != old_meta.get("uid"):
                raise self._invalid(old_meta["name"], [errors.Cause(
                    errors.FIELD_VALUE_INVALID, f'Invalid value: "{meta["uid"]}": field is immutable',
                    "metadata.uid")])
            for system_field in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                                 "generation"):
                if system_field in old_meta:
                    meta[system_field] = old_meta[system_field]
                else:
                    meta.pop(system_field, None)
            meta.pop("selfLink", None)
            meta.pop("managedFields", None)
            self.strategy.prepare_for_update(new, old)
            causes = names.validate_object_meta(meta, namespaced=True) + self.strategy.validate_update(new, old)
            if old_meta.get("deletionTimestamp"):
                added = set(meta.get("finalizers") or []) - set(old_meta.get("finalizers") or [])
                if added:
                    causes.append(errors.Cause(
                        errors.FIELD_VALUE_FORBIDDEN,
                        f"Forbidden: no new finalizers can be added if the object is being deleted, "
                        f"found new finalizers {json.dumps(sorted(added))}", "metadata.finalizers"))
        if causes:
            raise self._invalid(old["metadata"]["name"], causes)
        return new

    async def _write_update(self, namespace: str, name: str, fn: Callable[[Obj], Any], opts: WriteOptions,
                            warnings: list[str], expected_rv: str | None = None) -> Result:
        if opts.dry_run:
            current = await self.store.get(namespace, name)
            if expected_rv is not None and expected_rv != current["metadata"]["resourceVersion"]:
                raise errors.conflict(self.info.resource, self.info.group, name, errors.CONFLICT_MODIFIED)
            return Result(await fn(json_copy(current)), warnings)
        _, new = await self.store.guaranteed_update(namespace, name, fn, expected_rv=expected_rv)
        return Result(new, warnings)

    async def delete(self, namespace: str, name: str, options: dict[str, Any], opts: WriteOptions) -> tuple[Obj, bool]:
        """Delete or mark for deletion. Returns (object, removed-now)."""
        preconditions = options.get("preconditions") or {}
        _check_delete_options(options)

        def check(current: Obj) -> None:
            meta = current["metadata"]
            uid, rv = preconditions.get("uid"), preconditions.get("resourceVersion")
            if uid and uid != meta.get("uid"):
                raise errors.conflict(self.info.resource, self.info.group, name,
                                      f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                                      f"{meta.get('uid')}")
            if rv and rv != meta.get("resourceVersion"):
                raise errors.conflict(self.info.resource, self.info.group, name,
                                      f"Precondition failed: ResourceVersion in precondition: {rv}, "
                                      f"ResourceVersion in object meta: {meta.get('resourceVersion')}")

        current = await self.store.get(namespace, name)
        check(current)
        if current["metadata"].get("finalizers"):
            if current["metadata"].get("deletionTimestamp"):
                return current, False

            async def mark(obj: Obj) -> Obj:
                check(obj)
                meta = obj["metadata"]
                if not meta.get("finalizers") or meta.get("deletionTimestamp"):
                    return obj
                meta["deletionTimestamp"] = now_rfc3339()
                meta["deletionGracePeriodSeconds"] = 0
                meta["generation"] = int(meta.get("generation", 1)) + 1
                return obj
            if opts.dry_run:
                return await mark(json_copy(current)), False
            _, new = await self.store.guaranteed_update(namespace, name, mark)
            if new["metadata"].get("deletionTimestamp"):
                return new, False
        if opts.dry_run:
            return current, True
        return await self.store.delete(namespace, name, precondition=check), True

    async def delete_collection(self, namespace: str | None, list_opts: ListOptions, options: dict[str, Any],
                                opts: WriteOptions) -> list[Obj]:
        entries, _ = await self.list(namespace, ListOptions(list_opts.label_selector, list_opts.field_selector))
        out = []
        for entry in entries:
            meta = entry.obj["metadata"]
            try:
                obj, _ = await self.delete(meta["namespace"], meta["name"], options, opts)
            except errors.ApiError as e:
                if e.code == 404:
                    continue
                raise
            out.append(obj)
        return out


def _check_delete_options(options: dict[str, Any]) -> None:
    policy = options.get("propagationPolicy")
    if policy is not None and policy not in ("Orphan", "Background", "Foreground"):
        cause = errors.Cause(errors.FIELD_VALUE_NOT_SUPPORTED,
                             f'Unsupported value: "{policy}": supported values: "Foreground", "Background", '
                             f'"Orphan"', "propagationPolicy")
        raise errors.ApiError(422, "Invalid", f'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: '
                              f'{cause.message}', kind="DeleteOptions", group="meta.k8s.io", causes=[cause])
    grace = options.get("gracePeriodSeconds")
    if grace is not None and (not isinstance(grace, int) or grace < 0):
        raise errors.bad_request("gracePeriodSeconds must be a non-negative integer")

