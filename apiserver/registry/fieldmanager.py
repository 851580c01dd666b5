"""``metadata.managedFields`` kept up to date on every non-apply write, as kube-apiserver keeps them
for a custom resource (k8s.io/apimachinery ``pkg/util/managedfields/internal``: ``fieldmanager.go``,
``skipnonapplied.go``, ``capmanagers.go``, ``buildmanagerinfo.go``, ``managedfieldsupdater.go``,
``stripmeta.go``, ``managedfields.go``; sigs.k8s.io/structured-merge-diff ``merge/update.go``).

A non-apply write (create, update, patch, status write) is recorded as an ``Update`` entry of its manager:

* the base is the request's ``managedFields`` when they decode and are not empty (that is how
  clients rename, fold and reset entries), ``[]`` or ``[{}]`` means none, anything else the live
  object's; a status write always starts from the live object's;
* an update of an object that has no entries stays untracked (until an apply); a create is tracked;
* every entry loses the fields this write changed, added or removed; the manager's entry
  (manager, ``Update``, apiVersion, subresource) gains what it changed or added, minus the fields
  no one owns (``apiVersion``, ``kind``, ``metadata.name``, ...) and what the endpoint may not
  write (``status`` on the main resource; ``spec`` on ``/status``), and its
  ``time`` becomes now — only if it gained something, so a write that changes nothing touches no
  entry;
* empty entries are dropped; beyond ten Update entries the oldest are merged into an
  ``ancient-changes`` entry per apiVersion;
* entries are sorted (Apply first, then by time, manager, apiVersion, subresource).

A server-side apply (:meth:`FieldManager.apply`, ``merge/update.go Updater.Apply``) merges the
configuration into the live object (or an empty one: create-on-apply) by the schema's list and map
types; an object with no entries is first owned by ``before-first-apply``; the applier's ``Apply``
entry becomes the configuration's field set; what it applied before, applies no more and no other
manager owns is removed; fields other managers own that the apply changes are conflicts (409, one
``FieldManagerConflict`` cause per field) unless ``force`` takes them over; the entry's time moves
only when the object changes.

The pure rules live here; :mod:`apiserver.registry.store` calls :meth:`FieldManager.update` on the
decoded object before the strategy prepares it, as kube's handlers call ``UpdateNoErrors``, and
:meth:`FieldManager.apply` with the configuration and manager of an apply patch.
"""

from __future__ import annotations

import copy
import datetime as dt
import functools
import json
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

import orjson

from apiserver.machinery import errors
from apiserver.machinery.fieldpath import (
    FieldsV1Error,
    Path,
    Type,
    TypingError,
    compare,
    from_fields_v1,
    go_json,
    iteration_order,
    merge,
    path_string,
    prune,
    set_of,
    to_fields_v1,
)
from apiserver.machinery.timefmt import parse_rfc3339, rfc3339
from apiserver.machinery.validation import FIELD_MANAGER_MAX_LENGTH

__all__ = ["ANCIENT_CHANGES", "MAX_UPDATE_MANAGERS", "FieldManager", "ManagedEntry", "decode_managed_fields",
           "encode_managed_fields", "manager_from_user_agent", "timestamps_only_changed"]

APPLY, UPDATE = "Apply", "Update"
FIELDS_V1 = "FieldsV1"
MAX_UPDATE_MANAGERS = 10  # DefaultMaxUpdateManagers
ANCIENT_CHANGES = "ancient-changes"
BEFORE_FIRST_APPLY = "before-first-apply"
KUBECTL = "kubectl"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
TOTAL_ANNOTATION_SIZE_LIMIT = 256 * 1024
UNKNOWN_MANAGER = "unknown"

# Paths no manager ever owns (stripmeta.go).
STRIPPED: frozenset[Path] = frozenset({
    ("f:apiVersion",), ("f:kind",), ("f:metadata",),
    *(("f:metadata", f"f:{name}") for name in ("name", "namespace", "creationTimestamp", "selfLink", "uid",
                                                "clusterName", "generation", "managedFields", "resourceVersion")),
})

# What each endpoint may not write, so never records (the CRD strategies' GetResetFields, as they act:
# kube-apiserver serving the CRD records metadata fields written through /status, though its strategy
# then keeps the stored metadata; the differential test shows both).
RESET_FIELDS: dict[str, tuple[Path, ...]] = {
    "": (("f:status",),),
    "status": (("f:spec",),),
}


