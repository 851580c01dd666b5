"""The one place that decides, per call, whether the watch cache or etcd serves it
(k8s.io/apiserver's ``cacher/delegator.go``).

- get: ``resourceVersion=0`` any cached state; otherwise the cache once it has caught up with the
  revision etcd reports after the request arrived (linearizable, as a quorum read is), etcd itself
  when the cache cannot catch up in time or has not listed yet.
- list: the cache, consistent as for get; ``resourceVersionMatch=Exact`` and continuations the
  cache's history no longer reaches are read from etcd at their revision.
- watch: the cache, always.
- writes: etcd, with the cached object as the first guess of a read-modify-write.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from apiserver.storage.cacher import WatchCache, Watcher
from apiserver.storage.continuation import continue_after, start_after
from apiserver.storage.etcd3 import Store
from apiserver.storage.interface import (
    Entry,
    Event,
    ListOptions,
    ListResult,
    Obj,
    Predicate,
    StorageError,
    UpdateFn,
)
from apiserver.storage.versioner import parse_resource_version, validate_list_options

__all__ = ["CachedStore"]

class CachedStore:
    """The :class:`~apiserver.storage.interface.Storage` the registry is given: etcd behind a watch cache."""

    def __init__(self, store: Store, cache: WatchCache) -> None:
        self.store = store
        self.cache = cache
        self.layout = store.layout

    # -- reads -----------------------------------------------------------------------

    async def get(self, namespace: str, name: str, resource_version: str = "") -> Entry:
        cache = self.cache
        parse_resource_version(resource_version)
        if not cache.ready:
            return await self.store.get(namespace, name)
        if resource_version != "0":
            try:
                await cache.wait_consistent()
            except StorageError as e:
                if e.code != StorageError.FUTURE_REVISION:
                    raise
                return await self.store.get(namespace, name)
        entry = cache.get(namespace, name)
        if entry is None:
            raise StorageError(StorageError.NOT_FOUND, f"{self.layout.key(namespace, name)} not found")
        return entry

    async def list(self, namespace: str | None, opts: ListOptions) -> ListResult:
        cache = self.cache
        predicate = opts.predicate()
        rv, start = validate_list_options(opts)
        if start is not None:
            after = start_after(self.layout, namespace, start)
            if rv and cache.ready and rv <= cache.rv and \
                    (snapshot := cache.entries_at(rv, namespace, after)) is not None:
                return self._page(snapshot, rv, namespace, opts, predicate)
            return await self.store.list(namespace, opts)
        if opts.resource_version_match == "Exact":
            return await self.store.list(namespace, opts)
        if opts.resource_version == "":
            try:
                await cache.wait_consistent()
            except StorageError as e:
                if e.code != StorageError.FUTURE_REVISION:
                    raise
                # As kube-apiserver does: what the cache cannot serve consistently in time, etcd does.
                return await self.store.list(namespace, opts)
        elif opts.resource_version != "0":
            await cache.wait_fresh(parse_resource_version(opts.resource_version))
        elif not cache.ready:
            raise StorageError(StorageError.NOT_READY, "the watch cache is initializing")
        pinned = opts.label_selector.indexable() if opts.label_selector is not None else None
        if pinned is not None:
            entries: Iterable[Entry] = cache.entries_labelled(namespace, pinned.key, pinned.values)
        else:
            entries = cache.sorted_entries(namespace)
        return self._page(entries, cache.rv, namespace, opts, predicate)

    def _page(self, entries: Iterable[Entry], rv: int, namespace: str | None, opts: ListOptions,
              predicate: Predicate) -> ListResult:
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
        if not more:
            return ListResult(items, rv)
        return ListResult(items, rv, continue_after(self.layout, namespace, rv, last_key),
                          None if opts.filtered else remaining)

    async def watch(self, namespace: str | None, opts: ListOptions, bookmarks: bool,
                    send_initial_events: bool | None) -> tuple[Watcher, list[Event], int | None]:
        """Register a watcher. Returns it, its backlog, and the revision of the initial state when
        the client asked for initial events (else None). A resourceVersion the cache has not reached
        yet gives a watch that waits for it; one older than its history is EXPIRED."""
        cache = self.cache
        predicate = opts.predicate()
        rv_text = opts.resource_version
        if send_initial_events or (send_initial_events is None and rv_text in ("", "0")):
            return cache.watch_with_state(namespace, predicate, bookmarks)
        if rv_text in ("", "0"):
            watcher, backlog = cache.watch_from(cache.rv, namespace, predicate, bookmarks)
            return watcher, backlog, None
        rv = parse_resource_version(rv_text)  # not waited for, as kube does not: its events come when they do
        watcher, backlog = cache.watch_from(rv, namespace, predicate, bookmarks)
        return watcher, backlog, None

    # -- writes ----------------------------------------------------------------------

    async def create(self, obj: Obj) -> Obj:
        return await self.store.create(obj)

    async def guaranteed_update(self, namespace: str, name: str, update: UpdateFn,
                                expected_rv: str | None = None) -> tuple[Obj, Obj]:
        guess = self.cache.get(namespace, name) if self.cache.ready else None
        return await self.store.guaranteed_update(namespace, name, update, expected_rv, cached=guess)

    async def delete(self, namespace: str, name: str, precondition: Callable[[Obj], None] | None = None) -> Obj:
        return await self.store.delete(namespace, name, precondition)
