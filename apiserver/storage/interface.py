"""What storage is to the layers above it: stored entries, watch events, list options, the one
interface both the etcd store and the cached delegator implement, and the errors they raise.

Nothing here knows HTTP or API status codes: the registry translates a :class:`StorageError` into
the Status a client sees (as k8s.io/apiserver's ``storage/errors.go`` and
``registry/generic/registry`` split the work).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from apiserver.machinery.jsonutil import Obj
from apiserver.machinery.selectors import FieldSelector, LabelSelector

__all__ = ["ADDED", "BOOKMARK", "DELETED", "ERROR", "MODIFIED", "Entry", "Event", "ListOptions", "ListResult",
           "EventSource", "Obj", "Predicate", "Storage", "StorageError", "UpdateFn", "Watch", "match_all"]

UpdateFn = Callable[[Obj], Awaitable[Obj | None]]

ADDED, MODIFIED, DELETED, BOOKMARK, ERROR = "ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"


@dataclass(slots=True)
class Entry:
    """One stored object as storage hands it out, held as its JSON encoding only.

    The watch cache keeps an entry for every object. Decoded, each is a few dozen dicts and lists, and
    Python's cycle collector walks every one of them in each full collection: 390 ms with 10,000
    VirtualClusters (measured), a stall for every request in flight. Bytes it never walks, and they take
    a fraction of the memory. ``obj`` decodes a private copy at each access."""

    key: str
    namespace: str
    name: str
    rv: int
    encoded: bytes  # the object as every get, list and watch serves it: encoded once
    labels: dict[str, str]

    @classmethod
    def of(cls, key: str, namespace: str, name: str, rv: int, obj: Obj) -> Entry:
        return cls(key, namespace, name, rv, orjson.dumps(obj), dict(obj.get("metadata", {}).get("labels") or {}))

    @property
    def obj(self) -> Obj:
        """The object, decoded afresh: a private copy the caller may change (keep it to use it twice)."""
        return orjson.loads(self.encoded)

    def json(self) -> bytes:
        return self.encoded


@dataclass(slots=True)
class Event:
    type: str
    rv: int
    entry: Entry | None  # the new state, or the last state for DELETED; None for BOOKMARK
    prev: Entry | None = None


Predicate = Callable[[Entry], bool]


def match_all(_: Entry) -> bool:
    return True


@dataclass
class ListOptions:
    """Which objects a list or watch wants (kube's ListOptions and SelectionPredicate in one)."""

    label_selector: LabelSelector | None = None
    field_selector: FieldSelector | None = None
    limit: int = 0
    continue_token: str = ""
    resource_version: str = ""
    resource_version_match: str = ""

    def predicate(self) -> Predicate:
        labels = self.label_selector
        fields = self.field_selector
        if (labels is None or labels.empty) and fields is None:
            return match_all

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


@dataclass
class ListResult:
    entries: list[Entry]
    resource_version: int
    continue_token: str = ""
    remaining: int | None = None  # remainingItemCount, when it can be known

    def list_meta(self) -> dict[str, Any]:
        meta: dict[str, Any] = {"resourceVersion": str(self.resource_version)}
        if self.continue_token:
            meta["continue"] = self.continue_token
            if self.remaining is not None:
                meta["remainingItemCount"] = self.remaining
        return meta


class EventSource(Protocol):
    """The events one watcher has yet to take, in order; None once the watch is over."""

    def empty(self) -> bool: ...

    def get_nowait(self) -> Event | None: ...

    async def get(self) -> Event | None: ...


class Watch(Protocol):
    """One client's watch, as storage hands it out."""

    queue: EventSource
    closed_reason: str  # set once the watch is over, with why

    def close(self, reason: str) -> None:
        """End the watch: the reader gets what is queued, then the end."""

    def stop(self) -> None:
        """The reader is gone: nothing more is offered."""


class StorageError(Exception):
    """A storage failure, by code; the registry decides what a client is told."""

    NOT_FOUND = "NotFound"
    EXISTS = "Exists"
    CONFLICT = "Conflict"  # the resourceVersion a write was conditioned on is not current
    TOO_MANY_CONFLICTS = "TooManyConflicts"  # a read-modify-write lost every race
    UNAVAILABLE = "Unavailable"  # etcd did not answer; a write may or may not have been applied
    EXPIRED = "Expired"  # the revision asked for is compacted or out of the watch cache's history
    FUTURE_REVISION = "FutureRevision"  # a revision storage has not reached (in time)
    INVALID = "Invalid"  # a request storage cannot serve as given (a forged continue token)
    TOO_LARGE = "TooLarge"
    QUOTA_EXCEEDED = "QuotaExceeded"
    NOT_READY = "NotReady"  # the cache has not listed yet
    INTERNAL = "Internal"

    def __init__(self, code: str, message: str, *, revision: int = 0, current: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.revision = revision  # FUTURE_REVISION: the one asked for
        self.current = current  # FUTURE_REVISION: the one storage stands at, when known


class Storage(Protocol):
    """The one storage interface: implemented by :class:`~apiserver.storage.etcd3.Store` and by
    :class:`~apiserver.storage.delegator.CachedStore`, which decides cache or etcd per call."""

    async def get(self, namespace: str, name: str, resource_version: str = "") -> Entry:
        """One object: ``resourceVersion=0`` any recent state, otherwise the current one."""

    async def list(self, namespace: str | None, opts: ListOptions) -> ListResult:
        """A page of matching objects and what the next page needs."""

    async def create(self, obj: Obj) -> Obj:
        """Store a new object; EXISTS when its key is taken."""

    async def guaranteed_update(self, namespace: str, name: str, update: UpdateFn,
                                expected_rv: str | None = None) -> tuple[Obj, Obj]:
        """Read-modify-write until it lands; (old, new)."""

    async def delete(self, namespace: str, name: str, precondition: Callable[[Obj], None] | None = None) -> Obj:
        """Remove the object now; returns its last state."""

    async def watch(self, namespace: str | None, opts: ListOptions, bookmarks: bool,
                    send_initial_events: bool | None) -> tuple[Watch, list[Event], int | None]:
        """A watch, its backlog, and the revision of its initial state when it has one."""