@dataclass
class ManagedEntry:
    """One decoded entry: its identity, its field set and its time (``None`` when it has none)."""

    manager: str
    operation: str
    api_version: str
    subresource: str = ""
    time: dt.datetime | None = None
    paths: AbstractSet[Path] = field(default_factory=frozenset)

    @property
    def identity(self) -> str:
        """``BuildManagerIdentifier``: the entry's JSON without fields and time, and without the
        apiVersion for an Apply (an applier is one entry whatever version it applies)."""
        parts = [f'"manager":{_go_string(self.manager)}', f'"operation":{_go_string(self.operation)}']
        if self.api_version and self.operation != APPLY:
            parts.append(f'"apiVersion":{_go_string(self.api_version)}')
        if self.subresource:
            parts.append(f'"subresource":{_go_string(self.subresource)}')
        return "{" + ",".join(parts) + "}"

    @property
    def seconds(self) -> int:
        return int(self.time.timestamp()) if self.time is not None else 0

    def encode(self) -> dict[str, Any]:
        """The wire form, keys sorted as kube emits a custom resource."""
        out: dict[str, Any] = {"apiVersion": self.api_version, "fieldsType": FIELDS_V1,
                               "fieldsV1": _encode_paths(self.paths), "manager": self.manager,
                               "operation": self.operation}
        if self.subresource:
            out["subresource"] = self.subresource
        if self.time is not None:
            out["time"] = rfc3339(self.time)
        return out


@functools.lru_cache(maxsize=1024)
def _go_string(value: str) -> str:
    """Go's JSON of a manager, operation, apiVersion or subresource: a handful of names, asked for
    by every identity."""
    return go_json(value)


# Most objects of a kind carry the same few field sets (written by the same clients), so a set is
# decoded once per distinct FieldsV1 document and encoded once per distinct set. Sets are shared
# as frozensets; every encoding handed out is a private copy.
@functools.lru_cache(maxsize=1024)
def _paths_of(doc: bytes) -> frozenset[Path]:
    return frozenset(from_fields_v1(orjson.loads(doc)))


def _decode_paths(fields_v1: Any) -> AbstractSet[Path]:
    """``from_fields_v1``, remembered by the document's JSON (FieldsV1Error is not remembered)."""
    try:
        key = orjson.dumps(fields_v1)
    except TypeError:  # orjson's JSONEncodeError is one: what it cannot encode is decoded as before
        return from_fields_v1(fields_v1)
    return _paths_of(key)


@functools.lru_cache(maxsize=1024)
def _fields_json(paths: frozenset[Path]) -> bytes:
    return orjson.dumps(to_fields_v1(paths))


def _encode_paths(paths: AbstractSet[Path]) -> dict[str, Any]:
    """``to_fields_v1``, remembered by the set; a fresh document each time."""
    return orjson.loads(_fields_json(paths if isinstance(paths, frozenset) else frozenset(paths)))


class DecodeError(ValueError):
    """Request or stored managedFields that do not decode: the other source is used instead."""


Managed = dict[str, ManagedEntry]  # by identity


def _entry_from(raw: Any) -> ManagedEntry:
    """``GetManagedFields`` then ``DecodeManagedFields`` for one entry."""
    if not isinstance(raw, Mapping):
        raise DecodeError("a managedFields entry must be an object")
    text = {}
    for key in ("manager", "operation", "apiVersion", "fieldsType", "subresource"):
        value = raw.get(key)
        if value is not None and not isinstance(value, str):
            raise DecodeError(f"{key} must be a string")
        text[key] = value or ""
    if text["operation"] not in (APPLY, UPDATE):
        raise DecodeError("operation must be `Apply` or `Update`")
    if not text["apiVersion"]:
        raise DecodeError("apiVersion must not be empty")
    if text["fieldsType"] != FIELDS_V1:
        raise DecodeError(f"invalid fieldsType {text['fieldsType']!r}")
    when = raw.get("time")
    parsed: dt.datetime | None = None
    if when is not None:
        if not isinstance(when, str):
            raise DecodeError("time must be a string")
        try:
            parsed = parse_rfc3339(when)
        except ValueError:
            raise DecodeError("time must be RFC 3339") from None
    fields_v1 = raw.get("fieldsV1")
    try:
        paths = _decode_paths(fields_v1) if fields_v1 is not None else frozenset()
    except FieldsV1Error as e:
        raise DecodeError(str(e)) from None
    return ManagedEntry(text["manager"], text["operation"], text["apiVersion"], text["subresource"], parsed, paths)


