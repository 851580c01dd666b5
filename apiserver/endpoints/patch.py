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
    """A server-side apply configuration (a JSON object); the field manager merges it.
    ``strict_error``: what fieldValidation=Strict refuses in the body (a key given twice), raised
    only once the apply has succeeded, as kube checks it."""

    config: dict[str, Any]
    strict_error: errors.ApiError | None = None


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


def decode(content_type: str, body: bytes, strict: bool = False) -> Patch | ApplyPatch:
    """A patch of the given media type: 415 for a type not served, 400 for a body that is not one.
    ``strict`` (fieldValidation=Strict): an apply body with a key twice in a map is refused."""
    media = media_type(content_type)
    if media == APPLY_PATCH:
        return _decode_apply(body, strict)
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise errors.bad_request(f"error decoding patch: {e}") from None
    check_nesting(document, "the patch", raw=body)
    if media == MERGE_PATCH and not isinstance(document, dict):
        raise errors.bad_request("error decoding patch: a merge patch must be a JSON object")
    return Patch(media, document)


def _duplicate_keys(node: yaml.Node, out: list[str]) -> list[str]:
    """go-yaml's strict errors: ``line N: key "k" already set in map`` for each repeated key."""
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode):
                if key.value in seen:
                    out.append(f'line {key.start_mark.line + 1}: key "{key.value}" already set in map')
                seen.add(key.value)
            _duplicate_keys(value, out)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _duplicate_keys(item, out)
    return out


def _yaml_error(e: yaml.YAMLError) -> str:
    """go-yaml's wording of a syntax error, as near as PyYAML's report allows."""
    if isinstance(e, yaml.MarkedYAMLError) and e.problem_mark is not None:
        return f"yaml: line {e.problem_mark.line}: {e.problem}"
    return f"yaml: {e}"


def _decode_apply(body: bytes, strict: bool = False) -> ApplyPatch:
    """YAML (JSON is YAML) to a JSON object: 400 ``error decoding YAML`` when it does not parse or is
    not an object; with ``strict``, ``error strict decoding YAML`` for a key given twice."""
    strict_error = None
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        try:
            document = yaml.load(body, Loader=_YAMLLoader)  # noqa: S506 - a safe loader
            document = orjson.loads(orjson.dumps(document))
        except yaml.YAMLError as e:
            raise errors.bad_request(f"error decoding YAML: error converting YAML to JSON: {_yaml_error(e)}") \
                from None
        except TypeError as e:
            raise errors.bad_request(f"error decoding YAML: error converting YAML to JSON: {e}") from None
    if strict:
        try:
            duplicates = _duplicate_keys(yaml.compose(body, Loader=_YAMLLoader), [])  # noqa: S506
        except yaml.YAMLError:
            duplicates = []
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
