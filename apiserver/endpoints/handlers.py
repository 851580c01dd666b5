"""HTTP handlers for a resource: request parsing, negotiation, and the response shapes.

Object semantics live in :mod:`apiserver.registry.store`; this module only translates HTTP
to registry calls and registry results to the wire (JSON, YAML, Table, metadata).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import re
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web
from multidict import CIMultiDict

from apiserver.endpoints import negotiation as wire
from apiserver.machinery import errors
from apiserver.registry.store import (
    ListOptions,
    Registry,
    Result,
    WriteOptions,
    load_body,
    parse_int64,
    parse_list_options,
)
from apiserver.storage.cacher import BOOKMARK, ERROR, Entry, Event, Watcher

log = logging.getLogger(__name__)

INITIAL_EVENTS_END = "k8s.io/initial-events-end"
MIN_REQUEST_TIMEOUT = 1800  # seconds; watches without timeoutSeconds last 1-2x this, as in kube
WATCH_SWEEP = 0.25  # seconds between the watchdog's looks at every open watch
WATCH_WRITE_TIMEOUT = 10.0  # a client that does not read for this long loses its watch (bounded memory)


def _bool_param(query: Any, name: str) -> bool | None:
    value = query.get(name)
    if value is None or value == "":
        return None
    if value in ("true", "1", "True"):
        return True
    if value in ("false", "0", "False"):
        return False
    raise errors.bad_request(f'invalid value for {name}: "{value}": must be a boolean')


def write_options(request: web.Request) -> WriteOptions:
    query = request.rel_url.query
    dry_run = query.getall("dryRun", [])
    for value in dry_run:
        if value != "All":
            raise errors.bad_request(f'dryRun: Unsupported value: "{value}": supported values: "All"')
    fv = query.get("fieldValidation") or "Warn"
    normalized = {"strict": "Strict", "warn": "Warn", "ignore": "Ignore"}.get(fv.lower())
    if normalized is None:
        raise errors.bad_request(f"fieldValidation must be one of Ignore, Warn, Strict: got {fv}")
    return WriteOptions(dry_run=bool(dry_run), field_validation=normalized,
                        field_manager=query.get("fieldManager", ""))


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

    def __init__(self, registry: Registry, on_watch_change: Any = None) -> None:
        self.registry = registry
        self.strategy = registry.strategy
        self.info = registry.info
        self._on_watch_change = on_watch_change or (lambda delta: None)
        self._watchdog = _Watchdog()

    # -- rendering -------------------------------------------------------------------

    def _render_object(self, obj: dict[str, Any], target: wire.Target, query: Any, status: int = 200,
                       headers: Any = None) -> web.Response:
        if target.is_table:
            body = wire.table(self.strategy.columns, [obj], self.strategy.cells, wire.include_object(query),
                              target.meta_version, {"resourceVersion": obj["metadata"].get("resourceVersion", "")})
        elif target.is_metadata:
            body = wire.partial_metadata(obj, target.meta_version)
        else:
            body = obj
        return wire.render(body, target, status, headers)

    def _render_list(self, items: list[dict[str, Any]], list_meta: dict[str, Any], target: wire.Target,
                     query: Any) -> web.Response:
        if target.is_table:
            body = wire.table(self.strategy.columns, items, self.strategy.cells, wire.include_object(query),
                              target.meta_version, list_meta)
        elif target.is_metadata:
            body = wire.partial_metadata_list(items, list_meta, target.meta_version)
        else:
            body = {"kind": self.info.list_kind, "apiVersion": self.info.group_version,
                    "metadata": list_meta, "items": items}
        return wire.render(body, target)

    def _fast_list(self, entries: list[Entry], list_meta: dict[str, Any]) -> web.Response:
        """Plain JSON lists splice each object's cached encoding instead of encoding it again."""
        head = orjson.dumps({"apiVersion": self.info.group_version, "kind": self.info.list_kind,
                             "metadata": list_meta})
        body = head[:-1] + b',"items":[' + b",".join(e.json() for e in entries) + b"]}"
        return web.Response(body=body, content_type=wire.JSON)

    def _write_result(self, result: Result, target: wire.Target, request: web.Request, status: int) -> web.Response:
        return self._render_object(result.obj, target, request.rel_url.query, status,
                                   _warning_headers(result.warnings) or None)

    # -- collection ------------------------------------------------------------------

    async def list_or_watch(self, request: web.Request) -> web.StreamResponse:
        namespace = request.match_info.get("namespace")
        query = request.rel_url.query
        target = wire.negotiate(request.headers.get("Accept"))
        watch = bool(_bool_param(query, "watch"))
        opts = parse_list_options(dict(query), watch=watch)
        if watch:
            return await self.watch(request, namespace, opts, target)
        entries, meta = await self.registry.list(namespace, opts)
        if target.is_plain_json:
            return self._fast_list(entries, meta)
        return self._render_list([e.obj for e in entries], meta, target, query)

    async def create(self, request: web.Request) -> web.Response:
        target = wire.negotiate(request.headers.get("Accept"), allow_as=False)
        opts = write_options(request)
        result = await self.registry.create(request.match_info["namespace"], await request.read(), opts)
        return self._write_result(result, target, request, 201)

    async def delete_collection(self, request: web.Request) -> web.Response:
        namespace = request.match_info.get("namespace")
        target = wire.negotiate(request.headers.get("Accept"), allow_as=False)
        opts = write_options(request)
        list_opts = parse_list_options(dict(request.rel_url.query))
        options = await self._delete_options(request)
        opts.dry_run = opts.dry_run or bool(options.get("dryRun"))
        items = await self.registry.delete_collection(namespace, list_opts, options, opts)
        body = {"kind": self.info.list_kind, "apiVersion": self.info.group_version, "metadata": {},
                "items": items}
        return wire.render(body, target)

    # -- single object ---------------------------------------------------------------

    async def get(self, request: web.Request) -> web.Response:
        target = wire.negotiate(request.headers.get("Accept"))
        query = request.rel_url.query
        entry = await self.registry.get_entry(request.match_info["namespace"], request.match_info["name"],
                                              query.get("resourceVersion", ""))
        if target.is_plain_json:
            return web.Response(body=entry.json(), content_type=wire.JSON)  # encoded once, served many times
        return self._render_object(entry.obj, target, query)

    async def update(self, request: web.Request) -> web.Response:
        target = wire.negotiate(request.headers.get("Accept"), allow_as=False)
        result = await self.registry.update(request.match_info["namespace"], request.match_info["name"],
                                            await request.read(), write_options(request),
                                            request.match_info.get("subresource", ""))
        return self._write_result(result, target, request, 201 if result.created else 200)

    async def patch(self, request: web.Request) -> web.Response:
        target = wire.negotiate(request.headers.get("Accept"), allow_as=False)
        opts = write_options(request)
        result = await self.registry.patch(request.match_info["namespace"], request.match_info["name"],
                                           request.headers.get("Content-Type", ""), await request.read(), opts,
                                           request.match_info.get("subresource", ""))
        return self._write_result(result, target, request, 200)

    async def delete(self, request: web.Request) -> web.Response:
        target = wire.negotiate(request.headers.get("Accept"), allow_as=False)
        opts = write_options(request)
        options = await self._delete_options(request)
        opts.dry_run = opts.dry_run or bool(options.get("dryRun"))
        obj, removed = await self.registry.delete(request.match_info["namespace"], request.match_info["name"],
                                                  options, opts)
        if removed:
            meta = obj["metadata"]
            body = wire.success_status({"name": meta["name"], "group": self.info.group,
                                        "kind": self.info.resource, "uid": meta.get("uid", "")})
            return wire.render(body, target)
        return wire.render(obj, target)

    async def get_status(self, request: web.Request) -> web.Response:
        return await self.get(request)

    async def _delete_options(self, request: web.Request) -> dict[str, Any]:
        options: dict[str, Any] = {}
        if request.can_read_body:
            raw = await request.read()
            if raw.strip():
                body = load_body(raw)
                if not isinstance(body, dict):
                    raise errors.bad_request("DeleteOptions must be a JSON object")
                if body.get("kind") not in (None, "DeleteOptions"):
                    raise errors.bad_request(f'expected DeleteOptions, got kind "{body.get("kind")}"')
                options = body
                for name, kind, go_type in (("dryRun", list, "[]string"), ("preconditions", dict, "Preconditions")):
                    if body.get(name) is not None and not isinstance(body[name], kind):
                        raise errors.bad_request(f"json: cannot unmarshal {type(body[name]).__name__} into Go struct "
                                                 f"field DeleteOptions.{name} of type {go_type}")
                if body.get("dryRun"):
                    for value in body["dryRun"]:
                        if value != "All":
                            raise errors.bad_request(f'dryRun: Unsupported value: "{value}": supported values: "All"')
        query = request.rel_url.query
        if "propagationPolicy" in query:
            options["propagationPolicy"] = query["propagationPolicy"]
        if "gracePeriodSeconds" in query:
            try:
                options["gracePeriodSeconds"] = int(query["gracePeriodSeconds"])
            except ValueError:
                raise errors.bad_request("gracePeriodSeconds must be an integer") from None
        return options

    # -- watch -----------------------------------------------------------------------

    def end_watches(self, reason: str) -> None:
        """End every open watch stream as a finished response (its handler writes the last chunk)."""
        self._watchdog.end_all(reason)

    async def watch(self, request: web.Request, namespace: str | None, opts: ListOptions,
                    target: wire.Target) -> web.StreamResponse:
        query = request.rel_url.query
        bookmarks = bool(_bool_param(query, "allowWatchBookmarks"))
        send_initial = _bool_param(query, "sendInitialEvents")
        if send_initial and not bookmarks:
            cause = errors.Cause(errors.FIELD_VALUE_FORBIDDEN,
                                 "Forbidden: sendInitialEvents requires setting allowWatchBookmarks to true",
                                 "allowWatchBookmarks")
            raise errors.ApiError(422, "Invalid", f'ListOptions.meta.k8s.io "" is invalid: {cause.field}: '
                                  f"{cause.message}", kind="ListOptions", group="meta.k8s.io", causes=[cause])
        timeout = float(MIN_REQUEST_TIMEOUT * (1 + random.random()))
        if query.get("timeoutSeconds"):
            seconds = parse_int64(query["timeoutSeconds"])
            if seconds is None:
                raise errors.bad_request("timeoutSeconds must be an integer")
            timeout = float(seconds)
        if opts.resource_version not in ("", "0") and opts.resource_version_match != "NotOlderThan":
            await self.registry.store.cache.wait_fresh(int(opts.resource_version))

        resp = web.StreamResponse(status=200)
        resp.content_type = wire.JSON
        resp.enable_chunked_encoding()
        try:
            await resp.prepare(request)
            try:
                watcher, backlog, initial_rv = self.registry.watch(namespace, opts, bookmarks, send_initial)
            except errors.ApiError as e:
                await resp.write(orjson.dumps({"type": ERROR, "object": e.status()}) + b"\n")
                return resp
        except ConnectionResetError:  # the client left before the stream started: nothing to answer
            return resp
        self._on_watch_change(1)
        include = wire.include_object(query) if target.is_table else "Metadata"
        encoder = _EventEncoder(self, target, include)
        loop = asyncio.get_running_loop()
        stream = _Stream(asyncio.current_task(), watcher, request, loop.time() + timeout)  # type: ignore[arg-type]
        self._watchdog.add(stream)
        try:
            chunk = b"".join(encoder.encode(ev) for ev in backlog)
            if send_initial and initial_rv is not None:
                chunk += encoder.bookmark(initial_rv, {INITIAL_EVENTS_END: "true"})
            if chunk:
                await stream.write(resp, chunk)
            while loop.time() < stream.deadline:
                # No timer per event: the watchdog wakes this stream (None) when its time is up or its
                # client has gone, and cancels a write its client does not take in time.
                ev = watcher.queue.get_nowait() if not watcher.queue.empty() else await watcher.queue.get()
                if ev is None:
                    break
                parts = [encoder.encode(ev)]
                while not watcher.queue.empty():
                    nxt = watcher.queue.get_nowait()
                    if nxt is None:
                        break
                    parts.append(encoder.encode(nxt))
                await stream.write(resp, b"".join(parts))
                if watcher.closed_reason and watcher.queue.empty():
                    break
        except (ConnectionResetError, asyncio.CancelledError):
            if stream.expired:
                stream.task.uncancel()  # our own cancellation, not the server's or aiohttp's
        finally:
            self._watchdog.discard(stream)
            self.registry.store.cache.stop_watching(watcher)
            self._on_watch_change(-1)
        if stream.expired:
            log.info("closing a watch whose client stopped reading")
            if request.transport is not None:
                request.transport.abort()  # drop what it never read
            return resp
        with contextlib.suppress(ConnectionResetError):
            await resp.write_eof()
        return resp


