"""Patch application: JSON merge patch (RFC 7386) and JSON patch (RFC 6902).

Strategic merge patch has no meaning for a custom schema and server-side apply is
not offered, so both are refused with 415 listing what is accepted (as kube-apiserver
does for custom resources).
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import jsonpointer
import orjson

from . import errors

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
ACCEPTED = (JSON_PATCH, MERGE_PATCH)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, null deletes, everything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def apply(content_type: str, current: dict[str, Any], body: bytes) -> dict[str, Any]:
    """Apply a patch of the given media type to ``current``; the result is a new object."""
    media = content_type.split(";")[0].strip().lower()
    if media not in ACCEPTED:
        raise errors.unsupported_media_type(media, list(ACCEPTED))
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise errors.bad_request(f"error decoding patch: {e}") from None
    if media == MERGE_PATCH:
        if not isinstance(document, dict):
            raise errors.bad_request("error decoding patch: a merge patch must be a JSON object")
        result = merge_patch(current, document)
    else:
        result = _json_patch(current, document)
    if not isinstance(result, dict):
        raise errors.ApiError(422, "Invalid", "the patch must leave an object at the document root")
    return result


def _json_patch(current: dict[str, Any], document: Any) -> Any:
    if not isinstance(document, list):
        raise errors.bad_request("error decoding patch: a JSON patch must be an array of operations")
    try:
        ops = jsonpatch.JsonPatch(document)
        return ops.apply(current, in_place=False)
    except jsonpatch.JsonPatchTestFailed as e:
        raise errors.ApiError(422, "Invalid", f"the server rejected our request due to an error in our "
                                               f"request: test operation failed: {e}") from None
    except (jsonpatch.JsonPatchConflict, jsonpointer.JsonPointerException) as e:
        raise errors.ApiError(422, "Invalid", f"the server rejected our request due to an error in our "
                                               f"request: {e}") from None
    except (jsonpatch.InvalidJsonPatch, TypeError, KeyError, ValueError) as e:
        raise errors.bad_request(f"error decoding patch: {e}") from None
