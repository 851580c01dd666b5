"""resourceVersions as storage reads them (kube's ``storage.APIObjectVersioner``): an etcd revision,
a non-negative int64 in decimal."""

from __future__ import annotations

from apiserver.machinery.golang import parse_uint64
from apiserver.storage.interface import StorageError

__all__ = ["parse_resource_version"]


def parse_resource_version(value: str) -> int:
    rv = parse_uint64(value)
    if rv is None:
        raise StorageError(StorageError.INVALID, f'invalid resource version: "{value}"')
    return rv