def decode_managed_fields(raw: Any) -> Managed:
    """Entries by identity (a later duplicate wins); :class:`DecodeError` when any does not decode."""
    if raw is None:
        return {}
    if not isinstance(raw, list):
        raise DecodeError("managedFields must be a list")
    out: Managed = {}
    for item in raw:
        entry = _entry_from(item)
        out[entry.identity] = entry
    return out


def _is_reset(raw: Any) -> bool:
    """``[]`` or ``[{}]`` (an entry whose every field is empty): the client drops all entries."""
    if not isinstance(raw, list):
        return False
    if not raw:
        return True
    return len(raw) == 1 and isinstance(raw[0], Mapping) and all(
        raw[0].get(key) in (None, "") for key in ("manager", "operation", "apiVersion", "time", "fieldsType",
                                                   "subresource")) and raw[0].get("fieldsV1") is None


def _decode_or_empty(raw: Any) -> Managed:
    try:
        return decode_managed_fields(raw)
    except DecodeError:
        return {}


def encode_managed_fields(managed: Managed) -> list[dict[str, Any]]:
    """Entries in kube's order: Apply before Update, then time (seconds), manager, apiVersion, subresource."""
    ordered = sorted(managed.values(), key=lambda e: (e.operation, e.seconds, e.manager, e.api_version,
                                                      e.subresource))
    return [e.encode() for e in ordered]


def manager_from_user_agent(user_agent: str) -> str:
    """kube's ``prefixFromUserAgent``: the User-Agent up to its first ``/``, printable characters
    only, at most 128 bytes (``kubectl/v1.31.0 (linux/amd64)`` is ``kubectl``)."""
    out, size = [], 0
    for char in user_agent.split("/", 1)[0]:
        if not char.isprintable():
            continue
        width = len(char.encode("utf-8", "surrogatepass"))
        if size + width > FIELD_MANAGER_MAX_LENGTH:
            break
        out.append(char)
        size += width
    return "".join(out)


def _without_times(entries: Any) -> Any:
    if not isinstance(entries, list):
        return entries
    return [{k: v for k, v in e.items() if k != "time"} if isinstance(e, Mapping) else e for e in entries]


def timestamps_only_changed(new: dict[str, Any], live: dict[str, Any]) -> bool:
    """Whether ``new`` differs from ``live`` only in managedFields times (kube's
    ``IgnoreManagedFieldsTimestampsTransformer``): then the live times are put back and the write
    is a no-op."""
    new_mf, live_mf = new["metadata"].get("managedFields"), live["metadata"].get("managedFields")
    if new_mf == live_mf or _without_times(new_mf) != _without_times(live_mf):
        return False
    new_meta = {k: v for k, v in new["metadata"].items() if k != "managedFields"}
    live_meta = {k: v for k, v in live["metadata"].items() if k != "managedFields"}
    return new_meta == live_meta and {k: v for k, v in new.items() if k != "metadata"} == \
        {k: v for k, v in live.items() if k != "metadata"}


def _print_manager(entry: ManagedEntry) -> str:
    """``printManager``: the name quoted, ``using <apiVersion>`` for an Update, the subresource."""
    out = go_json(entry.manager)
    if entry.operation == UPDATE:
        out += f" using {entry.api_version}"
    if entry.subresource:
        out += f" with subresource {go_json(entry.subresource)}"
    return out


def conflict_error(conflicts: dict[str, tuple[ManagedEntry, set[Path]]]) -> errors.ApiError:
    """kube's ``NewConflictError``: 409 Conflict, one FieldManagerConflict cause per field."""
    ordered = [(conflicts[key][0], iteration_order(conflicts[key][1])) for key in sorted(conflicts)]
    causes = [errors.Cause("FieldManagerConflict", f"conflict with {_print_manager(entry)}", path_string(path))
              for entry, paths in ordered for path in paths]
    total = len(causes)
    if total == 1:
        entry, paths = ordered[0]
        message = f"Apply failed with 1 conflict: conflict with {_print_manager(entry)}: {path_string(paths[0])}"
    else:
        lines = []
        for entry, paths in ordered:
            lines.append(f"conflicts with {_print_manager(entry)}:")
            lines.extend(f"- {path_string(path)}" for path in paths)
        message = f"Apply failed with {total} conflicts: " + "\n".join(lines)
    return errors.ApiError(409, "Conflict", message, causes=causes)


