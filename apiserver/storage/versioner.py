"""resourceVersions as storage reads them (kube's ``storage.APIObjectVersioner``): an etcd revision,
a non-negative int64 in decimal; and the checks kube's storage makes of a list's options before
reading (``storage.ValidateListOptions``)."""

from __future__ import annotations

from apiserver.machinery.golang import go_quote, parse_uint64
from apiserver.storage.continuation import decode_continue
from apiserver.storage.interface import ListOptions, StorageError

__all__ = ["parse_resource_version", "parse_uint_error", "validate_list_options"]


def parse_uint_error(value: str) -> str:
    """Go's ``strconv.ParseUint`` error for a value it does not take."""
    problem = "value out of range" if value.isdigit() and value.isascii() else "invalid syntax"
    return f"strconv.ParseUint: parsing {go_quote(value)}: {problem}"


def parse_resource_version(value: str) -> int:
    """The revision of a resourceVersion ("" and "0": 0); INVALID worded as kube's versioner words it."""
    if value in ("", "0"):
        return 0
    rv = parse_uint64(value, maximum=2**64 - 1)
    if rv is None:
        raise StorageError(StorageError.INVALID,
                           f"resourceVersion: Invalid value: {go_quote(value)}: {parse_uint_error(value)}")
    return rv  # may be beyond any etcd revision (an int64): then it is never reached


def validate_list_options(opts: ListOptions) -> tuple[int, str | None]:
    """(revision of a continue token, or 0; its start key, or None) once a list's options are found
    fit to read with: a token that decodes and comes without a resourceVersion, or a resourceVersion
    that parses (kube's messages, ``invalid continue token: ...``, ``invalid resource version: ...``)."""
    if opts.continue_token:
        try:
            rv, start = decode_continue(opts.continue_token)
        except StorageError as e:
            raise StorageError(StorageError.INVALID, f"invalid continue token: {e.message}") from None
        if opts.resource_version not in ("", "0"):
            raise StorageError(StorageError.INVALID, "specifying resource version is not allowed when using continue")
        return rv, start
    try:
        parse_resource_version(opts.resource_version)
    except StorageError as e:
        if e.code != StorageError.INVALID:
            raise
        raise StorageError(StorageError.INVALID, f"invalid resource version: {e.message}") from None
    return 0, None
