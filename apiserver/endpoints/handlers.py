"""HTTP handlers for a resource: each decodes its request, calls the registry with objects, and
renders the result in the negotiated shape (JSON, YAML, Table, PartialObjectMetadata).

Object semantics live in :mod:`apiserver.registry.store`; what a request asks for is read by
:mod:`apiserver.endpoints.request`, bodies by :mod:`apiserver.endpoints.decode`, watches are served
by :mod:`apiserver.endpoints.watch`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web
from multidict import CIMultiDict

from apiserver.endpoints import negotiation, patch
from apiserver.endpoints.decode import Decoder, load_body
from apiserver.endpoints.request import (
    delete_options,
    list_options,
    patch_options,
    request_info,
    write_options,
)
from apiserver.endpoints.watch import WatchServer
from apiserver.registry.rest import Obj, Result, WriteOptions
from apiserver.registry.store import Registry
from apiserver.storage.interface import Entry

__all__ = ["ResourceHandlers"]


def _warning_headers(warnings: list[str]) -> CIMultiDict[str]:
    headers: CIMultiDict[str] = CIMultiDict()
    for w in warnings:
        escaped = w.replace("\\", "\\\\").replace('"', '\\"')
        # Control characters (from field names in the body) cannot go in a header: escape them as Go's %q does.
        escaped = re.sub("[\x00-\x1f\x7f]", lambda m: f"\\x{ord(m.group()):02x}", escaped)
        headers.add("Warning", f'299 - "{escaped}"')
    return headers


class ResourceHandlers:
    """Handlers for one resource served by one :class:`Registry`."""

    def __init__(self, registry: Registry, on_watch_change: Callable[[int], Any] | None = None) -> None:
        self.registry = registry
        self.strategy = registry.strategy
        self.info = registry.info
        self.decoder = Decoder(self.info, self.strategy)
        self.watches = WatchServer(registry, on_watch_change)

    # -- rendering -------------------------------------------------------------------

    def _render_object(self, obj: dict[str, Any], target: negotiation.Target, query: Any, status: int = 200,
                       headers: Any = None) -> web.Response:
        if target.is_table:
            body = negotiation.table(self.strategy.columns, [obj], self.strategy.cells,
                                     negotiation.include_object(query), target.meta_version,
                                     {"resourceVersion": obj["metadata"].get("resourceVersion", "")})
        elif target.is_metadata:
            body = negotiation.partial_metadata(obj, target.meta_version)
        else:
            body = obj
        return negotiation.render(body, target, status, headers)

    def _render_list(self, items: list[dict[str, Any]], list_meta: dict[str, Any], target: negotiation.Target,
                     query: Any) -> web.Response:
        if target.is_table:
            body = negotiation.table(self.strategy.columns, items, self.strategy.cells,
                                     negotiation.include_object(query), target.meta_version, list_meta)
        elif target.is_metadata:
            body = negotiation.partial_metadata_list(items, list_meta, target.meta_version)
        else:
            body = {"kind": self.info.list_kind, "apiVersion": self.info.group_version,
                    "metadata": list_meta, "items": items}
        return negotiation.render(body, target)

    def _fast_list(self, entries: list[Entry], list_meta: dict[str, Any]) -> web.Response:
        """Plain JSON lists splice each object's cached encoding instead of encoding it again."""
        head = orjson.dumps({"apiVersion": self.info.group_version, "kind": self.info.list_kind,
                             "metadata": list_meta})
        body = head[:-1] + b',"items":[' + b",".join(e.json() for e in entries) + b"]}"
        return web.Response(body=body, content_type=negotiation.JSON)

    def _write_result(self, result: Result, warnings: list[str], target: negotiation.Target,
                      request: web.Request, status: int) -> web.Response:
        return self._render_object(result.obj, target, request.rel_url.query, status,
                                   _warning_headers(warnings + result.warnings) or None)

    async def _body(self, request: web.Request, opts: WriteOptions, name: str | None = None) -> tuple[Obj, list[str]]:
        raw = await request.read()
        return self.decoder.decode(load_body(raw), opts.field_validation, raw, name)

    # -- collection ------------------------------------------------------------------

    async def list_or_watch(self, request: web.Request) -> web.StreamResponse:
        namespace = request.match_info.get("namespace")
        query = request.rel_url.query
        target = negotiation.negotiate(request.headers.get("Accept"))
        info = request_info(request)
        if info.watch_error is not None:
            raise info.watch_error
        watch = info.watch
        opts = list_options(request, watch=watch)
        if watch:
            return await self.watches.serve(request, namespace, opts, target)
        listed = await self.registry.list(namespace, opts)
        if target.is_plain_json:
            return self._fast_list(listed.entries, listed.list_meta())
        return self._render_list([e.obj for e in listed.entries], listed.list_meta(), target, query)

    async def create(self, request: web.Request) -> web.Response:
        target = negotiation.negotiate(request.headers.get("Accept"), allow_as=False)
        opts = write_options(request, "CreateOptions")
        obj, warnings = await self._body(request, opts)
        result = await self.registry.create(request.match_info["namespace"], obj, opts)
        return self._write_result(result, warnings, target, request, 201)

    async def delete_collection(self, request: web.Request) -> web.Response:
        namespace = request.match_info.get("namespace")
        target = negotiation.negotiate(request.headers.get("Accept"), allow_as=False)
        opts = write_options(request)
        selection = list_options(request)
        options = await self._delete_options(request)
        opts.dry_run = opts.dry_run or options.dry_run
        items = await self.registry.delete_collection(namespace, selection, options, opts)
        body = {"kind": self.info.list_kind, "apiVersion": self.info.group_version, "metadata": {},
                "items": items}
        return negotiation.render(body, target)

    # -- single object ---------------------------------------------------------------

    async def get(self, request: web.Request) -> web.Response:
        target = negotiation.negotiate(request.headers.get("Accept"))
        query = request.rel_url.query
        entry = await self.registry.get_entry(request.match_info["namespace"], request.match_info["name"],
                                              query.get("resourceVersion", ""))
        if target.is_plain_json:
            return web.Response(body=entry.json(), content_type=negotiation.JSON)  # encoded once, served many times
        return self._render_object(entry.obj, target, query)

    async def update(self, request: web.Request) -> web.Response:
        target = negotiation.negotiate(request.headers.get("Accept"), allow_as=False)
        opts = write_options(request, "UpdateOptions")
        name = request.match_info["name"]
        obj, warnings = await self._body(request, opts, name)
        result = await self.registry.update(request.match_info["namespace"], name, obj, opts,
                                            request.match_info.get("subresource", ""))
        return self._write_result(result, warnings, target, request, 201 if result.created else 200)

    async def patch(self, request: web.Request) -> web.Response:
        target = negotiation.negotiate(request.headers.get("Accept"), allow_as=False)
        content_type = request.headers.get("Content-Type", "")
        opts = patch_options(request, patch.media_type(content_type) == patch.APPLY_PATCH)
        patcher = patch.decode(content_type, await request.read(), strict=opts.field_validation == "Strict")
        name = request.match_info["name"]
        namespace, subresource = request.match_info["namespace"], request.match_info.get("subresource", "")
        warnings: list[str] = []
        if isinstance(patcher, patch.ApplyPatch):
            def checked(merged: Obj) -> Obj:
                if patcher.strict_error is not None:
                    raise patcher.strict_error
                obj, warnings[:] = self.decoder.decode(merged, opts.field_validation, name=name, patched=True)
                return obj
            result = await self.registry.apply(namespace, name, patcher.config, opts, subresource, checked)
            return self._write_result(result, warnings, target, request, 201 if result.created else 200)

        async def patched(current: Obj) -> Obj:
            obj, warnings[:] = self.decoder.decode(patcher.apply(current), opts.field_validation, name=name, patched=True)
            return obj
        result = await self.registry.update_with(namespace, name, patched, opts, subresource)
        return self._write_result(result, warnings, target, request, 200)

    async def delete(self, request: web.Request) -> web.Response:
        target = negotiation.negotiate(request.headers.get("Accept"), allow_as=False)
        opts = write_options(request)
        options = await self._delete_options(request)
        opts.dry_run = opts.dry_run or options.dry_run
        obj, removed = await self.registry.delete(request.match_info["namespace"], request.match_info["name"],
                                                  options, opts)
        if removed:
            meta = obj["metadata"]
            body = negotiation.success_status({"name": meta["name"], "group": self.info.group,
                                               "kind": self.info.resource, "uid": meta.get("uid", "")})
            return negotiation.render(body, target)
        return negotiation.render(obj, target)

    async def _delete_options(self, request: web.Request) -> Any:
        body = None
        if request.can_read_body:
            raw = await request.read()
            if raw.strip():
                body = load_body(raw)
        return delete_options(body, request.rel_url.query)

    def end_watches(self, reason: str) -> None:
        """End every open watch stream as a finished response (its handler writes the last chunk)."""
        self.watches.end_all(reason)
