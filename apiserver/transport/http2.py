"""HTTP/2 beside HTTP/1.1 on the one TLS listener, chosen per connection by ALPN.

Why: the host's aggregator speaks HTTP/2 to a backend that offers it and then carries every proxied
request, a fleet's watches included, as streams of a few connections. An event then reaches 200
watchers as 200 DATA frames in one TLS write, where over HTTP/1.1 it was 200 TLS records on 200
sockets, each a send of its own from the one Python thread. kubectl and client-go offer HTTP/2 too.

The streams are served by the same aiohttp application as HTTP/1.1 requests: each stream becomes an
aiohttp request whose writer sends HEADERS and DATA frames, and a stream's ``transport`` is the
stream (``abort()`` resets it, not the connection). Shutdown follows the HTTP/1.1 path: ``close()``
sends GOAWAY (no new streams), ``shutdown(timeout)`` waits for the streams in flight.

The framing is our own, as the etcd client's is: a fan-out's cost is per frame (a DATA frame out and,
from Go's clients, about one WINDOW_UPDATE back per frame), and a general-purpose library's per-frame
state machine cost as much as the TLS records it saves. Header blocks are HPACK-coded by
:mod:`apiserver.transport.hpack`; our responses' blocks never index, so they change no table.

- Frames written in one pass of the event loop leave in one write.
- Flow control both ways: a stream's request body is given window back as its handler reads it
  (1 MiB per stream ahead, 16 MiB per connection); responses wait for the client's windows.
- Errors as RFC 9113 sorts them: a connection error sends GOAWAY with its code and closes; a
  stream error resets that stream alone.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import struct
from typing import Any, cast

from aiohttp import web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.http_parser import RawRequestMessage
from aiohttp.http_writer import HttpVersion11
from aiohttp.streams import StreamReader
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from apiserver.transport import hpack
from apiserver.transport.frames import (
    ACK,
    CANCEL,
    COMPRESSION_ERROR,
    CONTINUATION,
    DATA,
    DEFAULT_MAX_FRAME,
    DEFAULT_WINDOW,
    END_HEADERS,
    END_STREAM,
    FLOW_CONTROL_ERROR,
    FRAME_SIZE_ERROR,
    GOAWAY,
    HEADERS,
    INTERNAL_ERROR,
    MAX_WINDOW,
    NO_ERROR,
    PING,
    PREFACE,
    PRIORITY_FRAME,
    PROTOCOL_ERROR,
    PUSH_PROMISE,
    REFUSED_STREAM,
    RST_STREAM,
    SETTINGS,
    SETTINGS_INITIAL_WINDOW_SIZE,
    SETTINGS_MAX_CONCURRENT_STREAMS,
    SETTINGS_MAX_FRAME_SIZE,
    SETTINGS_MAX_HEADER_LIST_SIZE,
    STREAM_CLOSED,
    WINDOW_UPDATE,
    Change,
    FrameError,
    FrameReader,
    HeaderBlocks,
    frame,
    frame_header,
    u32,
    unpad,
)

__all__ = ["ALPN", "HTTP11", "AlpnSite"]

log = logging.getLogger(__name__)

ALPN = "h2"
HTTP11 = "http/1.1"
GO_MAX_STREAMS = 250  # Go's servers' default limit of concurrent streams
TCP_KEEPALIVE_PERIOD = 180  # seconds: kube-apiserver's listener (defaultKeepAlivePeriod)
STREAM_WINDOW = 1 << 20  # request body bytes a stream may send ahead of its handler's reads
CONNECTION_WINDOW = 16 << 20  # and all the streams of a connection together
FLUSH_AT = 256 << 10  # queued bytes written at once rather than at the loop's turn: the socket's back-pressure
MAX_HEADER_LIST = (1 << 20) + (64 << 10)  # the HTTP/1.1 limits: 1 MiB request line, 64 KiB per field
# Hop-by-hop fields HTTP/2 forbids (RFC 9113 8.2.2): aiohttp writes some of them for HTTP/1.1.
_CONNECTION_FIELDS = frozenset({"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"})


class AlpnSite(web.BaseSite):
    """A TLS listener whose connections speak HTTP/2 when the client picks it by ALPN, else HTTP/1.1."""

    def __init__(self, runner: web.BaseRunner, host: str, port: int, *, ssl_context: ssl.SSLContext,
                 idle_timeout: float, backlog: int = 128, max_streams: int = 1000) -> None:
        super().__init__(runner, ssl_context=ssl_context, backlog=backlog)
        self._host = host
        self._port = port
        self._max_streams = max_streams or GO_MAX_STREAMS  # 0, as kube's flag has it: Go's default
        self._idle_timeout = idle_timeout

    @property
    def name(self) -> str:
        return str(URL.build(scheme="https", host=self._host, port=self._port))

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None
        max_streams, idle_timeout = self._max_streams, self._idle_timeout
        self._server = await asyncio.get_running_loop().create_server(
            lambda: _Negotiator(server, max_streams, idle_timeout), self._host, self._port, ssl=self._ssl_context,
            backlog=self._backlog, reuse_address=True)


class _Negotiator(asyncio.Protocol):
    """Hands a connection, once its TLS handshake is done, to the protocol its client chose."""

    def __init__(self, server: web.Server, max_streams: int, idle_timeout: float) -> None:
        self._server = server
        self._max_streams = max_streams
        self._idle_timeout = idle_timeout

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        sock = transport.get_extra_info("socket")
        if sock is not None:  # as kube's listener: a peer gone without a FIN is found in minutes, not hours
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            if hasattr(socket, "TCP_KEEPIDLE"):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, TCP_KEEPALIVE_PERIOD)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, TCP_KEEPALIVE_PERIOD)
        ssl_object = transport.get_extra_info("ssl_object")
        chosen = ssl_object.selected_alpn_protocol() if ssl_object is not None else None
        protocol: asyncio.BaseProtocol = (Http2Connection(self._server, self._max_streams, self._idle_timeout)
                                          if chosen == ALPN else self._server())
        transport.set_protocol(protocol)
        protocol.connection_made(transport)


class Http2Connection(asyncio.Protocol):
    """One HTTP/2 connection: its streams, each served as one request of the aiohttp application."""

    def __init__(self, server: web.Server, max_streams: int, idle_timeout: float) -> None:
        self._server = server
        self._max_streams = max_streams
        self._idle_timeout = idle_timeout
        self._idle_timer: asyncio.TimerHandle | None = None  # armed while no stream is open
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self.ssl_context: ssl.SSLContext | None = None  # the connection's, read once it is made
        self.peername: Any = None
        self.sockname: Any = None
        self._frames = FrameReader(DEFAULT_MAX_FRAME, PREFACE)  # we announce no larger SETTINGS_MAX_FRAME_SIZE
        self._decoder = hpack.Decoder(max_header_list_size=MAX_HEADER_LIST)
        self._blocks = HeaderBlocks(MAX_HEADER_LIST)
        self._streams: dict[int, _Stream] = {}
        self._last_stream = 0  # the highest stream the client has opened
        # What the client allows us, from its SETTINGS and WINDOW_UPDATEs
        self._send_window = DEFAULT_WINDOW  # the connection's
        self._initial_window = DEFAULT_WINDOW  # each new stream's
        self._max_frame = DEFAULT_MAX_FRAME
        self._unacknowledged = 0  # body bytes read since the connection's window was last given back
        self._receive_window = CONNECTION_WINDOW  # what the client may still send before a WINDOW_UPDATE
        self._outgoing: list[bytes | memoryview] = []  # frames written since the loop last flushed them
        self._queued = 0  # their bytes
        self._writable = asyncio.Event()
        self._writable.set()
        self._change = Change()  # a window opens, a stream closes, the last stream is done
        self._going_away = False  # GOAWAY sent or received: streams in flight finish, no new one is served
        # aiohttp's Server keeps a lost connection in its shutdown until this is done: until its streams are
        self._task_handler: asyncio.Future[None] = self._loop.create_future()

    # -- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is one without the class
        # what aiohttp's request reads from its protocol, the same for every stream of the connection
        self.ssl_context, self.peername, self.sockname = (
            transport.get_extra_info(name) for name in ("sslcontext", "peername", "sockname"))
        self._server.connection_made(self, transport)  # type: ignore[arg-type]  # shut down with the rest
        settings = b"".join(struct.pack(">HI", key, value) for key, value in (
            (SETTINGS_MAX_CONCURRENT_STREAMS, self._max_streams), (SETTINGS_INITIAL_WINDOW_SIZE, STREAM_WINDOW),
            (SETTINGS_MAX_HEADER_LIST_SIZE, MAX_HEADER_LIST)))
        self._write(frame(SETTINGS, 0, 0, settings) + frame(WINDOW_UPDATE, 0, 0, u32(CONNECTION_WINDOW - DEFAULT_WINDOW)))
        self._idle()

    def data_received(self, data: bytes) -> None:
        if self._transport is None or self._transport.is_closing():
            return  # a connection error ended it: what follows is not read
        try:
            for kind, flags, stream, payload in self._frames.feed(data):
                self._on_frame(kind, flags, stream, payload)
        except FrameError as e:
            log.info("closing an HTTP/2 connection: %s", e)
            self._go_away(e.code)
            self._close_transport()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._transport = None
        self._busy()
        for stream in list(self._streams.values()):
            stream.closed_by_peer()
        self._writable.set()
        self._wake()
        self._settle_if_done()
        self._server.connection_lost(self, exc)  # type: ignore[arg-type]

    def _settle_if_done(self) -> None:
        if self._transport is None and not self._streams and not self._task_handler.done():
            self._task_handler.set_result(None)

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    # -- what aiohttp's Server calls on shutdown --------------------------------------------

    def close(self) -> None:
        """Take no new streams (GOAWAY naming the last one taken); close once those are done."""
        if not self._going_away and self._transport is not None:
            self._go_away(NO_ERROR)
            self._close_when_idle()

    async def shutdown(self, timeout: float | None = None) -> None:
        """Wait up to ``timeout`` for the streams in flight, then cancel what is left and close."""
        self.close()
        try:
            await asyncio.wait_for(self._streams_done(), timeout)
        except TimeoutError:
            for stream in list(self._streams.values()):
                stream.task.cancel()
        self._close_transport()

    async def _streams_done(self) -> None:
        while self._streams:
            await self._change.wait()

    # -- frames in ------------------------------------------------------------------------------

    def _on_frame(self, kind: int, flags: int, stream: int, payload: bytes) -> None:
        if self._blocks.open and kind != CONTINUATION:
            raise FrameError(PROTOCOL_ERROR, "a header block was interrupted")
        if kind == WINDOW_UPDATE:  # most of what a client sends during a fan-out
            self._on_window_update(stream, payload)
        elif kind == DATA:
            self._on_data(flags, stream, payload)
        elif kind in (HEADERS, CONTINUATION):
            if kind == HEADERS and (stream == 0 or stream % 2 == 0):
                raise FrameError(PROTOCOL_ERROR, f"HEADERS on stream {stream}")
            if (block := self._blocks.take(kind, flags, stream, payload)) is not None:
                self._on_header_block(*block)
        elif kind == SETTINGS:
            if stream != 0 or len(payload) % 6:
                raise FrameError(PROTOCOL_ERROR if stream else FRAME_SIZE_ERROR, "a malformed SETTINGS")
            if not flags & ACK:
                self._on_settings(payload)
                self._write(frame(SETTINGS, ACK, 0))
        elif kind == PING:
            if len(payload) != 8 or stream != 0:
                raise FrameError(PROTOCOL_ERROR if stream else FRAME_SIZE_ERROR, "a malformed PING")
            if not flags & ACK:
                self._write(frame(PING, ACK, 0, payload))
        elif kind == RST_STREAM:
            if stream == 0 or len(payload) != 4:
                raise FrameError(PROTOCOL_ERROR, "a malformed RST_STREAM")
            if (open_stream := self._streams.get(stream)) is not None:
                open_stream.closed_by_peer()
        elif kind == GOAWAY:
            self._going_away = True  # the client opens no more streams; those open are still answered
            self._close_when_idle()
        elif kind == PUSH_PROMISE:
            raise FrameError(PROTOCOL_ERROR, "a client sent PUSH_PROMISE")
        elif kind == PRIORITY_FRAME and stream == 0:
            raise FrameError(PROTOCOL_ERROR, "PRIORITY on stream 0")
        # PRIORITY and frame types this server does not know are ignored, as RFC 9113 asks

    def _on_window_update(self, stream: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise FrameError(FRAME_SIZE_ERROR, "a WINDOW_UPDATE not of 4 bytes")
        increment = int.from_bytes(payload, "big") & 0x7FFFFFFF
        if stream == 0:
            if not increment or self._send_window + increment > MAX_WINDOW:
                raise FrameError(PROTOCOL_ERROR if not increment else FLOW_CONTROL_ERROR,
                                       "a connection WINDOW_UPDATE out of bounds")
            self._send_window += increment
        elif (open_stream := self._streams.get(stream)) is not None:
            if not increment or open_stream.send_window + increment > MAX_WINDOW:
                open_stream.reset(PROTOCOL_ERROR if not increment else FLOW_CONTROL_ERROR)
            else:
                open_stream.send_window += increment
        self._wake()

    def _on_settings(self, payload: bytes) -> None:
        for key, value in struct.iter_unpack(">HI", payload):
            if key == SETTINGS_INITIAL_WINDOW_SIZE:  # (its header table size: our blocks use none)
                if value > MAX_WINDOW:
                    raise FrameError(FLOW_CONTROL_ERROR, "SETTINGS_INITIAL_WINDOW_SIZE over 2^31-1")
                for open_stream in self._streams.values():
                    open_stream.send_window += value - self._initial_window
                self._initial_window = value
            elif key == SETTINGS_MAX_FRAME_SIZE:
                if not DEFAULT_MAX_FRAME <= value <= 2**24 - 1:
                    raise FrameError(PROTOCOL_ERROR, "SETTINGS_MAX_FRAME_SIZE out of bounds")
                self._max_frame = value
        self._wake()

    def _on_data(self, flags: int, stream: int, payload: bytes) -> None:
        if stream == 0:
            raise FrameError(PROTOCOL_ERROR, "DATA on stream 0")
        size = len(payload)  # what flow control counts, padding included
        self._receive_window -= size
        if self._receive_window < 0:
            raise FrameError(FLOW_CONTROL_ERROR, "DATA beyond the connection's window")
        open_stream = self._streams.get(stream)
        if open_stream is not None and not open_stream.closed:
            open_stream.receive_window -= size
            if open_stream.receive_window < 0:
                self._acknowledge(None, size)
                open_stream.reset(FLOW_CONTROL_ERROR)
                return
        if open_stream is None or open_stream.remote_closed or open_stream.closed:
            if stream > self._last_stream:
                raise FrameError(PROTOCOL_ERROR, f"DATA on idle stream {stream}")
            self._acknowledge(None, size)  # a stream that has ended: its bytes are let go
            if open_stream is not None and open_stream.remote_closed:  # after its END_STREAM
                open_stream.reset(STREAM_CLOSED)  # (what was in flight when a stream was reset is ignored)
            return
        open_stream.body_received(unpad(flags, payload), size)
        if flags & END_STREAM:
            open_stream.remote_closed = True
            open_stream.payload.feed_eof()

    def _on_header_block(self, stream: int, block: bytes, ends: bool) -> None:
        try:  # always decoded: the block changes the connection's HPACK table even for a refused stream
            headers: list[tuple[bytes, bytes]] | None = self._decoder.decode(block)
        except hpack.HeaderListTooLarge:  # read whole: the table is in step, the stream alone is refused
            headers = None
        except hpack.HpackError as e:  # the table may be out of step: the connection cannot go on
            raise FrameError(COMPRESSION_ERROR, f"an undecodable header block: {e}") from e
        if (open_stream := self._streams.get(stream)) is not None:  # trailers: only the end matters
            if open_stream.closed:
                return
            if not ends:
                open_stream.reset(PROTOCOL_ERROR)
            elif not open_stream.remote_closed:
                open_stream.remote_closed = True
                open_stream.payload.feed_eof()
            return
        if stream <= self._last_stream:  # a stream that is over (reset, refused, answered): ignored
            return
        self._last_stream = stream
        if self._going_away or len(self._streams) >= self._max_streams:
            self._write(frame(RST_STREAM, 0, stream, u32(REFUSED_STREAM)))  # the client retries elsewhere
            return
        if headers is None:  # as Go's servers: 431, and the connection goes on
            self._send_headers(stream, [(b":status", b"431")], end_stream=True)
            if not ends:
                self._write(frame(RST_STREAM, 0, stream, u32(NO_ERROR)))
            return
        new = _Stream(self, stream, headers, self._initial_window)
        self._streams[stream] = new
        self._busy()
        if ends:
            new.remote_closed = True
            new.payload.feed_eof()
        new.task = self._loop.create_task(self._serve(new))

    # -- streams ------------------------------------------------------------------------------

    async def _serve(self, stream: _Stream) -> None:
        writer = _StreamWriter(stream)
        request: web.BaseRequest | None = None
        try:
            try:
                message = stream.message()
            except ValueError as e:  # as Go's servers: a malformed request is a stream error
                log.info("refusing an HTTP/2 stream: %s", e)
                stream.reset(PROTOCOL_ERROR)
                return
            if message.headers.get("Expect", "").lower() == "100-continue":  # aiohttp would write it as HTTP/1.1
                self._send_headers(stream.id, [(b":status", b"100")], end_stream=False)
                fields = CIMultiDict(message.headers)
                del fields["Expect"]
                message = message._replace(headers=CIMultiDictProxy(fields))
            request = self._server.request_factory(message, stream.payload, stream, writer,  # type: ignore[arg-type]
                                                   stream.task)
            try:
                resp = await self._server.request_handler(request)
            except web.HTTPException as exc:  # as aiohttp's HTTP/1.1 handler: the exception is the response
                resp = exc
            await resp.prepare(request)
            await resp.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            pass  # the stream or the connection has gone, or the server is done waiting for it
        except Exception:
            log.exception("serving an HTTP/2 stream failed")
            stream.reset(INTERNAL_ERROR)
        finally:
            if request is not None:
                request._finish()
            self._finished(stream)

    def _finished(self, stream: _Stream) -> None:
        del self._streams[stream.id]
        stream.release_unread()
        if not stream.closed:
            if not stream.ended:
                stream.reset(INTERNAL_ERROR)
            elif not stream.remote_closed:  # answered before its body ended: the rest is not wanted
                stream.reset(NO_ERROR)
        if not self._streams:
            self._wake()  # shutdown waits for this
            self._close_when_idle()
            self._settle_if_done()
            self._idle()

    def _idle(self) -> None:
        """No stream open: as Go's servers do after their idle timeout, GOAWAY and close unless one opens."""
        if self._transport is not None and self._idle_timer is None:
            self._idle_timer = self._loop.call_later(self._idle_timeout, self.close)

    def _busy(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None

    def _close_when_idle(self) -> None:
        if self._going_away and not self._streams:
            self._loop.call_soon(self._close_transport)  # after the last frames are flushed

    def _close_transport(self) -> None:
        if self._transport is not None:
            self._flush()
            self._transport.close()

    def _go_away(self, code: int) -> None:
        self._going_away = True
        self._write(frame(GOAWAY, 0, 0, u32(self._last_stream) + u32(code)))

    # -- frames out -----------------------------------------------------------------------------

    def _send_headers(self, stream: int, headers: list[tuple[bytes, bytes]], end_stream: bool) -> None:
        block = hpack.encode(headers)
        first, block = block[:self._max_frame], block[self._max_frame:]
        flags = (END_STREAM if end_stream else 0) | (0 if block else END_HEADERS)
        self._write(frame(HEADERS, flags, stream, first))
        while block:
            part, block = block[:self._max_frame], block[self._max_frame:]
            self._write(frame(CONTINUATION, 0 if block else END_HEADERS, stream, part))

    def send_headers(self, stream: _Stream, headers: list[tuple[bytes, bytes]], end_stream: bool) -> None:
        if stream.closed or self._transport is None:
            raise ConnectionResetError("the HTTP/2 stream is closed")
        self._send_headers(stream.id, headers, end_stream)

    async def send_data(self, stream: _Stream, data: bytes | bytearray | memoryview, end_stream: bool) -> None:
        """Sends ``data`` as the flow-control windows allow, then waits while the socket's buffer is full."""
        view = memoryview(data)
        while True:
            if stream.closed or self._transport is None:
                raise ConnectionResetError("the HTTP/2 stream is closed")
            room = max(0, min(self._send_window, stream.send_window, len(view)))  # a lowered window: below 0
            if room <= 0 and view:
                self._flush()
                await self._changed()
                continue
            self._queue_data(stream, view[:room], end_stream and room == len(view))
            view = view[room:]
            if not view:
                break
        if not self._writable.is_set():
            self._flush()
            await self._writable.wait()
            if self._transport is None:
                raise ConnectionResetError("the HTTP/2 connection is closed")

    def send_data_now(self, stream: _Stream, data: bytes) -> bool:
        """Queues ``data`` if the windows and the socket take all of it now; False: ``send_data`` must wait.
        The watch fan-out's path, once per event and stream."""
        size = len(data)
        if not size or size > self._send_window or size > stream.send_window or stream.closed \
                or self._transport is None or not self._writable.is_set():
            return False
        self._queue_data(stream, data, False)
        return True

    def _queue_data(self, stream: _Stream, view: bytes | memoryview, end_stream: bool) -> None:
        """DATA frames of at most the client's frame size for ``view``, which the windows have room for."""
        size = len(view)
        if size <= self._max_frame:  # most payloads, an empty one ending a stream too: one frame, no slicing
            self._outgoing_frame(frame_header(DATA, END_STREAM if end_stream else 0, stream.id, size), view)
        else:
            for start in range(0, size, self._max_frame):
                part = view[start:start + self._max_frame]
                last = start + self._max_frame >= size
                self._outgoing_frame(frame_header(DATA, END_STREAM if end_stream and last else 0, stream.id,
                                                  len(part)), part)
        self._send_window -= size
        stream.send_window -= size

    def reset(self, stream_id: int, code: int) -> None:
        self._write(frame(RST_STREAM, 0, stream_id, u32(code)))
        self._wake()

    def _acknowledge(self, stream: _Stream | None, size: int) -> None:
        """Give window back for body bytes read, in updates of half a window (fewer frames)."""
        self._unacknowledged += size
        if self._unacknowledged >= CONNECTION_WINDOW // 2:
            self._write(frame(WINDOW_UPDATE, 0, 0, u32(self._unacknowledged)))
            self._receive_window += self._unacknowledged
            self._unacknowledged = 0
        if stream is not None and not stream.remote_closed and not stream.closed:
            stream.unacknowledged += size
            if stream.unacknowledged >= STREAM_WINDOW // 2:
                self._write(frame(WINDOW_UPDATE, 0, stream.id, u32(stream.unacknowledged)))
                stream.receive_window += stream.unacknowledged
                stream.unacknowledged = 0

    def _write(self, data: bytes) -> None:
        self._outgoing_frame(data, b"")

    def _outgoing_frame(self, header: bytes, payload: bytes | memoryview) -> None:
        """One write for the frames of a loop iteration (a fan-out's events to all its streams), or for
        every FLUSH_AT bytes of them, so that a full socket pauses the writers in time."""
        if not self._outgoing:
            self._loop.call_soon(self._flush)
        self._outgoing.append(header)
        self._queued += len(header) + len(payload)
        if payload:
            self._outgoing.append(payload)
        if self._queued >= FLUSH_AT:
            self._flush()

    def _flush(self) -> None:
        data, self._outgoing, self._queued = self._outgoing, [], 0
        if data and self._transport is not None and not self._transport.is_closing():
            self._transport.write(b"".join(data))

    async def _changed(self) -> None:
        await self._change.wait()

    def _wake(self) -> None:
        self._change.happened()

    def extra_info(self, name: str, default: Any = None) -> Any:
        return default if self._transport is None else self._transport.get_extra_info(name, default)

    @property
    def connection_closing(self) -> bool:
        return self._transport is None or self._transport.is_closing()


class _Stream:
    """One stream, as the aiohttp request sees its protocol: flow control of the body it reads, and
    its ``transport``."""

    def __init__(self, connection: Http2Connection, stream_id: int, headers: list[tuple[bytes, bytes]],
                 send_window: int) -> None:
        self.connection = connection
        self.id = stream_id
        self.headers = headers
        self.send_window = send_window  # what the client lets us send on this stream
        self.task: asyncio.Task[None] = None  # type: ignore[assignment]  # set once the stream is taken
        self.payload = StreamReader(self, 1 << 16, loop=connection._loop)  # type: ignore[arg-type]
        self.transport = _StreamTransport(self)
        self.closed = False  # reset (by either side) or the connection lost
        self.ended = False  # our side sent END_STREAM
        self.remote_closed = False  # the client's side sent END_STREAM
        self.unacknowledged = 0  # body bytes read since this stream's window was last given back
        self.receive_window = STREAM_WINDOW  # what the client may still send on it before a WINDOW_UPDATE
        self._reading_paused = False
        self._unread = 0  # body bytes taken in while the handler was not reading
        # what aiohttp's request reads from its protocol
        self.ssl_context, self.peername, self.sockname = connection.ssl_context, connection.peername, \
            connection.sockname
        self.max_field_size = 64 << 10
        self.max_headers = 128

    @property
    def connected(self) -> bool:
        return not self.closed

    def message(self) -> RawRequestMessage:
        """The request's method, path and headers as aiohttp's HTTP/1.1 parser would give them."""
        pseudo: dict[bytes, bytes] = {}
        fields: CIMultiDict[str] = CIMultiDict()
        raw: list[tuple[bytes, bytes]] = []
        cookies: list[str] = []
        for name, value in self.headers:
            if name.startswith(b":"):
                if name not in (b":method", b":path", b":scheme", b":authority") or name in pseudo or raw:
                    raise ValueError(f"a misplaced or unknown pseudo-header {name.decode('latin-1')}")
                pseudo[name] = value
            elif name.lower() != name or name.decode("latin-1") in _CONNECTION_FIELDS:
                raise ValueError(f"a header field HTTP/2 does not allow: {name.decode('latin-1')}")
            elif name == b"cookie":  # HTTP/2 may split it into fields (RFC 9113 8.2.3): one, as HTTP/1.1's
                cookies.append(value.decode("utf-8", "surrogateescape"))
            else:
                fields.add(name.decode("latin-1"), value.decode("utf-8", "surrogateescape"))
                raw.append((name, value))
        if cookies:
            fields.add("Cookie", "; ".join(cookies))
            raw.append((b"cookie", "; ".join(cookies).encode("utf-8", "surrogateescape")))
        method = pseudo.get(b":method", b"").decode("ascii", "replace")
        path = pseudo.get(b":path", b"").decode("utf-8", "surrogateescape")
        if not method or b":scheme" not in pseudo:
            raise ValueError("a request without :method or :scheme")
        if not path.startswith("/"):
            raise ValueError(f"the request's :path {path!r} is not an absolute path")
        authority = pseudo.get(b":authority")
        if authority is not None and "Host" not in fields:
            fields["Host"] = authority.decode("latin-1")
        target, _, query = path.partition("?")  # as aiohttp's parser: "//x/y" is a path, not an authority
        url = URL.build(path=target, query_string=query, encoded=True)
        return RawRequestMessage(method, path, HttpVersion11, CIMultiDictProxy(fields), tuple(raw), False, None,
                                 False, False, url)

    def body_received(self, data: bytes, flow_controlled: int) -> None:
        if data:
            self.payload.feed_data(data)
        if self._reading_paused:
            self._unread += flow_controlled
        else:
            self.connection._acknowledge(self, flow_controlled)

    # the StreamReader's back-pressure: the client's window reopens only as the handler reads
    def pause_reading(self) -> None:
        self._reading_paused = True

    def resume_reading(self, resume_parser: bool = True) -> None:
        self._reading_paused = False
        self.release_unread()

    def release_unread(self) -> None:
        if self._unread:
            size, self._unread = self._unread, 0
            self.connection._acknowledge(self, size)

    def closed_by_peer(self) -> None:
        self._close()
        self.connection._wake()  # a writer waiting on this stream's window gives up

    def reset(self, code: int) -> None:
        if not self.closed:
            self._close()
            self.connection.reset(self.id, code)

    def _close(self) -> None:
        self.closed = True
        self.payload.set_exception(ConnectionResetError("the HTTP/2 stream was reset"))  # a reader stops


class _StreamTransport:
    """What a handler reaches as ``request.transport``: the TLS connection's facts, this stream's state."""

    def __init__(self, stream: _Stream) -> None:
        self._stream = stream

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._stream.connection.extra_info(name, default)

    def is_closing(self) -> bool:
        return self._stream.closed or self._stream.connection.connection_closing

    def abort(self) -> None:
        """Drop this stream (its client stops reading, say): the connection's other streams go on."""
        self._stream.reset(CANCEL)

    close = abort


class _StreamWriter(AbstractStreamWriter):
    """A response as HEADERS and DATA frames of one stream."""

    def __init__(self, stream: _Stream) -> None:
        self._stream = stream
        self._headers: list[tuple[bytes, bytes]] | None = None
        self.buffer_size = 0
        self.output_size = 0
        self.length = None

    @property
    def transport(self) -> Any:
        return self._stream.transport

    async def write_headers(self, status_line: str, headers: CIMultiDict[str]) -> None:
        status = status_line.split(" ", 2)[1]
        self._headers = [(b":status", status.encode())] + [
            (name.lower().encode("latin-1"), value.encode("utf-8", "surrogateescape"))
            for name, value in headers.items() if name.lower() not in _CONNECTION_FIELDS]

    def send_headers(self) -> None:
        self._send_headers(end_stream=False)

    def _send_headers(self, end_stream: bool) -> None:
        if self._headers is not None:
            headers, self._headers = self._headers, None
            self._stream.connection.send_headers(self._stream, headers, end_stream)
            self._stream.ended = end_stream

    async def write(self, chunk: bytes | bytearray | memoryview, *, drain: bool = True, **_: Any) -> None:
        self._send_headers(end_stream=False)
        if chunk:
            self.output_size += len(chunk)
            await self._stream.connection.send_data(self._stream, chunk, end_stream=False)

    async def write_eof(self, chunk: bytes = b"") -> None:
        if self._stream.ended:
            return
        if self._headers is not None and not chunk:
            self._send_headers(end_stream=True)
            return
        self._send_headers(end_stream=False)
        self.output_size += len(chunk)
        await self._stream.connection.send_data(self._stream, chunk, end_stream=True)
        self._stream.ended = True

    def write_now(self, data: bytes) -> bool:
        """Sends ``data`` without waiting if nothing has to be waited for (the watch fan-out's path: no task
        switch per event and stream); False: ``write`` it."""
        if self._headers is not None or not self._stream.connection.send_data_now(self._stream, data):
            return False
        self.output_size += len(data)
        return True

    async def drain(self) -> None:
        return None  # send_data has waited for the socket already

    def enable_chunking(self) -> None:
        return None  # HTTP/2 frames carry the body's length

    def enable_compression(self, encoding: str = "deflate", strategy: int | None = None) -> None:
        raise NotImplementedError("compressed responses are not served over HTTP/2")