def _sync_last_applied(merged: dict[str, Any], config: dict[str, Any]) -> None:
    """lastAppliedUpdater: after kubectl's apply, an object keeping kubectl's last-applied annotation
    has it rewritten to the applied configuration (without the annotation), as kubectl writes it;
    dropped if the annotations would outgrow their limit. Not tracked by any entry."""
    annotations = merged.get("metadata", {}).get("annotations")
    if not isinstance(annotations, dict) or LAST_APPLIED not in annotations:
        return
    applied = copy.deepcopy(config)
    applied_annotations = (applied.get("metadata") or {}).get("annotations")
    if isinstance(applied_annotations, dict):
        applied_annotations.pop(LAST_APPLIED, None)
        if not applied_annotations:
            applied["metadata"].pop("annotations")
    annotations[LAST_APPLIED] = go_json(applied) + "\n"
    if sum(len(k) + len(str(v)) for k, v in annotations.items()) > TOTAL_ANNOTATION_SIZE_LIMIT:
        del annotations[LAST_APPLIED]


def _changed(live: dict[str, Any], merged: dict[str, Any]) -> bool:
    strip = ("managedFields",)
    return {k: v for k, v in live.items() if k != "metadata"} != {k: v for k, v in merged.items() if k != "metadata"} \
        or {k: v for k, v in live.get("metadata", {}).items() if k not in strip} != \
        {k: v for k, v in merged.get("metadata", {}).items() if k not in strip}



