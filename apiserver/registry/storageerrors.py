"""Storage errors as a client sees them (k8s.io/apiserver's ``storage/errors/storage.go``): the one
translation of a :class:`~apiserver.storage.interface.StorageError` into an API Status error."""

from __future__ import annotations

from apiserver.apis.resource import ResourceInfo
from apiserver.machinery import errors
from apiserver.storage.interface import StorageError

__all__ = ["to_api_error"]


def to_api_error(e: StorageError, info: ResourceInfo, name: str = "") -> errors.ApiError:
    code = e.code
    if code == StorageError.NOT_FOUND:
        return errors.not_found(info.resource, info.group, name)
    if code == StorageError.EXISTS:
        return errors.already_exists(info.resource, info.group, name)
    if code == StorageError.CONFLICT:
        return errors.conflict(info.resource, info.group, name, errors.CONFLICT_MODIFIED)
    if code == StorageError.TOO_MANY_CONFLICTS:
        return errors.conflict(info.resource, info.group, name, e.message)
    if code in (StorageError.UNAVAILABLE, StorageError.NOT_READY):
        return errors.service_unavailable(e.message)
    if code == StorageError.EXPIRED:
        return errors.gone(e.message)
    if code == StorageError.FUTURE_REVISION:
        return errors.too_large_resource_version(e.revision, e.current)
    if code == StorageError.INVALID:
        return errors.bad_request(e.message)
    if code == StorageError.TOO_LARGE:
        return errors.ApiError(413, "RequestEntityTooLarge", e.message)
    if code == StorageError.QUOTA_EXCEEDED:
        return errors.ApiError(507, "InsufficientStorage", e.message)
    return errors.internal(e.message)
