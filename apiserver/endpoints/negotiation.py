"""Wire formats: content negotiation and the shapes objects take on the way out.

One module decides what a client asked for (plain JSON, YAML, Table,
PartialObjectMetadata[List]) and renders it, for get, list and watch alike.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import yaml
from aiohttp import web
from multidict import CIMultiDict

from apiserver.machinery import errors
from apiserver.registry.rest import Column

JSON = "application/json"
YAML = "application/yaml"
PROTOBUF = "application/vnd.kubernetes.protobuf"
ACCEPTED = (JSON, YAML, PROTOBUF)  # what kube lists for a CRD; it encodes no custom resource in protobuf
META_GROUP = "meta.k8s.io"
META_VERSIONS = ("v1", "v1beta1")

AS_OBJECT = ""
AS_TABLE = "Table"
AS_META = "PartialObjectMetadata"
AS_META_LIST = "PartialObjectMetadataList"


@dataclass(frozen=True)
class Target:
    """What the response should be: a media type and an optional ``as=`` conversion."""

    media: str = JSON
    as_kind: str = AS_OBJECT
    meta_version: str = "v1"

    @property
    def is_table(self) -> bool:
        return self.as_kind == AS_TABLE

    @property
    def is_metadata(self) -> bool:
        return self.as_kind in (AS_META, AS_META_LIST)

    @property
    def is_plain_json(self) -> bool:
        """The object itself as JSON: what cached encodings can answer."""
        return self.media == JSON and not self.as_kind


def _media_ranges(accept: str) -> list[tuple[str, dict[str, str]]]:
    out = []
    for part in accept.split(","):
        part = part.strip()
        if not part:
            continue
        media, *params = [p.strip() for p in part.split(";")]
        parsed = {}
        for p in params:
            k, _, v = p.partition("=")
            parsed[k.strip().lower()] = v.strip().strip('"')
        out.append((media.lower(), parsed))
    return out


@functools.lru_cache(maxsize=512)  # clients send a handful of distinct Accept headers, on every request
def negotiate(accept: str | None, *, allow_yaml: bool = True, allow_as: bool = True) -> Target:
    """Pick the first acceptable media range, as kube's negotiation does; else 406 (not cached).
    As for a CRD, protobuf is never chosen for an object, though the 406 names it."""
    if not accept:
        return Target()
    accepted = list(ACCEPTED) if allow_yaml else [JSON]
    for media, params in _media_ranges(accept):
        as_kind = params.get("as", "")
        if as_kind:
            if not allow_as:
                continue
            if media not in (JSON, "*/*", "application/*"):
                continue
            if params.get("g") != META_GROUP or params.get("v") not in META_VERSIONS:
                continue
            if as_kind not in (AS_TABLE, AS_META, AS_META_LIST):
                continue
            return Target(JSON, as_kind, params["v"])
        if media in (JSON, "*/*", "application/*", "application/json-patch+json"):
            return Target(JSON)
        if media == YAML and allow_yaml:
            return Target(YAML)
    raise errors.not_acceptable(accepted)


def dumps(obj: Any) -> bytes:
    return orjson.dumps(obj)


def render(obj: Any, target: Target = Target(), status: int = 200,
           headers: Any = None) -> web.Response:
    if target.media == YAML:
        body = yaml.safe_dump(obj, sort_keys=False, default_flow_style=False).encode()
        content_type = YAML
    else:
        body = orjson.dumps(obj)
        content_type = JSON
    resp = web.Response(body=body, status=status, headers=headers)
    resp.content_type = content_type
    return resp


def warning_headers(warnings: list[str]) -> CIMultiDict[str]:
    """``Warning: 299 - "..."`` headers, one per warning (quotes and control characters escaped)."""
    headers: CIMultiDict[str] = CIMultiDict()
    for w in warnings:
        escaped = w.replace("\\", "\\\\").replace('"', '\\"')
        # Control characters (from field names in the body) cannot go in a header: escape them as Go's %q does.
        escaped = re.sub("[\x00-\x1f\x7f]", lambda m: f"\\x{ord(m.group()):02x}", escaped)
        headers.add("Warning", f'299 - "{escaped}"')
    return headers


def status_response(err: errors.ApiError, accept: str | None = None) -> web.Response:
    """An error's Status in the media type the client accepts first, as kube's ``ErrorNegotiated``
    writes it: JSON, YAML or protobuf (a Status encodes in protobuf even where the resource does
    not); when nothing in Accept will do, indented JSON."""
    media = _status_media(accept) if accept else JSON
    status = err.status()
    headers: CIMultiDict[str] = CIMultiDict(err.headers)
    headers.extend(warning_headers(err.warnings))
    if media == PROTOBUF:
        resp = web.Response(body=protobuf_status(status), status=err.code, headers=headers)
        resp.content_type = PROTOBUF
        return resp
    if media == "":
        resp = web.Response(body=orjson.dumps(status, option=orjson.OPT_INDENT_2), status=err.code, headers=headers)
        resp.content_type = JSON
        return resp
    return render(status, Target(media), err.code, headers)


@functools.lru_cache(maxsize=512)
def _status_media(accept: str) -> str:
    for media, params in _media_ranges(accept):
        if params.get("as"):
            continue  # a conversion (Table, PartialObjectMetadata) is not offered for a Status
        if media in (JSON, "*/*", "application/*"):
            return JSON
        if media in (YAML, PROTOBUF):
            return media
    return ""


def _varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1  # negative int32s are ten-byte varints
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, value: bytes | str | int) -> bytes:
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    data = value.encode() if isinstance(value, str) else value
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def protobuf_status(status: dict[str, Any]) -> bytes:
    """A ``metav1.Status`` in kube's protobuf envelope (``k8s\\0`` + ``runtime.Unknown``), fields as
    gogo-protobuf writes them (every string, even empty, of a struct that is present)."""
    meta = _field(1, "") + _field(2, "") + _field(3, "")
    body = _field(1, meta) + _field(2, status.get("status", "")) + _field(3, status.get("message", "")) + \
        _field(4, status.get("reason", ""))
    details = status.get("details")
    if details is not None:
        inner = _field(1, details.get("name", "")) + _field(2, details.get("group", "")) + \
            _field(3, details.get("kind", ""))
        for cause in details.get("causes", []):
            inner += _field(4, _field(1, cause.get("reason", "")) + _field(2, cause.get("message", "")) +
                            _field(3, cause.get("field", "")))
        inner += _field(5, details.get("retryAfterSeconds", 0)) + _field(6, details.get("uid", ""))
        body += _field(5, inner)
    body += _field(6, status.get("code", 0))
    unknown = _field(1, _field(1, "v1") + _field(2, "Status")) + _field(2, body) + _field(3, "") + _field(4, "")
    return b"k8s\x00" + unknown


def success_status(details: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
    if details:
        body["details"] = details
    return body


def partial_metadata(obj: dict[str, Any], meta_version: str = "v1") -> dict[str, Any]:
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": f"{META_GROUP}/{meta_version}",
        "metadata": obj.get("metadata", {}),
    }


def partial_metadata_list(items: Sequence[dict[str, Any]], list_meta: dict[str, Any],
                          meta_version: str = "v1") -> dict[str, Any]:
    return {
        "kind": "PartialObjectMetadataList",
        "apiVersion": f"{META_GROUP}/{meta_version}",
        "metadata": list_meta,
        "items": [partial_metadata(o, meta_version) for o in items],
    }


# -- tables -------------------------------------------------------------------------

INCLUDE_OBJECT = ("None", "Metadata", "Object")


def include_object(query: dict[str, str]) -> str:
    value = query.get("includeObject") or "Metadata"
    if value not in INCLUDE_OBJECT:
        raise errors.bad_request(
            f'includeObject must be one of "None", "Metadata", "Object": unrecognized value "{value}"')
    return value


def table(columns: Sequence[Column], objects: Sequence[dict[str, Any]],
          cells: Callable[[dict[str, Any]], list[Any]], include: str, meta_version: str = "v1",
          list_meta: dict[str, Any] | None = None, headers: bool = True) -> dict[str, Any]:
    rows = []
    for obj in objects:
        row: dict[str, Any] = {"cells": cells(obj)}
        if include == "Object":
            row["object"] = obj
        elif include == "Metadata":
            row["object"] = partial_metadata(obj, meta_version)
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": f"{META_GROUP}/{meta_version}",
        "metadata": list_meta or {},
        "columnDefinitions": [c.definition() for c in columns] if headers else [],
        "rows": rows,
    }


