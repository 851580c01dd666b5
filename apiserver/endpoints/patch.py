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

from apiserver.endpoints.decode import duplicate_fields, parse_json
from apiserver.machinery import errors, gojson, goyaml
from apiserver.machinery.jsonutil import check_nesting, merge_patch

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
ACCEPTED = (JSON_PATCH, MERGE_PATCH, APPLY_PATCH)


@dataclass(frozen=True)
class ApplyPatch:
    """A server-side apply configuration (a JSON object); the field manager merges it.
    ``strict_error``: what fieldValidation=Strict refuses in the body (a key given twice), raised
    only once the apply has succeeded, as kube checks it."""

    config: dict[str, Any]
    strict_error: errors.ApiError | None = None


MAX_JSON_PATCH_OPERATIONS = 10000  # kube's maxJSONPatchOperations
_OP_FIELDS = ("op", "path", "from")


@dataclass(frozen=True)
class Patch:
    """A JSON or merge patch as sent, applied to whichever current state the write meets (maybe
    more than once). As kube, it is decoded only once the object is found, by the rules of
    ``fieldValidation``: Warn and Strict decode it strictly (Go's messages, fields given twice
    noted), Ignore as the patch library does."""

    media: str
    body: bytes
    field_validation: str = "Warn"

    def apply(self, current: dict[str, Any]) -> tuple[Any, list[str]]:
        """The patched document (a new one, ``current`` is left as it is) and the fields the patch
        gives twice (``duplicate field "x"``, for fieldValidation)."""
        strict = self.field_validation in ("Warn", "Strict")
        problems: list[str] = []
        if self.media == MERGE_PATCH:
            if strict:
                document, problems = self._strict("map[string]interface {}", dict)
            else:
                document = self._lenient()
                if document is _INVALID:
                    raise errors.bad_request("Invalid JSON Patch")
            if document is None:
                raise errors.bad_request("Invalid JSON Patch")
            return merge_patch(current, document) if isinstance(document, dict) else document, problems
        if strict:
            ops, problems = self._strict("[]handlers.jsonPatchOp", list)
            problems = [f"json patch {p}" for p in problems]
            for op in ops or []:
                if not isinstance(op, dict):
                    raise errors.bad_request(f"error decoding patch: {gojson.type_error(op, 'handlers.jsonPatchOp')}")
                for name in _OP_FIELDS:
                    if op.get(name) is not None and not isinstance(op[name], str):
                        raise errors.bad_request("error decoding patch: " + gojson.type_error(
                            op[name], "string", f"jsonPatchOp.{name}"))
        ops = self._lenient()
        if ops is _INVALID:
            raise errors.bad_request(gojson.syntax_error(self.body) or "unexpected end of JSON input")
        if ops is not None and not isinstance(ops, list):
            raise errors.bad_request(gojson.type_error(ops, "jsonpatch.Patch"))
        for op in ops or []:
            if op is not None and not isinstance(op, dict):
                raise errors.bad_request(gojson.type_error(op, "jsonpatch.Operation"))
        if len(ops or []) > MAX_JSON_PATCH_OPERATIONS:
            raise errors.ApiError(413, "RequestEntityTooLarge", f"Request entity too large: The allowed maximum "
                                  f"operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {len(ops or [])}")
        return _json_patch(current, ops or []), problems

    def _strict(self, go_type: str, kind: type) -> tuple[Any, list[str]]:
        """The patch as kube's strict decoder reads it into ``go_type``: 400 ``error decoding patch``
        for what does not parse or is not that type; fields given twice returned."""
        document, problem = parse_json(self.body)
        if problem is not None:
            raise errors.bad_request(f"error decoding patch: {problem}")
        check_nesting(document, "the patch", raw=self.body)
        if document is not None and not isinstance(document, kind):
            raise errors.bad_request(f"error decoding patch: {gojson.type_error(document, go_type)}")
        return document, [f'duplicate field "{d}"' for d in duplicate_fields(self.body, document)]

    def _lenient(self) -> Any:
        document, problem = parse_json(self.body)
        if problem is not None:
            return _INVALID
        check_nesting(document, "the patch", raw=self.body)
        return document


_INVALID = object()


def media_type(content_type: str) -> str:
    """The patch's media type, as kube reads it (what precedes a ';', as sent): 415 for a type
    not served."""
    idx = content_type.find(";")
    media = content_type[:idx] if idx > 0 else content_type
    if media not in ACCEPTED:
        raise errors.unsupported_media_type(media, list(ACCEPTED))
    return media


def decode(content_type: str, body: bytes, field_validation: str = "Warn") -> Patch | ApplyPatch:
    """A patch of the given media type (415 for a type not served): an apply's body is decoded now
    (400 for one that is not an object; with Strict, a key twice in a map is refused once the apply
    has succeeded); a JSON or merge patch once the object is found."""
    media = media_type(content_type)
    if media == APPLY_PATCH:
        return _decode_apply(body, field_validation == "Strict")
    return Patch(media, body, field_validation)


def _decode_apply(body: bytes, strict: bool = False) -> ApplyPatch:
    """YAML (JSON is YAML) to a JSON object: 400 ``error decoding YAML`` when it does not parse or is
    not an object; with ``strict``, ``error strict decoding YAML`` for a key given twice."""
    strict_error = None
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        try:
            document = goyaml.to_json_document(body)
        except goyaml.YAMLError as e:
            raise errors.bad_request(f"error decoding YAML: error converting YAML to JSON: {goyaml.yaml_error(e)}") \
                from None
        except TypeError as e:
            raise errors.bad_request(f"error decoding YAML: error converting YAML to JSON: {e}") from None
    if strict:
        duplicates = goyaml.duplicate_keys(body)
        if duplicates:
            strict_error = errors.bad_request("error strict decoding YAML: error converting YAML to JSON: yaml: "
                                              "unmarshal errors:\n  " + "\n  ".join(duplicates))
    check_nesting(document, "the patch", raw=body)
    if document is None:  # null decodes to an empty object, which names no kind
        document = {}
    if not isinstance(document, dict):
        kind = ("array" if isinstance(document, list) else "bool" if isinstance(document, bool)
                else "string" if isinstance(document, str) else "number")
        raise errors.bad_request("error decoding YAML: error unmarshaling JSON: while decoding JSON: json: "
                                 f"cannot unmarshal {kind} into Go value of type map[string]interface {{}}")
    return ApplyPatch(document, strict_error)


def _json_patch(current: dict[str, Any], ops: list[Any]) -> Any:
    """``ops`` applied to a copy of ``current``: whatever goes wrong is kube's generic 422 (the
    patch library's reason is not given)."""
    try:
        return jsonpatch.JsonPatch(ops).apply(current, in_place=False)
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException, TypeError, KeyError, ValueError,
            IndexError, AttributeError):
        raise _rejected() from None


def _rejected() -> errors.ApiError:
    """kube's answer when a JSON patch cannot be applied: a generic 422 with empty details."""
    return errors.ApiError(422, "Invalid", "the server rejected our request due to an error in our request")