@dataclass(eq=False)
class _Stream:
    """One open watch response, as the watchdog sees it."""

    task: asyncio.Task[Any]
    watcher: Watcher
    request: web.Request
    deadline: float  # loop time at which timeoutSeconds is over
    writing_until: float = 0.0  # while a write is in flight: when it must have been taken
    expired: bool = False  # cut off for not reading

    async def write(self, resp: web.StreamResponse, data: bytes) -> None:
        self.writing_until = asyncio.get_running_loop().time() + WATCH_WRITE_TIMEOUT
        try:
            await resp.write(data)
        finally:
            self.writing_until = 0.0


class _Watchdog:
    """One timer for every open watch stream instead of one per event: ends streams whose
    ``timeoutSeconds`` is over or whose client has gone, and cancels a stream whose client has not
    taken a write for ``WATCH_WRITE_TIMEOUT`` (what it never reads is then dropped: bounded memory)."""

    def __init__(self) -> None:
        self._streams: set[_Stream] = set()
        self._task: asyncio.Task[None] | None = None

    def add(self, stream: _Stream) -> None:
        self._streams.add(stream)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="watch-watchdog")

    def discard(self, stream: _Stream) -> None:
        self._streams.discard(stream)

    def end_all(self, reason: str) -> None:
        for stream in list(self._streams):
            stream.watcher.close(reason)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while self._streams:
            await asyncio.sleep(WATCH_SWEEP)
            now = loop.time()
            for stream in list(self._streams):
                if stream.writing_until and now >= stream.writing_until:
                    stream.expired = True
                    stream.task.cancel()
                    self._streams.discard(stream)
                elif now >= stream.deadline or stream.request.transport is None \
                        or stream.request.transport.is_closing():
                    stream.watcher.close("the watch is over")


