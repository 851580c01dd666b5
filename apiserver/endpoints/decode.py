"""Request bodies into objects (k8s.io/apimachinery's JSON serializer with the CRD decoder's
strictness): JSON that Go's decoder takes, the kind and group-version the URL serves, unknown fields
pruned by the resource's schema and duplicate fields found, both reported as ``fieldValidation``
asks (Strict: 400, Warn: warnings, Ignore: nothing)."""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

from apiserver.apis.resource import ResourceInfo
from apiserver.machinery import errors
from apiserver.machinery.jsonutil import MAX_NESTING_DEPTH, check_nesting
from apiserver.registry.rest import Obj, Strategy

__all__ = ["Decoder", "find_duplicate_fields", "load_body"]


def load_body(body: bytes) -> Any:
    """Decode a JSON request body; 400 on anything malformed."""
    if not body:
        raise errors.bad_request("the request body is empty")
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        # What Go's decoder takes and orjson does not: integers beyond 64 bits (validation
        # answers for them) and unpaired surrogate escapes (decoded as U+FFFD, as Go does).
        # NaN and Infinity are not JSON: refused, as Go does.
        try:
            document = json.loads(body, parse_constant=_not_json)
        except RecursionError:
            raise errors.bad_request("the body of the request could not be decoded as JSON: exceeded max depth "
                                     f"of {MAX_NESTING_DEPTH}") from None
        except (ValueError, UnicodeDecodeError) as e:
            raise errors.bad_request(f"the body of the request could not be decoded as JSON: {e}") from None
        check_nesting(document)
        return _replace_surrogates(document)
    check_nesting(document, raw=body)
    return document


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


def find_duplicate_fields(body: bytes) -> list[str]:
    """Duplicate keys in a JSON body (orjson silently keeps the last one)."""
    dups: list[str] = []

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                dups.append(k)
            seen.add(k)
        return dict(pairs)
    try:
        json.loads(body, object_pairs_hook=hook)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return []
    return dups


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

    def check_type(self, obj: Any) -> Obj:
        """The body must be this kind in this group-version (kube answers 400 otherwise)."""
        if not isinstance(obj, dict):
            raise errors.bad_request("the body of the request must be a JSON object")
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if not api_version or not kind:
            raise errors.bad_request("Object 'Kind' is missing in the request body" if not kind
                                     else "Object 'apiVersion' is missing in the request body")
        if api_version != self.info.group_version or kind != self.info.kind:
            raise errors.bad_request(
                f"the API version in the data ({api_version}) does not match the expected API version "
                f"({self.info.group_version})" if api_version != self.info.group_version else
                f"the kind in the data ({kind}) does not match the expected kind ({self.info.kind})")
        meta = obj.get("metadata")
        if meta is None:  # absent or null (a patch may remove it)
            obj["metadata"] = meta = {}
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be an object")
        return obj

    def decode(self, document: Any, field_validation: str, body: bytes | None = None,
               name: str | None = None, patched: bool = False) -> tuple[Obj, list[str]]:
        """The object and its fieldValidation warnings. ``body`` is the raw JSON it came from (for
        duplicate fields); ``name`` the name on the URL, which the object must not contradict (a
        patched object must not even empty it)."""
        obj = self.check_type(document)
        unknown = self.strategy.prune(obj)
        drop_empty_metadata(obj["metadata"])
        warnings: list[str] = []
        if field_validation != "Ignore":
            warnings = [f'unknown field "{p}"' for p in unknown]
            if body is not None:
                warnings += [f'duplicate field "{d}"' for d in find_duplicate_fields(body)]
            if warnings and field_validation == "Strict":
                raise errors.bad_request("strict decoding error: " + ", ".join(warnings))
        if name is not None:
            body_name = obj["metadata"].get("name", name if patched else None)
            if (patched or body_name) and body_name != name:
                raise errors.bad_request(
                    f"the name of the object ({body_name}) does not match the name on the URL ({name})")
        return obj, warnings
