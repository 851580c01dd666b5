"""Patch application: JSON merge patch (RFC 7386) and JSON patch (RFC 6902).

Strategic merge patch has no meaning for a custom schema and server-side apply is
not offered, so both are refused with 415 listing what is accepted (as kube-apiserver
does for custom resources).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jsonpatch
import jsonpointer
import orjson

from apiserver.machinery import errors
from apiserver.machinery.jsonutil import check_nesting, merge_patch

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
ACCEPTED = (JSON_PATCH, MERGE_PATCH)


@dataclass(frozen=True)
class Patch:
    """A decoded patch, applied to whichever current state the write meets (maybe more than once)."""

    media: str
    document: Any

    def apply(self, current: dict[str, Any]) -> dict[str, Any]:
        """The patched object: a new one, ``current`` is left as it is."""
        if self.media == MERGE_PATCH:
            result = merge_patch(current, self.document)
        else:
            result = _json_patch(current, self.document)
        if not isinstance(result, dict):
            raise errors.ApiError(422, "Invalid", "the patch must leave an object at the document root")
        return result


def decode(content_type: str, body: bytes) -> Patch:
    """A patch of the given media type: 415 for a type not served, 400 for a body that is not one."""
    media = content_type.split(";")[0].strip().lower()
    if media not in ACCEPTED:
        raise errors.unsupported_media_type(media, list(ACCEPTED))
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise errors.bad_request(f"error decoding patch: {e}") from None
    check_nesting(document, "the patch", raw=body)
    if media == MERGE_PATCH and not isinstance(document, dict):
        raise errors.bad_request("error decoding patch: a merge patch must be a JSON object")
    return Patch(media, document)


def _json_patch(current: dict[str, Any], document: Any) -> Any:
    if not isinstance(document, list):
        raise errors.bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    try:
        ops = jsonpatch.JsonPatch(document)
    except (jsonpatch.InvalidJsonPatch, jsonpointer.JsonPointerException, TypeError, KeyError, ValueError) as e:
        raise errors.bad_request(f"error decoding patch: {e}") from None
    try:
        return ops.apply(current, in_place=False)
    except jsonpatch.JsonPatchTestFailed:
        failed = next((op.get("path", "") for op in document if isinstance(op, dict) and op.get("op") == "test"
                       and not _test_holds(current, op)), "")
        raise _rejected(f"testing value {failed} failed: test failed") from None
    except (jsonpatch.JsonPatchConflict, jsonpointer.JsonPointerException) as e:
        raise _rejected(str(e)) from None
    except (jsonpatch.InvalidJsonPatch, TypeError, KeyError, ValueError) as e:
        raise errors.bad_request(f"error decoding patch: {e}") from None


def _test_holds(doc: Any, op: dict[str, Any]) -> bool:
    try:
        return bool(jsonpointer.resolve_pointer(doc, op.get("path", "")) == op.get("value"))
    except jsonpointer.JsonPointerException:
        return False


def _rejected(detail: str) -> errors.ApiError:
    """kube's answer when a JSON patch cannot be applied: 422 with the reason as a cause."""
    return errors.ApiError(422, "Invalid", "the server rejected our request due to an error in our request",
                           causes=[errors.Cause(errors.UNEXPECTED_SERVER_RESPONSE, detail)])
