"""Serving a watch: one chunked JSON stream of events per client, in the negotiated shape, with
kube's timeouts, bookmarks and initial events; one watchdog for every open stream."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import orjson
from aiohttp import web

from apiserver.endpoints import negotiation
from apiserver.endpoints.request import query_bool, timeout_seconds
from apiserver.machinery import errors
from apiserver.registry.rest import ListOptions
from apiserver.registry.store import Registry
from apiserver.storage.interface import BOOKMARK, ERROR, Event, Watch

__all__ = ["WatchServer"]

log = logging.getLogger(__name__)

INITIAL_EVENTS_END = "k8s.io/initial-events-end"
MIN_REQUEST_TIMEOUT = 1800  # seconds; watches without timeoutSeconds last 1-2x this, as in kube
WATCH_SWEEP = 0.25  # seconds between the watchdog's looks at every open watch
WATCH_WRITE_TIMEOUT = 10.0  # a client that does not read for this long loses its watch (bounded memory)


class WatchServer:
    """The watch streams of one resource."""

    def __init__(self, registry: Registry, on_watch_change: Callable[[int], Any] | None = None) -> None:
        self.registry = registry
        self._on_watch_change = on_watch_change or (lambda delta: None)
        self._watchdog = _Watchdog()

    def end_all(self, reason: str) -> None:
        """End every open watch stream as a finished response (its handler writes the last chunk)."""
        self._watchdog.end_all(reason)

    async def serve(self, request: web.Request, namespace: str | None, opts: ListOptions,
                    target: negotiation.Target) -> web.StreamResponse:
        query = request.rel_url.query
        bookmarks = bool(query_bool(query, "allowWatchBookmarks"))
        send_initial = query_bool(query, "sendInitialEvents")
        timeout = timeout_seconds(request)
        if timeout is None:
            timeout = float(MIN_REQUEST_TIMEOUT * (1 + random.random()))
        expired: errors.ApiError | None = None
        try:
            watcher, backlog, initial_rv = await self.registry.watch(namespace, opts, bookmarks, send_initial)
        except errors.ApiError as e:
            if e.code != 410:
                raise
            expired = e  # as kube: a resourceVersion out of history is an ERROR event on a started stream

        resp = web.StreamResponse(status=200)
        resp.content_type = negotiation.JSON
        resp.enable_chunked_encoding()
        try:
            await resp.prepare(request)
            if expired is not None:
                await resp.write(orjson.dumps({"type": ERROR, "object": expired.status()}) + b"\n")
                return resp
        except ConnectionResetError:  # the client left before the stream started: nothing to answer
            if expired is None:
                watcher.stop()
            return resp
        self._on_watch_change(1)
        include = negotiation.include_object(query) if target.is_table else "Metadata"
        encoder = _EventEncoder(self.registry, target, include)
        loop = asyncio.get_running_loop()
        stream = _Stream(asyncio.current_task(), watcher, request, loop.time() + timeout)  # type: ignore[arg-type]
        self._watchdog.add(stream)
        try:
            chunk = b"".join(encoder.encode(ev) for ev in backlog)
            if send_initial and bookmarks and initial_rv is not None:  # kube's isListWatchRequest
                chunk += encoder.bookmark(initial_rv, {INITIAL_EVENTS_END: "true"})
            if chunk:
                await stream.write(resp, chunk)
            writer = request.writer
            if isinstance(writer, WritesNow) and not target.is_table:  # HTTP/2: what the stream takes at once
                watcher.queue.sink = functools.partial(_write_now, writer, encoder)  # skips this task
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
            watcher.queue.sink = None
            self._watchdog.discard(stream)
            watcher.stop()
            self._on_watch_change(-1)
        if stream.expired:
            log.info("closing a watch whose client stopped reading")
            if request.transport is not None:
                request.transport.abort()  # drop what it never read
            return resp
        with contextlib.suppress(ConnectionResetError):
            await resp.write_eof()
        return resp


@runtime_checkable
class WritesNow(Protocol):
    """A response writer that can take a chunk without waiting, when nothing has to be waited for."""

    def write_now(self, data: bytes) -> bool: ...


def _write_now(writer: WritesNow, encoder: _EventEncoder, ev: Event) -> bool:
    """The watch cache's dispatch hands a waiting watch its event: written at once, or (False) queued for
    the watch's task. It runs in the dispatch, so a failure here is this watch's alone."""
    try:
        return writer.write_now(encoder.encode(ev))
    except Exception:  # the task meets it again and ends this watch
        log.exception("encoding a watch event failed")
        return False


@dataclass(eq=False)
class _Stream:
    """One open watch response, as the watchdog sees it."""

    task: asyncio.Task[Any]
    watcher: Watch
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


class _SharedLine:
    """The line of the event being dispatched in the object's own shape, made once for every watch it goes
    to: the dispatch hands one event to each watch in turn, and would copy the object for each."""

    __slots__ = ("event", "line")

    def __init__(self) -> None:
        self.event: Event | None = None
        self.line = b""

    def __call__(self, ev: Event) -> bytes:
        if ev is not self.event:
            assert ev.entry is not None
            self.line = b'{"type":"' + ev.type.encode() + b'","object":' + ev.entry.json() + b"}\n"
            self.event = ev
        return self.line


_shared_line = _SharedLine()


class _EventEncoder:
    """Encodes watch events for one stream in the negotiated shape."""

    def __init__(self, registry: Registry, target: negotiation.Target, include: str) -> None:
        self.registry = registry
        self.target = target
        self.include = include
        self.first_table = True
        self.as_stored = not target.is_table and not target.is_metadata  # the object itself: one line for all

    def _shape(self, obj: dict[str, Any]) -> dict[str, Any]:
        if self.target.is_table:
            strategy = self.registry.strategy
            body = negotiation.table(strategy.columns, [obj], strategy.cells, self.include, self.target.meta_version,
                              {"resourceVersion": obj["metadata"].get("resourceVersion", "")},
                              headers=self.first_table)
            self.first_table = False
            return body
        if self.target.is_metadata:
            return negotiation.partial_metadata(obj, self.target.meta_version)
        return obj

    def encode(self, ev: Event) -> bytes:
        if ev.type == BOOKMARK:
            return self.bookmark(ev.rv)
        assert ev.entry is not None
        if self.as_stored:
            return _shared_line(ev)
        return orjson.dumps({"type": ev.type, "object": self._shape(ev.entry.obj)}) + b"\n"

    def bookmark(self, rv: int, annotations: dict[str, str] | None = None) -> bytes:
        info = self.registry.info
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if annotations:
            meta["annotations"] = annotations
        if self.target.is_metadata:
            obj = {"kind": "PartialObjectMetadata", "apiVersion": f"meta.k8s.io/{self.target.meta_version}",
                   "metadata": meta}
        else:
            obj = {"kind": info.kind, "apiVersion": info.group_version, "metadata": meta}
        return orjson.dumps({"type": BOOKMARK, "object": obj}) + b"\n"
