"""Objects of one resource in etcd, with optimistic concurrency.

Create is a txn on ``create_revision == 0``; update and delete are txns on
``mod_revision == resourceVersion``. Every call reads or writes etcd itself; the choice of
serving a read from the watch cache instead is :mod:`apiserver.storage.delegator`'s alone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from apiserver.apis.resource import ResourceInfo
from apiserver.etcd.client import EtcdClient, EtcdCompacted, EtcdError, prefix_end
from apiserver.etcd.messages import compare_absent, compare_mod_revision, op_delete, op_put
from apiserver.machinery.golang import MAX_INT64
from apiserver.storage.codec import decode_entry, encode, from_etcd, same, with_rv
from apiserver.storage.continuation import continue_after, start_after
from apiserver.storage.interface import Entry, ListOptions, ListResult, Obj, Predicate, StorageError, UpdateFn
from apiserver.storage.keys import KeyLayout
from apiserver.storage.versioner import parse_resource_version, validate_list_options

__all__ = ["MAX_CONFLICT_RETRIES", "Store"]

log = logging.getLogger(__name__)

MAX_CONFLICT_RETRIES = 16
TOO_MANY_CONFLICTS = "too many concurrent updates; please try again"
ETCD_PAGE = 500  # keys read per etcd call while a filtered list from etcd looks for ``limit`` matches


class Store:
    """Objects of one resource, read and written in etcd."""

    def __init__(self, etcd: EtcdClient, info: ResourceInfo) -> None:
        self.etcd = etcd
        self.info = info
        self.layout = KeyLayout(info.group, info.resource)

    async def _read(self, key: str, name: str) -> Entry:
        try:
            kv = await self.etcd.get(key)
        except EtcdError as e:
            raise from_etcd(e) from e
        if kv is None:
            raise StorageError(StorageError.NOT_FOUND, f"{key} not found")
        entry = decode_entry(self.layout, kv)
        assert entry is not None
        return entry

    async def get(self, namespace: str, name: str, resource_version: str = "") -> Entry:
        """The current state, from etcd itself (a quorum read) whatever ``resource_version`` says."""
        return await self._read(self.layout.key(namespace, name), name)

    async def create(self, obj: Obj) -> Obj:
        meta = obj["metadata"]
        key = self.layout.key(meta["namespace"], meta["name"])
        try:
            result = await self.etcd.txn([compare_absent(key)], [op_put(key, encode(obj))])
        except EtcdError as e:
            raise from_etcd(e) from e
        if not result.succeeded:
            raise StorageError(StorageError.EXISTS, f"{key} already exists")
        return with_rv(obj, result.header.revision)

    async def guaranteed_update(self, namespace: str, name: str, update: UpdateFn,
                                expected_rv: str | None = None, cached: Entry | None = None) -> tuple[Obj, Obj]:
        """Read-modify-write until it lands; returns (old, new).

        ``update`` gets a private copy of the current object and returns the new one, or None for
        "nothing to change"; whatever it raises reaches the caller. With ``expected_rv`` a mismatch
        is a CONFLICT instead of a retry. An object whose deletionTimestamp is set and whose last
        finalizer the update removes is deleted, as in kube. ``cached`` is a first guess at the
        current state (saves an etcd read); whatever it cannot vouch for (a mismatch, a refusal, a
        no-op, a lost race) is decided again from etcd.
        """
        key = self.layout.key(namespace, name)
        guess = cached
        for _ in range(MAX_CONFLICT_RETRIES):
            current, guess = guess, None
            if current is None or (expected_rv is not None and expected_rv != str(current.rv)):
                current = await self._read(key, name)
                from_guess = False
            else:
                from_guess = True
            if expected_rv is not None and expected_rv != str(current.rv):
                raise StorageError(StorageError.CONFLICT, f"{key}: resourceVersion {expected_rv} is not current")
            try:
                new = await update(current.obj)
            except Exception:
                if from_guess:
                    continue
                raise
            old = current.obj
            if new is None or same(new, old):
                if from_guess:
                    continue
                return old, old
            meta = new["metadata"]
            try:
                if meta.get("deletionTimestamp") and not meta.get("finalizers"):
                    result = await self.etcd.txn([compare_mod_revision(key, current.rv)], [op_delete(key)])
                else:
                    result = await self.etcd.txn([compare_mod_revision(key, current.rv)],
                                                 [op_put(key, encode(new))])
            except EtcdError as e:
                raise from_etcd(e) from e
            if result.succeeded:
                return old, with_rv(new, result.header.revision)
            if expected_rv is not None and not from_guess:
                raise StorageError(StorageError.CONFLICT, f"{key}: resourceVersion {expected_rv} is not current")
        raise StorageError(StorageError.TOO_MANY_CONFLICTS, TOO_MANY_CONFLICTS)

    async def delete(self, namespace: str, name: str, precondition: Callable[[Obj], None] | None = None) -> Obj:
        """Remove the key now; ``precondition`` may raise to refuse. Returns the last state."""
        key = self.layout.key(namespace, name)
        for _ in range(MAX_CONFLICT_RETRIES):
            current = await self._read(key, name)
            if precondition is not None:
                precondition(current.obj)
            try:
                result = await self.etcd.txn([compare_mod_revision(key, current.rv)], [op_delete(key)])
            except EtcdError as e:
                raise from_etcd(e) from e
            if result.succeeded:
                return with_rv(current.obj, result.header.revision)
        raise StorageError(StorageError.TOO_MANY_CONFLICTS, TOO_MANY_CONFLICTS)

    async def list(self, namespace: str | None, opts: ListOptions) -> ListResult:
        """A page of matching objects read from etcd: at the revision of a continue token or of
        ``resourceVersionMatch=Exact``, else at the current one (which must not be older than a
        given ``resourceVersion``)."""
        predicate = opts.predicate()
        continue_rv, start = validate_list_options(opts)
        if start is not None:
            rv, after = continue_rv, start_after(self.layout, namespace, start)
            try:
                return await self._list_at(namespace, opts, predicate, rv, after)
            except StorageError as e:
                if e.code != StorageError.FUTURE_REVISION:
                    raise
                # A revision etcd has not reached yet: no server issued this token.
                raise StorageError(StorageError.INVALID,
                                   f"continue key is not valid: resource version {rv} is in the future") from None
        if opts.resource_version_match == "Exact":
            wanted = parse_resource_version(opts.resource_version)
            try:
                if wanted > MAX_INT64:  # beyond any etcd revision
                    raise StorageError(StorageError.FUTURE_REVISION, f"Too large resource version: {wanted}")
                return await self._list_at(namespace, opts, predicate, wanted, None)
            except StorageError as e:
                if e.code != StorageError.FUTURE_REVISION:
                    raise
                current = await self.etcd.current_revision(self.layout.namespace_prefix(namespace))
                raise StorageError(StorageError.FUTURE_REVISION, f"Too large resource version: {wanted}",
                                   revision=wanted, current=current) from None
        result = await self._list_at(namespace, opts, predicate, 0, None)
        if opts.resource_version not in ("", "0"):
            wanted = parse_resource_version(opts.resource_version)
            if result.resource_version < wanted:
                raise StorageError(StorageError.FUTURE_REVISION, f"Too large resource version: {wanted}",
                                   revision=wanted, current=result.resource_version)
        return result

    async def _list_at(self, namespace: str | None, opts: ListOptions, predicate: Predicate,
                              rv: int, after_key: str | None) -> ListResult:
        """A list at an exact revision, read page by page from etcd until ``limit`` match."""
        items: list[Entry] = []
        last_key = after_key
        while True:
            need = opts.limit - len(items) if opts.limit else 0
            page = max(need, ETCD_PAGE) if need and opts.filtered else need
            entries, more, rv = await self.list_snapshot(namespace, rv, last_key, page)
            for i, entry in enumerate(entries):
                last_key = entry.key
                if predicate(entry):
                    items.append(entry)
                if opts.limit and len(items) >= opts.limit:
                    more = more or i < len(entries) - 1
                    break
            if not more or not entries or (opts.limit and len(items) >= opts.limit):
                break
        if more and last_key:
            return ListResult(items, rv, continue_after(self.layout, namespace, rv, last_key))
        return ListResult(items, rv)

    async def list_snapshot(self, namespace: str | None, revision: int, after_key: str | None,
                            limit: int) -> tuple[list[Entry], bool, int]:
        """One page of keys at ``revision`` (0: the current one) from etcd.

        Returns (entries, more, revision); the page may be filtered further by the caller.
        """
        prefix = self.layout.namespace_prefix(namespace)
        start = (after_key + "\0") if after_key else prefix
        try:
            result = await self.etcd.range(start, prefix_end(prefix), limit=limit, revision=revision)
        except EtcdCompacted as e:
            raise StorageError(
                StorageError.EXPIRED,
                "The provided continue parameter is too old to display a consistent list result. "
                "You can start a new list without the continue parameter.") from e
        except EtcdError as e:
            error = from_etcd(e)
            error.revision = revision
            raise error from e
        entries = [e for kv in result.kvs if (e := decode_entry(self.layout, kv)) is not None]
        return entries, result.more, revision or result.header.revision
