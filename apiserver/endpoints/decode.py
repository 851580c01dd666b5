"""Request bodies into objects, as kube-apiserver's codec for a custom resource decodes them: JSON
or YAML by the Content-Type, Go's JSON errors word for word, the kind and group-version the URL
serves, unknown fields pruned by the resource's schema and fields given twice found, both reported
as ``fieldValidation`` asks (Strict: 400, Warn: warnings, Ignore: nothing).

A body that names another kind of the group is decoded and refused by validation (422), as the
CRD's validator refuses it; one of another group-version is refused here (400).
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

from apiserver.apis.resource import ResourceInfo
from apiserver.machinery import errors, gojson, goyaml
from apiserver.machinery.golang import go_json, go_quote
from apiserver.machinery.jsonutil import MAX_NESTING_DEPTH, check_nesting
from apiserver.registry.rest import Obj, Strategy

__all__ = ["FIND_KIND", "INPUT_MEDIA_TYPES", "Decoder", "duplicate_fields", "input_media", "load_json", "parse_json",
           "patched_object_error", "summarize"]

JSON, YAML, PROTOBUF = "application/json", "application/yaml", "application/vnd.kubernetes.protobuf"
INPUT_MEDIA_TYPES = (JSON, YAML, PROTOBUF)  # what kube lists for a CRD's bodies (protobuf decodes none of them)
FIND_KIND = 'struct { APIVersion string "json:\\"apiVersion,omitempty\\""; Kind string "json:\\"kind,omitempty\\"" }'
"""The type kube's JSON serializer first reads a body into, to find its kind (``SimpleMetaFactory``)."""

_OBJECT_META_FIELDS = {"name": "string", "generateName": "string", "namespace": "string", "selfLink": "string",
                       "uid": "types.UID", "resourceVersion": "string", "generation": "int64",
                       "labels": "map[string]string", "annotations": "map[string]string",
                       "finalizers": "[]string", "deletionGracePeriodSeconds": "int64"}


def input_media(content_type: str | None, accepted: tuple[str, ...] = INPUT_MEDIA_TYPES) -> str:
    """The body's media type (parameters ignored, JSON when absent): 415 for one not decoded."""
    media = (content_type or "").split(";")[0].strip().lower() or JSON
    if media not in (JSON, YAML):
        raise errors.unsupported_media_type(media, list(accepted))
    return media


def summarize(data: bytes, limit: int = 30) -> str:
    """kube's ``summarizeData``: a JSON object's first bytes as text, anything else in hex."""
    if not data:
        return "<empty>"
    if data[:1] == b"{":
        text = data[:limit].decode("utf-8", "replace")
        return text + " ..." if len(data) > limit else text
    return data[:limit].hex() + (" ..." if len(data) > limit else "")


def parse_json(body: bytes) -> tuple[Any, str | None]:
    """(document, None), or (None, Go's syntax error): orjson reads what it can (most bodies, fast);
    what it refuses is judged by Go's scanner and, when Go takes it, decoded as Go decodes it."""
    try:
        return orjson.loads(body), None
    except orjson.JSONDecodeError:
        pass
    problem = gojson.syntax_error(body)
    return (None, problem) if problem is not None else (load_json(body), None)


def load_json(body: bytes) -> Any:
    """A document Go's scanner has accepted, decoded as Go decodes it: integers beyond 64 bits kept
    (validation answers for them), invalid UTF-8 and unpaired surrogate escapes as U+FFFD."""
    text = body.decode("utf-8", "replace")
    try:
        document = json.loads(text, parse_constant=_not_json)
    except RecursionError:
        raise errors.bad_request("the body of the request could not be decoded as JSON: exceeded max depth of "
                                 f"{MAX_NESTING_DEPTH}") from None
    except ValueError as e:
        raise errors.bad_request(f"the body of the request could not be decoded as JSON: {e}") from None
    return _replace_surrogates(document) if _SURROGATE_ESCAPE.search(text) else document


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _not_json(constant: str) -> Any:
    raise ValueError(f"invalid character '{constant[0]}' looking for beginning of value")


