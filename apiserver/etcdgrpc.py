"""Unary gRPC calls to etcd over one HTTP/2 connection per member.

etcd serves its API natively over gRPC; its JSON gateway turns each call into JSON and then into
a loopback gRPC call to itself, which doubles etcd's CPU for a write (0.7 ms against 0.36 ms
per 800-byte transaction, measured alone). Writes and the revision read behind every consistent
read come here; what streams (watches) and what runs rarely (leases, compaction, status) stay on
the gateway (:mod:`.etcdhttp`).

This is the least of HTTP/2 a unary call needs, in an :class:`asyncio.Protocol`:

- Calls are multiplexed as concurrent streams, within the member's stream limit and send windows
  (connection and stream), in frames no larger than it allows.
- Request header blocks use HPACK's static table and never-indexed literals, so they change no
  state on either side and are built once per method.
- We announce a header table size of 0, so etcd (grpc-go) keeps no dynamic table for its replies
  and every block it sends can be read alone. Of a successful reply only ``:status: 200`` is
  checked, which grpc-go sends first, as static entry 8; a unary reply carries its message only
  on success. The header blocks of any other ending are decoded (:mod:`hpack`) for etcd's
  ``grpc-status`` and ``grpc-message``, raised as :class:`GrpcError`.
- A call that failed before etcd could have seen it raises :class:`NotSent` (safe to send to
  another member); one whose connection broke after it was sent raises :class:`CallBroken`:
  a write may or may not have been applied.
"""

from __future__ import annotations

import asyncio
import ssl
import struct
import urllib.parse
from typing import cast

import hpack

from .etcdhttp import Endpoint

STATUS_200 = 0x88  # HPACK: indexed header field, static table entry 8 = ":status: 200"
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0, 1, 3, 4, 6, 7, 8, 9
END_STREAM = ACK = 0x1
END_HEADERS, PADDED, PRIORITY = 0x4, 0x8, 0x20
SETTINGS_HEADER_TABLE_SIZE, SETTINGS_ENABLE_PUSH, SETTINGS_MAX_CONCURRENT_STREAMS = 0x1, 0x2, 0x3
SETTINGS_INITIAL_WINDOW_SIZE, SETTINGS_MAX_FRAME_SIZE = 0x4, 0x5
REFUSED_STREAM = 0x7
MAX_WINDOW = 2**31 - 1
LAST_STREAM_ID = 2**31 - 1
GRPC_UNKNOWN = 2


class GrpcError(Exception):
    """etcd answered the call with a gRPC status other than OK."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"gRPC status {code}: {message}")
        self.code = code
        self.message = message


class NotSent(ConnectionError):
    """The call never reached etcd: no connection, or etcd refused the stream unprocessed."""


class CallBroken(ConnectionError):
    """The connection broke after the call was sent: etcd may or may not have carried it out."""


def _frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes((kind, flags)) + struct.pack(">I", stream) + payload


def _hpack_int(value: int, prefix_bits: int, first: int) -> bytes:
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first | value,))
    out, value = bytearray((first | limit,)), value - limit
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _hpack_string(text: str) -> bytes:
    raw = text.encode()
    return _hpack_int(len(raw), 7, 0) + raw  # not Huffman-coded


def request_headers(endpoint: Endpoint, path: bytes) -> bytes:
    """The header block of every call of one method: static-table entries and never-indexed
    literals only, so that it leaves no state in either side's HPACK table."""
    def never_indexed(static_index: int, value: str) -> bytes:
        return _hpack_int(static_index, 4, 0x10) + _hpack_string(value)
    return (b"\x83"  # :method: POST
            + (b"\x87" if endpoint.tls else b"\x86")  # :scheme: https / http
            + never_indexed(4, path.decode())  # :path
            + never_indexed(1, f"{endpoint.host}:{endpoint.port}")  # :authority
            + never_indexed(31, "application/grpc")  # content-type
            + b"\x10" + _hpack_string("te") + _hpack_string("trailers"))


def _status_is_200(block: bytes) -> bool:
    """Whether a reply's header block starts with ``:status: 200`` (after any table size updates)."""
    i = 0
    while i < len(block) and block[i] & 0xE0 == 0x20:  # 001xxxxx: a dynamic table size update
        if block[i] & 0x1F == 0x1F:  # its size goes on in the following bytes
            i += 1
            while i < len(block) and block[i] & 0x80:
                i += 1
        i += 1
    return i < len(block) and block[i] == STATUS_200


