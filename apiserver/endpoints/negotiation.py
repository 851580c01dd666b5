"""Wire formats: content negotiation and the shapes objects take on the way out.

One module decides what a client asked for (plain JSON, YAML, Table,
PartialObjectMetadata[List]) and renders it, for get, list and watch alike.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import yaml
from aiohttp import web

from apiserver.machinery import errors
from apiserver.registry.rest import Column

JSON = "application/json"
YAML = "application/yaml"
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
    """Pick the first acceptable media range, as kube's negotiation does; else 406 (not cached)."""
    if not accept:
        return Target()
    accepted = [JSON, YAML] if allow_yaml else [JSON]
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
           headers: dict[str, str] | None = None) -> web.Response:
    if target.media == YAML:
        body = yaml.safe_dump(obj, sort_keys=False, default_flow_style=False).encode()
        content_type = YAML
    else:
        body = orjson.dumps(obj)
        content_type = JSON
    resp = web.Response(body=body, status=status, headers=headers)
    resp.content_type = content_type
    return resp


def status_response(err: errors.ApiError) -> web.Response:
    return render(err.status(), status=err.code, headers=err.headers or None)


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
        "items": [partial_metadata(o, meta_version) | {"apiVersion": o.get("apiVersion"), "kind": o.get("kind")}
                  for o in items],
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


