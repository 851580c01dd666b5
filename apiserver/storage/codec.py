"""What etcd holds and how its failures read to the layers above: the stored encoding of an
object (its resourceVersion is etcd's revision, never stored) and the one translation of an
:class:`~apiserver.etcd.client.EtcdError` into a :class:`~apiserver.storage.interface.StorageError`."""

from __future__ import annotations

from typing import Any

import orjson

from apiserver.etcd.client import EtcdCompacted, EtcdError, EtcdUnavailable
from apiserver.etcd.messages import KeyValue
from apiserver.storage.interface import Entry, Obj, StorageError
from apiserver.storage.keys import KeyLayout

__all__ = ["decode_entry", "encode", "from_etcd", "same", "with_rv"]


def encode(obj: Obj) -> bytes:
    """The stored form: the object without resourceVersion (that is etcd's revision)."""
    meta = obj.get("metadata", {})
    if "resourceVersion" in meta:
        obj = {**obj, "metadata": {k: v for k, v in meta.items() if k != "resourceVersion"}}
    return orjson.dumps(obj)


def decode_entry(layout: KeyLayout, kv: KeyValue, rv: int | None = None) -> Entry | None:
    """Decode a stored value; resourceVersion is always etcd's revision, never stored."""
    where = layout.split(kv.key)
    if where is None:
        return None
    obj = orjson.loads(kv.value)
    revision = rv if rv is not None else kv.mod_revision
    obj.setdefault("metadata", {})["resourceVersion"] = str(revision)
    return Entry.of(kv.key.decode(), where[0], where[1], revision, obj)


def with_rv(obj: dict[str, Any], revision: int) -> dict[str, Any]:
    out = dict(obj)
    out["metadata"] = {**obj.get("metadata", {}), "resourceVersion": str(revision)}
    return out


def same(a: Obj, b: Obj) -> bool:
    """Equal ignoring resourceVersion and the order of keys: a no-op write must not bump the
    revision, whichever order a write left an object's keys in. Compared as encodings (keys
    sorted), not as dicts: in Python ``True == 1``, in JSON they differ."""
    meta_a, meta_b = a.get("metadata", {}), b.get("metadata", {})
    if "resourceVersion" in meta_a:
        a = {**a, "metadata": {k: v for k, v in meta_a.items() if k != "resourceVersion"}}
    if "resourceVersion" in meta_b:
        b = {**b, "metadata": {k: v for k, v in meta_b.items() if k != "resourceVersion"}}
    return orjson.dumps(a, option=orjson.OPT_SORT_KEYS) == orjson.dumps(b, option=orjson.OPT_SORT_KEYS)


def from_etcd(e: EtcdError) -> StorageError:
    """How an etcd failure reads to the layers above."""
    if isinstance(e, EtcdUnavailable):
        return StorageError(StorageError.UNAVAILABLE, f"storage is unavailable: {e.message}")
    if isinstance(e, EtcdCompacted):
        return StorageError(StorageError.EXPIRED, f"The resourceVersion for the provided list is too old: {e.message}")
    if "request is too large" in e.message or "message larger than max" in e.message:
        return StorageError(StorageError.TOO_LARGE, f"the object is too large to be stored: {e.message}")
    if "database space exceeded" in e.message:
        return StorageError(StorageError.QUOTA_EXCEEDED, f"etcd refused the write: {e.message}")
    if "future revision" in e.message:
        return StorageError(StorageError.FUTURE_REVISION, e.message)
    return StorageError(StorageError.INTERNAL, f"etcd: {e.message}")
