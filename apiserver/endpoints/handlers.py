"""HTTP handlers for a resource: each decodes its request, calls the registry with objects, and
renders the result in the negotiated shape (JSON, YAML, Table, PartialObjectMetadata).

Object semantics live in :mod:`apiserver.registry.store`; what a request asks for is read by
:mod:`apiserver.endpoints.request`, bodies by :mod:`apiserver.endpoints.decode`, watches are served
by :mod:`apiserver.endpoints.watch`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from apiserver.endpoints import negotiation, patch
from apiserver.endpoints.decode import INPUT_MEDIA_TYPES, YAML, Decoder, input_media, parse_json
from apiserver.endpoints.request import (
    delete_options_from_body,
    delete_options_from_query,
    list_options,
    patch_options,
    request_info,
    validate_delete_options,
    write_options,
)
from apiserver.endpoints.watch import WatchServer
from apiserver.machinery import errors, goyaml
from apiserver.machinery.jsonutil import check_nesting
from apiserver.registry.rest import DeleteOptions, Obj, Result, WriteOptions
from apiserver.registry.store import Registry
from apiserver.storage.interface import Entry

__all__ = ["ResourceHandlers"]


class ResourceHandlers:
    """Handlers for one resource served by one :class:`Registry`."""

    def __init__(self, registry: Registry, on_watch_change: Callable[[int], Any] | None = None,
                 on_deleted: Callable[[web.Request, list[Obj]], Awaitable[None]] | None = None) -> None:
        self.registry = registry
        self.on_deleted = on_deleted  # told of what a client's delete removed or marked (not of a dry run)
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
                                   negotiation.warning_headers(warnings + result.warnings) or None)

    def _decode(self, raw: bytes, media: str, opts: WriteOptions) -> tuple[Obj, list[str]]:
        document = self.decoder.read(raw, media)
        return self.decoder.decode(document, opts.field_validation, raw if media != YAML else None)

    # -- collection ------------------------------------------------------------------

    async def list_or_watch(self, request: web.Request) -> web.StreamResponse:
        namespace = request.match_info.get("namespace")
        query = request.rel_url.query
        target = negotiation.negotiate(request.headers.get("Accept"))
        watch = request_info(request).watch
        opts = list_options(request, watch=watch)
        if watch:
            return await self.watches.serve(request, namespace, opts, target)
        listed = await self.registry.list(namespace, opts)
        if target.is_plain_json:
            return self._fast_list(listed.entries, listed.list_meta())
        return self._render_list([e.obj for e in listed.entries], listed.list_meta(), target, query)

    async def create(self, request: web.Request) -> web.Response:
        """POST to the collection, or to an object's path (a CRD's handler names the object after
        the body either way). kube's order: Accept (406), Content-Type (415), body size (413), the
        query's options (400, 422), then the body."""
        target = negotiation.negotiate(request.headers.get("Accept"), allow_as=False)
        media = input_media(request.headers.get("Content-Type"))
        raw = await request.read()
        opts = write_options(request, "CreateOptions")
        obj, warnings = self._decode(raw, media, opts)
        result = await self.registry.create(request.match_info["namespace"], obj, opts)
        return self._write_result(result, warnings, target, request, 201)

    async def delete_collection(self, request: web.Request) -> web.Response:
        namespace = request.match_info.get("namespace")
        target = negotiation.negotiate(request.headers.get("Accept"), allow_as=False)
        selection = list_options(request)
        options = await self._delete_options(request)
        opts = WriteOptions(dry_run=options.dry_run)
        items, rv = await self.registry.delete_collection(namespace, selection, options, opts)
        if self.on_deleted is not None and items and not options.dry_run:
            await self.on_deleted(request, items)
        body = {"kind": self.info.list_kind, "apiVersion": self.info.group_version,
                "metadata": {"resourceVersion": str(rv)}, "items": items}
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
        """PUT. kube's order: Accept (406), body size (413), the query's options (400, 422),
        Content-Type (415), then the body."""
        target = negotiation.negotiate(request.headers.get("Accept"), allow_as=False)
        raw = await request.read()
        opts = write_options(request, "UpdateOptions")
        media = input_media(request.headers.get("Content-Type"))
        obj, warnings = self._decode(raw, media, opts)
        result = await self.registry.update(request.match_info["namespace"], request.match_info["name"], obj, opts,
                                            request.match_info.get("subresource", ""))
        return self._write_result(result, warnings, target, request, 201 if result.created else 200)

    async def patch(self, request: web.Request) -> web.Response:
        """PATCH. kube's order: Content-Type (415), Accept (406), body size (413), the query's
        options (400, 422); a JSON or merge patch's body is read once the object is found."""
        content_type = request.headers.get("Content-Type", "")
        apply = patch.media_type(content_type) == patch.APPLY_PATCH
        target = negotiation.negotiate(request.headers.get("Accept"), allow_as=False)
        raw = await request.read()
        opts = patch_options(request, apply)
        patcher = patch.decode(content_type, raw, opts.field_validation)
        name = request.match_info["name"]
        namespace, subresource = request.match_info["namespace"], request.match_info.get("subresource", "")
        warnings: list[str] = []
        if isinstance(patcher, patch.ApplyPatch):
            def checked(merged: Obj) -> Obj:
                if patcher.strict_error is not None:
                    raise patcher.strict_error
                obj, warnings[:] = self.decoder.decode_patched(merged, opts.field_validation, [], name)
                return obj
            result = await self.registry.apply(namespace, name, patcher.config, opts, subresource, checked)
            return self._write_result(result, warnings, target, request, 201 if result.created else 200)

        async def patched(current: Obj) -> Obj:
            document, problems = patcher.apply(current)
            obj, warnings[:] = self.decoder.decode_patched(document, opts.field_validation, problems, name)
            return obj
        result = await self.registry.update_with(namespace, name, patched, opts, subresource)
        return self._write_result(result, warnings, target, request, 200)

    async def delete(self, request: web.Request) -> web.Response:
        target = negotiation.negotiate(request.headers.get("Accept"), allow_as=False)
        options = await self._delete_options(request)
        obj, removed = await self.registry.delete(request.match_info["namespace"], request.match_info["name"],
                                                  options, WriteOptions(dry_run=options.dry_run))
        if self.on_deleted is not None and not options.dry_run:
            await self.on_deleted(request, [obj])
        if removed:
            meta = obj["metadata"]
            body = negotiation.success_status({"name": meta["name"], "group": self.info.group,
                                               "kind": self.info.resource, "uid": meta.get("uid", "")})
            return negotiation.render(body, target)
        return negotiation.render(obj, target)

    async def _delete_options(self, request: web.Request) -> DeleteOptions:
        """DeleteOptions as kube reads them: from a body when there is one (the query is then not
        read), else from the query; validated (422)."""
        raw = await request.read() if request.can_read_body else b""
        if not raw:
            return validate_delete_options(delete_options_from_query(request.rel_url.query))
        media = input_media(request.headers.get("Content-Type"), INPUT_MEDIA_TYPES)
        if media == YAML:
            try:
                document = goyaml.to_json_document(raw)
            except (goyaml.YAMLError, TypeError) as e:
                raise errors.bad_request(f"error converting YAML to JSON: {goyaml.yaml_error(e)}") from None
        else:
            document, problem = parse_json(raw)
            if problem is not None:
                raise errors.bad_request(f"couldn't get version/kind; json parse error: {problem}")
        check_nesting(document, raw=raw)
        return validate_delete_options(delete_options_from_body(document))

    # -- what a CRD's handler refuses --------------------------------------------------------

    async def nameless(self, request: web.Request) -> web.Response:
        """PUT or PATCH of the collection: an update names its object (a patch's type is checked first)."""
        if request.method == "PATCH":
            patch.media_type(request.headers.get("Content-Type", ""))
        raise errors.bad_request("name must be provided")

    async def not_supported(self, request: web.Request) -> web.Response:
        """A verb the status subresource does not serve."""
        raise errors.method_not_supported(self.info.resource, self.info.group, request_info(request).attributes.verb)

    async def unknown_subresource(self, request: web.Request) -> web.Response:
        """A subresource the resource does not have: kube answers that the object is not found."""
        raise errors.not_found(self.info.resource, self.info.group, request.match_info["name"])

    async def not_served(self, request: web.Request) -> web.Response:
        """A write to the cluster-wide path: served by nothing, as for a namespaced CRD."""
        raise web.HTTPNotFound()

    def end_watches(self, reason: str) -> None:
        """End every open watch stream as a finished response (its handler writes the last chunk)."""
        self.watches.end_all(reason)
