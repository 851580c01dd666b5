"""Generic storage of namespaced objects in etcd, with optimistic concurrency.

Create is a txn on ``create_revision == 0``; update and delete are txns on
``mod_revision == resourceVersion``. Reads that must be current (get, updates) go to
etcd; list and watch are served by the :class:`~apiserver.storage.cacher.WatchCache`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from apiserver.apis.resource import ResourceInfo
from apiserver.etcd.client import (
    EtcdClient,
    EtcdCompacted,
    EtcdError,
    EtcdUnavailable,
    compare_absent,
    compare_mod_revision,
    op_delete,
    op_put,
    prefix_end,
)
from apiserver.machinery import errors
from apiserver.storage.cacher import Entry, WatchCache, decode_entry
from apiserver.storage.keys import KeyLayout

log = logging.getLogger(__name__)

Obj = dict[str, Any]
UpdateFn = Callable[[Obj], Awaitable[Obj | None]]

MAX_CONFLICT_RETRIES = 16


def encode(obj: Obj) -> bytes:
    """The stored form: the object without resourceVersion (that is etcd's revision)."""
    meta = obj.get("metadata", {})
    if "resourceVersion" in meta:
        obj = {**obj, "metadata": {k: v for k, v in meta.items() if k != "resourceVersion"}}
    return orjson.dumps(obj)


def storage_error(e: EtcdError) -> errors.ApiError:
    """How an etcd failure reaches a client."""
    if isinstance(e, EtcdUnavailable):
        return errors.service_unavailable(f"storage is unavailable: {e.message}")
    if isinstance(e, EtcdCompacted):
        return errors.gone(f"The resourceVersion for the provided list is too old: {e.message}")
    if "request is too large" in e.message or "message larger than max" in e.message:
        return errors.ApiError(413, "RequestEntityTooLarge", f"the object is too large to be stored: {e.message}")
    if "database space exceeded" in e.message:
        return errors.ApiError(507, "InsufficientStorage", f"etcd refused the write: {e.message}")
    return errors.internal(f"etcd: {e.message}")


class Store:
    """Objects of one resource: etcd for writes and current reads, the cache for lists."""

    def __init__(self, etcd: EtcdClient, info: ResourceInfo, cache: WatchCache | None = None) -> None:
        self.etcd = etcd
        self.info = info
        self.layout = KeyLayout(info.group, info.resource)
        self.cache = cache or WatchCache(etcd, self.layout)

    def _not_found(self, name: str) -> errors.ApiError:
        return errors.not_found(self.info.resource, self.info.group, name)

    def _conflict(self, name: str, detail: str = errors.CONFLICT_MODIFIED) -> errors.ApiError:
        return errors.conflict(self.info.resource, self.info.group, name, detail)

    async def _read(self, key: str, name: str) -> Entry:
        """The current stored state from etcd (404 when absent)."""
        try:
            kv = await self.etcd.get(key)
        except EtcdError as e:
            raise storage_error(e) from e
        if kv is None:
            raise self._not_found(name)
        entry = decode_entry(self.layout, kv)
        assert entry is not None
        return entry

    async def read(self, namespace: str, name: str) -> Entry:
        """The current state from etcd itself."""
        return await self._read(self.layout.key(namespace, name), name)

    async def get(self, namespace: str, name: str) -> Obj:
        return (await self.read(namespace, name)).obj

    async def create(self, obj: Obj) -> Obj:
        meta = obj["metadata"]
        key = self.layout.key(meta["namespace"], meta["name"])
        try:
            result = await self.etcd.txn([compare_absent(key)], [op_put(key, encode(obj))])
        except EtcdError as e:
            raise storage_error(e) from e
        if not result.succeeded:
            raise errors.already_exists(self.info.resource, self.info.group, meta["name"])
        return _with_rv(obj, result.header.revision)

    async def guaranteed_update(self, namespace: str, name: str, update: UpdateFn,
                                expected_rv: str | None = None) -> tuple[Obj, Obj]:
        """Read-modify-write until it lands; returns (old, new).

        ``update`` gets a private copy of the current object and returns the new one,
        or None for "nothing to change". With ``expected_rv`` a mismatch is a 409
        instead of a retry. An object whose deletionTimestamp is set and whose last
        finalizer the update removes is deleted, as in kube.
        """
        key = self.layout.key(namespace, name)
        # First guess from the watch cache (saves an etcd read); whatever it cannot vouch for
        # (a miss, a mismatch, a refusal, a no-op, a lost race) is decided again from etcd.
        guess = self.cache.get(namespace, name) if self.cache.ready else None
        for _ in range(MAX_CONFLICT_RETRIES):
            current, guess = guess, None
            if current is None or (expected_rv is not None and expected_rv != str(current.rv)):
                current = await self._read(key, name)
                cached = False
            else:
                cached = True
            if expected_rv is not None and expected_rv != str(current.rv):
                raise self._conflict(name)
            try:
                new = await update(orjson.loads(current.json()))  # a private copy, from the cached encoding
            except errors.ApiError:
                if cached:
                    continue
                raise
            if new is None or _same(new, current.obj):
                if cached:
                    continue
                return current.obj, current.obj
            meta = new["metadata"]
            try:
                if meta.get("deletionTimestamp") and not meta.get("finalizers"):
                    result = await self.etcd.txn([compare_mod_revision(key, current.rv)], [op_delete(key)])
                else:
                    result = await self.etcd.txn([compare_mod_revision(key, current.rv)],
                                                 [op_put(key, encode(new))])
            except EtcdError as e:
                raise storage_error(e) from e
            if result.succeeded:
                return current.obj, _with_rv(new, result.header.revision)
            if expected_rv is not None and not cached:
                raise self._conflict(name)
        raise self._conflict(name, "too many concurrent updates; please try again")

    async def delete(self, namespace: str, name: str, precondition: Callable[[Obj], None] | None = None,
                     expected_rv: str | None = None) -> Obj:
        """Remove the key now; ``precondition`` may raise to refuse. Returns the last state."""
        key = self.layout.key(namespace, name)
        for _ in range(MAX_CONFLICT_RETRIES):
            current = await self._read(key, name)
            if expected_rv is not None and expected_rv != str(current.rv):
                raise self._conflict(name)
            if precondition is not None:
                precondition(current.obj)
            try:
                result = await self.etcd.txn([compare_mod_revision(key, current.rv)], [op_delete(key)])
            except EtcdError as e:
                raise storage_error(e) from e
            if result.succeeded:
                return _with_rv(current.obj, result.header.revision)
        raise self._conflict(name, "too many concurrent updates; please try again")

    async def list_snapshot(self, namespace: str | None, revision: int, after_key: str | None,
                            limit: int) -> tuple[list[Entry], bool, int]:
        """One page of keys at ``revision`` from etcd (continuation of a paged list).

        Returns (entries, more, revision); the page may be filtered further by the caller.
        """
        prefix = self.layout.namespace_prefix(namespace)
        start = (after_key + "\0") if after_key else prefix
        try:
            result = await self.etcd.range(start, prefix_end(prefix), limit=limit, revision=revision)
        except EtcdCompacted as e:
            raise errors.gone(
                "The provided continue parameter is too old to display a consistent list result. "
                "You can start a new list without the continue parameter.") from e
        except EtcdError as e:
            if "future revision" in e.message:  # kube's answer to a revision not reached yet (clients retry)
                raise errors.too_large_resource_version(revision) from e
            raise storage_error(e) from e
        entries = [e for kv in result.kvs if (e := decode_entry(self.layout, kv)) is not None]
        for entry in entries:
            entry.obj["metadata"]["resourceVersion"] = str(entry.rv)
        return entries, result.more, revision or result.header.revision


def _with_rv(obj: Obj, revision: int) -> Obj:
    out = dict(obj)
    out["metadata"] = {**obj.get("metadata", {}), "resourceVersion": str(revision)}
    return out


def _same(a: Obj, b: Obj) -> bool:
    """Equal ignoring resourceVersion: a no-op write must not bump the revision."""
    return encode(a) == encode(b)
