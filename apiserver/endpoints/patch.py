"""Patch bodies: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and server-side apply.

Strategic merge patch has no meaning for a custom schema, so it is refused with 415 listing
what is accepted (as kube-apiserver does for custom resources). An apply body (YAML or JSON)
decodes to an :class:`ApplyPatch`: the configuration the registry's field manager merges.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jsonpatch
import jsonpointer
import orjson
import yaml

from apiserver.machinery import errors
from apiserver.machinery.jsonutil import check_nesting, merge_patch

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
ACCEPTED = (JSON_PATCH, MERGE_PATCH, APPLY_PATCH)


class _YAMLLoader(yaml.CSafeLoader):
    """YAML as sigs.k8s.io/yaml reads it into JSON: timestamps stay strings."""


_YAMLLoader.yaml_implicit_resolvers = {
    key: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for key, resolvers in yaml.CSafeLoader.yaml_implicit_resolvers.items()}


@dataclass(frozen=True)
class ApplyPatch:
    """A server-side apply configuration (a JSON object); the field manager merges it."""

    config: dict[str, Any]


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


def media_type(content_type: str) -> str:
    """The patch's media type (parameters ignored): 415 for a type not served."""
    media = content_type.split(";")[0].strip().lower()
    if media not in ACCEPTED:
        raise errors.unsupported_media_type(media, list(ACCEPTED))
    return media


def decode(content_type: str, body: bytes) -> Patch | ApplyPatch:
    """A patch of the given media type: 415 for a type not served, 400 for a body that is not one."""
    media = media_type(content_type)
    if media == APPLY_PATCH:
        return _decode_apply(body)
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise errors.bad_request(f"error decoding patch: {e}") from None
    check_nesting(document, "the patch", raw=body)
    if media == MERGE_PATCH and not isinstance(document, dict):
        raise errors.bad_request("error decoding patch: a merge patch must be a JSON object")
    return Patch(media, document)


def _decode_apply(body: bytes) -> ApplyPatch:
    """YAML (JSON is YAML) to a JSON object: 400 ``error encoding patch`` when it does not parse,
    ``error decoding YAML`` when it is not an object."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        try:
            document = yaml.load(body, Loader=_YAMLLoader)  # noqa: S506 - a safe loader
            document = orjson.loads(orjson.dumps(document))
        except (yaml.YAMLError, TypeError) as e:
            raise errors.bad_request(f"error encoding patch: {e}") from None
    check_nesting(document, "the patch", raw=body)
    if document is None:  # null decodes to an empty object, which names no kind
        document = {}
    if not isinstance(document, dict):
        kind = ("array" if isinstance(document, list) else "bool" if isinstance(document, bool)
                else "string" if isinstance(document, str) else "number")
        raise errors.bad_request("error decoding YAML: error unmarshaling JSON: while decoding JSON: json: "
                                 f"cannot unmarshal {kind} into Go value of type map[string]interface {{}}")
    return ApplyPatch(document)


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