class FieldManager:
    """Update tracking for one resource version: its type (from the schema) and apiVersion."""

    def __init__(self, root: Type, api_version: str, max_update_managers: int = MAX_UPDATE_MANAGERS) -> None:
        self.root = root
        self.api_version = api_version
        self.max_update_managers = max_update_managers

    def update(self, live: dict[str, Any] | None, new: dict[str, Any], manager: str, subresource: str = "",
               now: dt.datetime | None = None) -> None:
        """Set ``new``'s managedFields for a write of ``new`` over ``live`` (``None``: a create) by
        ``manager`` through ``subresource`` (``""`` or ``"status"``). ``new`` is changed in place."""
        meta = new["metadata"]
        live_mf = (live or {}).get("metadata", {}).get("managedFields")
        if subresource:
            managed = _decode_or_empty(live_mf)
        else:
            requested = meta.get("managedFields")
            if _is_reset(requested):
                managed = {}
            else:
                try:
                    managed = decode_managed_fields(requested)
                except DecodeError:
                    managed = {}
                if not managed:
                    managed = _decode_or_empty(live_mf)
        meta.pop("managedFields", None)
        if not managed and live is not None:  # an untracked object stays untracked until applied to
            return
        if any(e.api_version != self.api_version for e in managed.values()):
            # structured-merge-diff compares the object at every entry's apiVersion, and converting it
            # to one this resource does not serve fails the tracking: UpdateNoErrors then writes the
            # object without managedFields (user-written entries are the only way to name another).
            return
        try:
            managed = self._track(live or {}, new, managed, manager or UNKNOWN_MANAGER, subresource, now)
        except TypingError:  # UpdateNoErrors: the object is written without managedFields
            return
        if managed:
            meta["managedFields"] = encode_managed_fields(managed)

    def apply(self, live: dict[str, Any] | None, config: dict[str, Any], manager: str,
              subresource: str = "", force: bool = False, now: dt.datetime | None = None) -> dict[str, Any]:
        """The object an apply of ``config`` by ``manager`` makes of ``live`` (``None``: a create),
        with its managedFields: merge, Apply entry, pruning of what the manager stopped applying and
        no one else owns, conflicts (409 unless ``force``, which takes the fields over)."""
        when = (now or dt.datetime.now(dt.UTC)).replace(microsecond=0)
        base = live if live is not None else {"apiVersion": config.get("apiVersion"), "kind": config.get("kind")}
        managed = _decode_or_empty(base.get("metadata", {}).get("managedFields"))
        reset = RESET_FIELDS.get(subresource, ())
        if live is not None and not managed:  # skipNonApplied: everything so far was written by someone
            owned = compare({}, live, self.root).added - STRIPPED
            owned = {p for p in owned if p and not any(p[:len(r)] == r for r in RESET_FIELDS[""])}
            if owned:
                first = ManagedEntry(BEFORE_FIRST_APPLY, UPDATE, self.api_version, "", when, owned)
                managed[first.identity] = first
        try:
            configured = set_of(config, self.root)
        except TypingError as e:
            raise errors.ApiError(500, "", f"failed to create typed patch object: {e}") from None
        # The configuration's own set, status aside on the main resource (spec on /status); the
        # entry is that without the fields no one owns (apiVersion, kind, metadata.name, ...), but
        # pruning counts those as the applier's: its name and namespace keep metadata alive.
        configured = {p for p in configured if not any(p[:len(r)] == r for r in reset)}
        applied = configured - STRIPPED
        mine = ManagedEntry(manager or UNKNOWN_MANAGER, APPLY, self.api_version, subresource)
        previous = managed.get(mine.identity)
        merged = merge(base, config, self.root)
        merged_meta = merged.setdefault("metadata", {})
        merged_meta.pop("managedFields", None)
        # Prune: what the manager applied before, applies no more, and no one else owns.
        if previous is not None:
            others = set().union(*(e.paths for k, e in managed.items() if k != mine.identity))
            merged = prune(merged, previous.paths, configured | others, self.root)
        changes = compare(base, merged, self.root).without_prefixes(reset)
        touched = changes.modified | changes.added
        conflicts: dict[str, tuple[ManagedEntry, set[Path]]] = {}
        for key, entry in managed.items():
            if key == mine.identity:
                continue
            clash = entry.paths & touched
            if clash:
                conflicts[key] = (entry, clash)
        if conflicts and not force and manager == KUBECTL and live is not None:
            # lastAppliedManager: kubectl's own client-side apply wrote the fields it conflicts on
            allowed = self._allowed_by_last_applied(live)
            conflicts = {key: (entry, paths - allowed) for key, (entry, paths) in conflicts.items()
                         if paths - allowed}
            force = not conflicts
        if conflicts and not force:
            raise conflict_error(conflicts)
        for key, entry in list(managed.items()):
            if key == mine.identity:
                continue
            entry.paths = entry.paths - (touched if force else set()) - changes.removed
            if not entry.paths:
                del managed[key]
        mine.paths = applied
        mine.time = when if _changed(base, merged) else (previous.time if previous is not None else None)
        if mine.paths:
            managed[mine.identity] = mine
        else:
            managed.pop(mine.identity, None)
        if managed:
            merged["metadata"]["managedFields"] = encode_managed_fields(managed)
        if manager == KUBECTL:
            _sync_last_applied(merged, config)
        return merged

    def _allowed_by_last_applied(self, live: dict[str, Any]) -> set[Path]:
        """The fields of kubectl's last-applied annotation whose values the live object still has
        (when the annotation is of this apiVersion): conflicts on them are forgiven."""
        raw = ((live.get("metadata") or {}).get("annotations") or {}).get(LAST_APPLIED)
        if not raw:
            return set()
        try:
            last = json.loads(raw)
        except ValueError:
            return set()
        if not isinstance(last, dict) or last.get("apiVersion") != self.api_version:
            return set()
        try:
            changes = compare(last, live, self.root)
            return set_of(last, self.root) - changes.modified - changes.removed
        except TypingError:
            return set()

    def _track(self, live: dict[str, Any], new: dict[str, Any], managed: Managed, manager: str,
               subresource: str, now: dt.datetime | None) -> Managed:
        changes = compare(live, new, self.root).without_prefixes(RESET_FIELDS.get(subresource, ()))
        touched = changes.modified | changes.added
        for key, entry in list(managed.items()):
            entry.paths = entry.paths - touched - changes.removed
            if not entry.paths:
                del managed[key]
        owned = touched - STRIPPED
        if owned:
            mine = ManagedEntry(manager, UPDATE, self.api_version, subresource)
            previous = managed.get(mine.identity)
            mine.paths = owned | (previous.paths if previous is not None else set())
            mine.time = (now or dt.datetime.now(dt.UTC)).replace(microsecond=0)
            managed[mine.identity] = mine
        return self._cap(managed)

    def _cap(self, managed: Managed) -> Managed:
        """``capUpdateManagers``: merge the oldest Update entries, per apiVersion, into an
        ``ancient-changes`` entry until at most ``max_update_managers`` remain."""
        updaters = [key for key, e in managed.items() if e.operation != APPLY]
        if len(updaters) <= self.max_update_managers:
            return managed
        updaters.sort(key=lambda key: (managed[key].seconds, key))
        first_of_version: dict[str, str] = {}
        length = len(updaters)
        for key in updaters:
            if length <= self.max_update_managers:
                break
            entry = managed.get(key)
            if entry is None:
                continue
            bucket = ManagedEntry(ANCIENT_CHANGES, UPDATE, entry.api_version)
            first = first_of_version.get(entry.api_version)
            if first is None:
                first_of_version[entry.api_version] = key
                continue
            if bucket.identity not in managed:
                moved = managed.pop(first)
                bucket.paths, bucket.time = moved.paths, moved.time
                managed[bucket.identity] = bucket
            merged = managed[bucket.identity]
            merged.paths = entry.paths | merged.paths
            del managed[key]
            length -= 1
            merged.time = entry.time
        return managed