class _EventEncoder:
    """Encodes watch events for one stream in the negotiated shape."""

    def __init__(self, handlers: ResourceHandlers, target: wire.Target, include: str) -> None:
        self.handlers = handlers
        self.target = target
        self.include = include
        self.first_table = True

    def _shape(self, obj: dict[str, Any]) -> dict[str, Any]:
        if self.target.is_table:
            strategy = self.handlers.strategy
            body = wire.table(strategy.columns, [obj], strategy.cells, self.include, self.target.meta_version,
                              {"resourceVersion": obj["metadata"].get("resourceVersion", "")},
                              headers=self.first_table)
            self.first_table = False
            return body
        if self.target.is_metadata:
            return wire.partial_metadata(obj, self.target.meta_version)
        return obj

    def encode(self, ev: Event) -> bytes:
        if ev.type == BOOKMARK:
            return self.bookmark(ev.rv)
        assert ev.entry is not None
        if not self.target.is_table and not self.target.is_metadata:  # one encoding shared by every watcher
            return b'{"type":"' + ev.type.encode() + b'","object":' + ev.entry.json() + b"}\n"
        return orjson.dumps({"type": ev.type, "object": self._shape(ev.entry.obj)}) + b"\n"

    def bookmark(self, rv: int, annotations: dict[str, str] | None = None) -> bytes:
        info = self.handlers.info
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if annotations:
            meta["annotations"] = annotations
        if self.target.is_metadata:
            obj = {"kind": "PartialObjectMetadata", "apiVersion": f"meta.k8s.io/{self.target.meta_version}",
                   "metadata": meta}
        else:
            obj = {"kind": info.kind, "apiVersion": info.group_version, "metadata": meta}
        return orjson.dumps({"type": BOOKMARK, "object": obj}) + b"\n"