def grpc_status(blocks: list[bytes]) -> GrpcError:
    """The gRPC status carried by a reply's header blocks (headers and trailers, or trailers only)."""
    found: dict[str, str] = {}
    try:
        for block in blocks:
            for name, value in hpack.Decoder().decode(block):  # stateless: the table size is 0
                found[name] = value
    except hpack.HPACKError as e:
        return GrpcError(GRPC_UNKNOWN, f"etcd's reply could not be read ({e})")
    status = found.get("grpc-status")
    if status is None or not status.isdigit():
        return GrpcError(GRPC_UNKNOWN, f"etcd answered without a gRPC status (HTTP {found.get(':status', '?')})")
    if status == "0":
        return GrpcError(GRPC_UNKNOWN, "etcd answered OK without a reply message")
    return GrpcError(int(status), urllib.parse.unquote(found.get("grpc-message", "")))


class _Call:
    """One stream: its reply as it comes in."""

    __slots__ = ("reply", "data", "answered", "blocks", "send_window", "window_opened")

    def __init__(self, reply: asyncio.Future[bytes], send_window: int) -> None:
        self.reply = reply
        self.data = bytearray()
        self.answered = False  # the reply's first header block said :status 200
        self.blocks: list[bytes] = []  # header blocks, kept in case they carry an error
        self.send_window = send_window
        self.window_opened: asyncio.Event | None = None