def _replace_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        return re.sub("[\ud800-\udfff]", "\ufffd", value)
    if isinstance(value, list):
        return [_replace_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {_replace_surrogates(k): _replace_surrogates(v) for k, v in value.items()}
    return value


class _Pairs(list):  # type: ignore[type-arg]
    """An object's members in order, duplicates kept (to find fields given twice)."""


def _members_and_colons(document: Any) -> int:
    """How many object members a decoded JSON document holds, plus the colons in its strings: the
    colons of its compact encoding, which writes one per member and escapes none in a string
    (4 against 46 us for a 3 KB VirtualCluster); -1 for what orjson cannot encode."""
    try:
        return orjson.dumps(document).count(b":")
    except orjson.JSONEncodeError:
        return -1


def duplicate_fields(body: bytes, decoded: Any = None) -> list[str]:
    """Paths of fields given twice in a JSON body (``spec.kubeconfig``, ``spec.list[0].f``), in order.

    Given the document ``body`` decoded to (where a repeated key kept its last value), the second
    parse is skipped when the colons tell there is nothing to find: a JSON text's colons are one per
    member and those inside its strings, so without ``\\u`` escapes (which can spell a colon), a body
    whose colons the document accounts for gave no key twice."""
    if decoded is not None and b"\\u" not in body and body.count(b":") == _members_and_colons(decoded):
        return []
    try:
        document = json.loads(body, object_pairs_hook=_Pairs)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return []
    out: list[str] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, _Pairs):
            seen: set[str] = set()
            for key, value in node:
                child = f"{path}.{key}" if path else key
                if key in seen:
                    out.append(child)
                seen.add(key)
                walk(value, child)
        elif isinstance(node, list):
            for i, item in enumerate(node):
                walk(item, f"{path}[{i}]")
    walk(document, "")
    return out


def patched_object_error(patched: Any, detail: str) -> errors.ApiError:
    """kube's 422 when a patched object does not decode: the whole object, as it encodes it, is the
    bad value of the field ``patch``."""
    value = go_quote(go_json(patched, sort_keys=True))
    cause = errors.Cause(errors.FIELD_VALUE_INVALID, f"Invalid value: {value}: {detail}", "patch")
    return errors.ApiError(422, "Invalid", f' "" is invalid: patch: {cause.message}', causes=[cause])


# ObjectMeta fields Go leaves out when empty (omitempty): kube-apiserver round-trips a custom
# resource's metadata through the typed ObjectMeta as it decodes it (apiextensions-apiserver
# ``schema/objectmeta`` Coerce), so an empty one is gone before field management or storage sees it.
OMITTED_WHEN_EMPTY = ("generateName", "labels", "annotations", "finalizers", "ownerReferences")


def drop_empty_metadata(meta: dict[str, Any]) -> None:
    for key in OMITTED_WHEN_EMPTY:
        if key in meta and (meta[key] is None or meta[key] == "" or meta[key] == {} or meta[key] == []):
            del meta[key]


