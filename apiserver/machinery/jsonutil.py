"""Decoded JSON: private copies, RFC 7386 merge patches, and the nesting bound every request body is held to."""

from __future__ import annotations

import copy
from typing import Any

import orjson

from apiserver.machinery import errors

__all__ = ["MAX_NESTING_DEPTH", "Obj", "check_nesting", "json_copy", "merge_patch"]

Obj = dict[str, Any]  # a decoded JSON object: a Kubernetes object, or any part of one


def json_copy(data: Any) -> Any:
    """A private deep copy of decoded JSON, five times faster than ``copy.deepcopy`` by a round trip
    through orjson; what orjson cannot encode (integers beyond 64 bits, refused later by
    validation) is copied by ``copy.deepcopy``."""
    try:
        return orjson.loads(orjson.dumps(data))
    except orjson.JSONEncodeError:
        return copy.deepcopy(data)


# Request bodies nested deeper than this are refused with 400. A VirtualCluster is about
# eight levels deep; the limit keeps every recursive step after decoding (pruning, merge
# patch, deepcopy, orjson's encoder) far from Python's and orjson's recursion limits.
MAX_NESTING_DEPTH = 100
_TOO_DEEP_LINE = b"\n" + b" " * (2 * MAX_NESTING_DEPTH)


def check_nesting(document: Any, what: str = "the body of the request", raw: bytes | None = None) -> None:
    """400 when a decoded JSON document is nested deeper than :data:`MAX_NESTING_DEPTH`. Given the
    ``raw`` bytes it was decoded from, a document with no more brackets than that is not looked at;
    one whose indented encoding has no line that deep is not walked (5 against 75 us for a 3 KB
    VirtualCluster with managedFields and status)."""
    if raw is not None and raw.count(b"{") + raw.count(b"[") <= MAX_NESTING_DEPTH:
        return
    try:  # indented by orjson, the members of a container at depth d start 2d spaces in
        if _TOO_DEEP_LINE not in orjson.dumps(document, option=orjson.OPT_INDENT_2):
            return  # no container at depth MAX_NESTING_DEPTH has a member: none is deeper
    except orjson.JSONEncodeError:  # what orjson cannot encode (its own depth limit included) is walked
        pass
    stack = [(document, 1)] if isinstance(document, dict | list) else []
    while stack:
        value, depth = stack.pop()
        if depth > MAX_NESTING_DEPTH:
            raise errors.bad_request(f"{what} could not be decoded as JSON: exceeded max depth of "
                                     f"{MAX_NESTING_DEPTH}")
        children = value.values() if isinstance(value, dict) else value
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, null deletes, everything else replaces."""
    if not isinstance(patch, dict):
        return json_copy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result