class _Connection(asyncio.Protocol):
    """An HTTP/2 client connection that runs unary calls as concurrent streams."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.transport: asyncio.Transport | None = None
        self.closed = False  # no new calls: gone away, broken, or closed by us
        self.buffer = b""
        self.next_stream = 1
        self.calls: dict[int, _Call] = {}
        self.headers_by_method: dict[bytes, bytes] = {}
        # What the member allows us, from its SETTINGS and WINDOW_UPDATEs.
        self.max_streams = 2**32 - 1  # until the member's SETTINGS say otherwise
        self.initial_window = 65535
        self.max_frame = 16384
        self.send_window = 65535  # the connection's
        self.unacknowledged = 0  # DATA received since our last connection WINDOW_UPDATE
        self.settled = asyncio.Event()  # the member's first SETTINGS are in: its limits are known
        self._change: asyncio.Event | None = None  # set when a window opens, a stream ends, or it closes
        self._block: bytearray | None = None  # a header block continued in CONTINUATION frames
        self._block_stream = 0
        self._block_ends_stream = False

    # -- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses
        settings = b"".join(struct.pack(">HI", key, value) for key, value in (
            (SETTINGS_HEADER_TABLE_SIZE, 0), (SETTINGS_ENABLE_PUSH, 0), (SETTINGS_INITIAL_WINDOW_SIZE, MAX_WINDOW)))
        self.transport.write(PREFACE + _frame(SETTINGS, 0, 0, settings)
                             + _frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", MAX_WINDOW - 65535)))

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer + data if self.buffer else data
        offset = 0
        try:
            while len(buffer) - offset >= 9:
                size = int.from_bytes(buffer[offset:offset + 3], "big")
                if len(buffer) - offset < 9 + size:
                    break
                kind, flags = buffer[offset + 3], buffer[offset + 4]
                stream = int.from_bytes(buffer[offset + 5:offset + 9], "big") & 0x7FFFFFFF
                self._on_frame(kind, flags, stream, buffer[offset + 9:offset + 9 + size])
                offset += 9 + size
        except (ValueError, IndexError, struct.error) as e:
            self._fail_all(CallBroken(f"bad HTTP/2 from etcd: {e}"))
            self.close()
            return
        self.buffer = buffer[offset:]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.settled.set()
        self._fail_all(CallBroken(f"connection to etcd closed: {exc}" if exc else "connection to etcd closed"))

    # -- frames ----------------------------------------------------------------------------

    def _on_frame(self, kind: int, flags: int, stream: int, payload: bytes) -> None:
        if kind == DATA:
            self._on_data(flags, stream, payload)
        elif kind == HEADERS:
            if flags & PADDED:
                payload = payload[1:len(payload) - payload[0]]
            if flags & PRIORITY:
                payload = payload[5:]
            self._block, self._block_stream, self._block_ends_stream = bytearray(payload), stream, bool(
                flags & END_STREAM)
            if flags & END_HEADERS:
                self._on_header_block()
        elif kind == CONTINUATION:
            if self._block is None or stream != self._block_stream:
                raise ValueError("CONTINUATION outside a header block")
            self._block += payload
            if flags & END_HEADERS:
                self._on_header_block()
        elif kind == SETTINGS:
            if not flags & ACK:
                self._on_settings(payload)
                self._write(_frame(SETTINGS, ACK, 0))
                self.settled.set()
        elif kind == WINDOW_UPDATE:
            increment = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
            if stream == 0:
                self.send_window += increment
            elif (call := self.calls.get(stream)) is not None:
                call.send_window += increment
            self._wake()
        elif kind == PING:
            if not flags & ACK:
                self._write(_frame(PING, ACK, 0, payload))
        elif kind == RST_STREAM:
            code = int.from_bytes(payload[:4], "big")
            error = NotSent if code == REFUSED_STREAM else CallBroken
            self._end(stream, error(f"etcd reset the stream (HTTP/2 error {code})"))
        elif kind == GOAWAY:
            # Streams above the last one etcd took were not processed; the others may complete,
            # and then the connection is closed by us: a member shutting down waits for its clients.
            self.closed = True
            last = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
            for number in [n for n in self.calls if n > last]:
                self._end(number, NotSent("etcd is going away"))
            if not self.calls:
                self.close()
            self._wake()

    def _on_settings(self, payload: bytes) -> None:
        for i in range(0, len(payload) - 5, 6):
            key, value = struct.unpack(">HI", payload[i:i + 6])
            if key == SETTINGS_MAX_CONCURRENT_STREAMS:
                self.max_streams = value
            elif key == SETTINGS_INITIAL_WINDOW_SIZE:
                for call in self.calls.values():
                    call.send_window += value - self.initial_window
                self.initial_window = value
            elif key == SETTINGS_MAX_FRAME_SIZE:
                self.max_frame = value
        self._wake()

    def _on_data(self, flags: int, stream: int, payload: bytes) -> None:
        self.unacknowledged += len(payload)
        if self.unacknowledged > MAX_WINDOW // 2:  # give back what we consumed, rarely
            self._write(_frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", self.unacknowledged)))
            self.unacknowledged = 0
        if flags & PADDED:
            payload = payload[1:len(payload) - payload[0]]
        call = self.calls.get(stream)
        if call is not None:
            call.data += payload
            if flags & END_STREAM:
                self._finish(stream, call)

    def _on_header_block(self) -> None:
        block, stream, self._block = bytes(self._block or b""), self._block_stream, None
        call = self.calls.get(stream)
        if call is None:
            return
        if not call.blocks and not call.data:  # the reply's headers, not its trailers
            call.answered = _status_is_200(block)
        call.blocks.append(block)
        if self._block_ends_stream:
            self._finish(stream, call)

    # -- calls -----------------------------------------------------------------------------

    def _write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    async def _changed(self) -> None:
        if self._change is None:
            self._change = asyncio.Event()
        await self._change.wait()

    def _wake(self) -> None:
        if self._change is not None:
            self._change.set()
            self._change = None

    def _finish(self, stream: int, call: _Call) -> None:
        data = call.data
        size = int.from_bytes(data[1:5], "big") if len(data) >= 5 else -1
        if call.answered and data[:1] == b"\0" and size == len(data) - 5:
            self._end(stream, None, bytes(data[5:]))
        else:
            self._end(stream, grpc_status(call.blocks))

    def _end(self, stream: int, error: Exception | None, result: bytes = b"") -> None:
        call = self.calls.pop(stream, None)
        if call is None:
            return
        if not call.reply.done():
            if error is None:
                call.reply.set_result(result)
            else:
                call.reply.set_exception(error)
        if self.closed and not self.calls:
            self.close()  # after a GOAWAY, the last answer
        self._wake()

    def _fail_all(self, error: ConnectionError) -> None:
        for stream in list(self.calls):
            self._end(stream, error)
        self._wake()

    async def call(self, method: bytes, message: bytes) -> bytes:
        """One unary call; the reply message. Raises GrpcError, NotSent or CallBroken."""
        if not self.settled.is_set():
            await self.settled.wait()
        while len(self.calls) >= self.max_streams and not self.closed:
            await self._changed()
        if self.closed or self.next_stream > LAST_STREAM_ID:
            self.closed = True
            raise NotSent("connection to etcd closed")
        headers = self.headers_by_method.get(method)
        if headers is None:
            headers = self.headers_by_method[method] = request_headers(self.endpoint, method)
        stream, self.next_stream = self.next_stream, self.next_stream + 2
        call = _Call(asyncio.get_running_loop().create_future(), self.initial_window)
        self.calls[stream] = call
        body = b"\0" + struct.pack(">I", len(message)) + message
        limit = min(self.send_window, call.send_window, self.max_frame)
        if len(body) <= limit:  # the common case: headers and message in one write
            self.send_window -= len(body)
            call.send_window -= len(body)
            self._write(_frame(HEADERS, END_HEADERS, stream, headers) + _frame(DATA, END_STREAM, stream, body))
        else:
            self._write(_frame(HEADERS, END_HEADERS, stream, headers))
            await self._send_body(stream, call, body)
        return await call.reply

    async def _send_body(self, stream: int, call: _Call, body: bytes) -> None:
        """DATA frames as the windows allow, the last one ending the stream."""
        view = memoryview(body)
        while view and not call.reply.done():
            size = min(len(view), self.send_window, call.send_window, self.max_frame)
            if size <= 0:
                await self._changed()
                continue
            self.send_window -= size
            call.send_window -= size
            self._write(_frame(DATA, END_STREAM if size == len(view) else 0, stream, bytes(view[:size])))
            view = view[size:]

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


class GrpcConnections:
    """One HTTP/2 connection per etcd member, made when first needed and again after it ends."""

    def __init__(self, ssl_context: ssl.SSLContext | None, connect_timeout: float) -> None:
        self.ssl_context = ssl_context
        self.connect_timeout = connect_timeout
        self._connections: dict[Endpoint, _Connection] = {}
        self._connecting: dict[Endpoint, asyncio.Future[_Connection]] = {}

    async def _connection(self, endpoint: Endpoint) -> _Connection:
        conn = self._connections.get(endpoint)
        if conn is not None and not conn.closed:
            return conn
        pending = self._connecting.get(endpoint)
        if pending is not None:  # one connect per member, however many calls wait for it
            return await asyncio.shield(pending)
        pending = self._connecting[endpoint] = asyncio.get_running_loop().create_future()
        try:
            conn = await self._connect(endpoint)
        except BaseException as e:
            pending.set_exception(e if isinstance(e, NotSent) else NotSent(str(e)))
            pending.exception()  # retrieved: callers that shared it got it already
            raise
        finally:
            del self._connecting[endpoint]
        pending.set_result(conn)
        old = self._connections.get(endpoint)
        if old is not None and not old.calls:
            old.close()  # gone away or broken: its streams are over
        self._connections[endpoint] = conn
        return conn

    async def _connect(self, endpoint: Endpoint) -> _Connection:
        if endpoint.tls and self.ssl_context is None:
            raise NotSent(f"{endpoint.url} needs TLS and no TLS settings were given")
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, conn = await asyncio.get_running_loop().create_connection(
                    lambda: _Connection(endpoint), endpoint.host, endpoint.port,
                    ssl=self.ssl_context if endpoint.tls else None,
                    server_hostname=endpoint.host if endpoint.tls else None)
        except TimeoutError:
            raise NotSent(f"connecting to {endpoint.url} timed out") from None
        except OSError as e:
            raise NotSent(f"connecting to {endpoint.url} failed: {e}") from e
        return conn

    async def call(self, endpoint: Endpoint, method: bytes, message: bytes, timeout: float) -> bytes:
        """One unary call within ``timeout``. Raises GrpcError, NotSent, CallBroken, TimeoutError."""
        conn: _Connection | None = None
        try:
            async with asyncio.timeout(timeout):
                conn = await self._connection(endpoint)
                return await conn.call(method, message)
        except TimeoutError:
            if conn is not None:
                conn.close()  # a member that stopped answering: the next call connects afresh
            raise

    def close(self) -> None:
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()