class Decoder:
    """Objects of one resource from request bodies and patched states."""

    def __init__(self, info: ResourceInfo, strategy: Strategy) -> None:
        self.info = info
        self.strategy = strategy

    def _unrecognized(self, detail: str, body: bytes) -> errors.ApiError:
        return errors.bad_request(f"the object provided is unrecognized (must be of type {self.info.kind}): "
                                  f"{detail} ({summarize(body)})")

    def _cannot_handle(self, kind: str, version: str, detail: str) -> errors.ApiError:
        return errors.bad_request(f'{kind} in version "{version}" cannot be handled as a {self.info.kind}: {detail}')

    def read(self, body: bytes, media: str = JSON) -> Any:
        """The document of a request body: YAML converted to JSON, Go's scanner's and kind-finding
        errors worded as kube words them."""
        data = body
        if media == YAML:
            try:
                document = goyaml.to_json_document(body)
            except goyaml.YAMLError as e:
                raise self._unrecognized(f"error converting YAML to JSON: {goyaml.yaml_error(e)}", body) from None
            except TypeError as e:
                raise self._unrecognized(f"error converting YAML to JSON: {e}", body) from None
            data = json.dumps(document).encode()
        else:
            document, problem = parse_json(body)
            if problem is not None:
                raise self._unrecognized(f"couldn't get version/kind; json parse error: {problem}", body)
        check_nesting(document, raw=data)
        if document is not None and not isinstance(document, dict):
            raise self._unrecognized(
                f"couldn't get version/kind; json parse error: {gojson.type_error(document, FIND_KIND)}", body)
        for key in ("apiVersion", "kind"):
            value = (document or {}).get(key)
            if value is not None and not isinstance(value, str):
                raise self._unrecognized(f"couldn't get version/kind; json parse error: "
                                         f"{gojson.type_error(value, 'string', '.' + key)}", body)
        api_version = (document or {}).get("apiVersion") or ""
        if api_version.count("/") > 1:
            raise self._unrecognized(f"unexpected GroupVersion string: {api_version}", body)
        if not (document or {}).get("kind"):
            raise self._unrecognized(f"Object 'Kind' is missing in '{body.decode('utf-8', 'replace')}'", body)
        return document

    def decode(self, document: Obj, field_validation: str, body: bytes | None = None) -> tuple[Obj, list[str]]:
        """The object and its fieldValidation warnings, from a document :meth:`read` returned.
        ``body`` is the JSON it came from (for fields given twice)."""
        obj = document
        api_version, kind = obj.get("apiVersion") or "", obj["kind"]
        group, _, version = api_version.rpartition("/")
        problem = self._metadata_problem(obj)
        if problem:
            raise self._cannot_handle(kind, version, problem)
        problems = [f'duplicate field "{d}"' for d in duplicate_fields(body, obj)] if body is not None else []
        problems += [f'unknown field "{p}"' for p in self._prune(obj, group, version, kind)]
        warnings: list[str] = []
        if problems and field_validation == "Strict":
            raise self._cannot_handle(kind, version, "strict decoding error: " + ", ".join(problems))
        if field_validation == "Warn":
            warnings = problems
        if api_version != self.info.group_version:
            error = errors.bad_request(f"the API version in the data ({api_version}) does not match the expected "
                                       f"API version ({self.info.group_version})")
            error.warnings = warnings  # kube has added them before it compares
            raise error
        if obj.get("metadata") is None:
            obj["metadata"] = {}
        drop_empty_metadata(obj["metadata"])
        return obj, warnings

    def decode_patched(self, patched: Any, field_validation: str, problems: list[str], name: str) -> tuple[Obj, list[str]]:
        """A patched state as the object to write: ``problems`` are what strict decoding found in
        the patch itself (fields given twice). Strict refuses them with what the object has that the
        schema does not know (422, naming the patched object); Warn returns them as warnings."""
        kind = patched.get("kind") if isinstance(patched, dict) else None
        if not isinstance(kind, str) or not kind:
            raise patched_object_error(patched, f"Object 'Kind' is missing in '{go_json(patched, sort_keys=True)}'")
        api_version = patched.get("apiVersion") if isinstance(patched.get("apiVersion"), str) else ""
        group, _, version = api_version.rpartition("/")
        original = go_json(patched, sort_keys=True)
        problem = self._metadata_problem(patched)
        if problem:
            raise patched_object_error(patched, problem)
        problems = problems + [f'unknown field "{p}"' for p in self._prune(patched, group, version, kind)]
        if problems and field_validation == "Strict":
            cause = errors.Cause(errors.FIELD_VALUE_INVALID, f"Invalid value: {go_quote(original)}: strict decoding "
                                 "error: " + ", ".join(problems), "patch")
            raise errors.ApiError(422, "Invalid", f' "" is invalid: patch: {cause.message}', causes=[cause])
        if patched.get("metadata") is None:
            patched["metadata"] = {}
        drop_empty_metadata(patched["metadata"])
        body_name = patched["metadata"].get("name", "")
        if body_name != name:
            raise errors.bad_request(f"the name of the object ({body_name}) does not match the name on the URL ({name})")
        return patched, problems if field_validation == "Warn" else []

    @staticmethod
    def _metadata_problem(obj: Obj) -> str:
        """What keeps ObjectMeta from decoding as Go decodes it (``GetObjectMetaWithOptions``), or ""."""
        meta = obj.get("metadata")
        if meta is None:
            return ""
        if not isinstance(meta, dict):
            return gojson.type_error(meta, "v1.ObjectMeta")
        for field, go_type in _OBJECT_META_FIELDS.items():
            value = meta.get(field)
            if value is None:
                continue
            if go_type in ("string", "types.UID"):
                wrong = not isinstance(value, str)
            elif go_type == "int64":
                wrong = isinstance(value, bool) or not isinstance(value, int | float)
            elif go_type == "map[string]string":
                wrong = not isinstance(value, dict)
                for item in (value.values() if not wrong else ()):
                    if item is not None and not isinstance(item, str):
                        return gojson.type_error(item, "string", f"ObjectMeta.{field}")  # Go names no map key
            else:
                wrong = not isinstance(value, list)
                for item in (value if not wrong else ()):
                    if item is not None and not isinstance(item, str):
                        return gojson.type_error(item, "string", f"ObjectMeta.{field}")  # nor index
            if wrong:
                return gojson.type_error(value, go_type, f"ObjectMeta.{field}")
        return ""

    def _prune(self, obj: Obj, group: str, version: str, kind: str) -> list[str]:
        """What the schema does not know, dropped, in kube's order. Only this group's kind is pruned;
        of a version not served, nothing but apiVersion, kind and metadata is known."""
        if group != self.info.group or kind != self.info.kind:
            return []
        if version != self.info.version:
            unknown = [k for k in obj if k not in ("apiVersion", "kind", "metadata")]
            for key in unknown:
                del obj[key]
            return unknown
        return self.strategy.prune(obj)
