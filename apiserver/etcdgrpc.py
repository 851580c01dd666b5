"""etcd's current revision over gRPC: the etcd call behind every consistent read.

Through etcd's JSON gateway a quorum Range costs etcd about 1 ms of CPU (JSON, then a loopback
gRPC call to itself); over gRPC, about 0.4 ms. That one call is worth a second protocol, and it
needs little of one: one unary call at a time on one HTTP/2 connection, a request that never
changes, and a reply of which only the header's revision is read. Every other call stays on the
gateway (:mod:`.etcdhttp`).

Header blocks are not decoded: the request's is built from HPACK's static table and literals
that are never indexed, and of a reply only ``:status: 200`` is checked, which etcd (grpc-go)
sends first, as static entry 8. A unary gRPC reply carries its message only on success; any
other ending is a :class:`ProbeError`, and the caller asks the gateway, which reports etcd's
error in full.
"""

from __future__ import annotations

import asyncio
import ssl
import struct
from typing import cast

from .etcdhttp import Endpoint

STATUS_200 = 0x88  # HPACK: indexed header field, static table entry 8 = ":status: 200"
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0, 1, 3, 4, 6, 7, 8, 9
END_STREAM = ACK = 0x1
END_HEADERS, PADDED, PRIORITY = 0x4, 0x8, 0x20
SETTINGS_ENABLE_PUSH, SETTINGS_INITIAL_WINDOW_SIZE = 0x2, 0x4
MAX_WINDOW = 2**31 - 1
RANGE_METHOD = b"/etcdserverpb.KV/Range"


class ProbeError(ConnectionError):
    """No revision came back: the connection failed, or etcd answered with a gRPC error."""


def _frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes((kind, flags)) + struct.pack(">I", stream) + payload


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


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
    """The header block of every call: static-table entries and never-indexed literals only,
    so that it leaves no state in either side's HPACK table and can be sent again unchanged."""
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


def range_request(key: bytes) -> bytes:
    """RangeRequest{key, limit: 1, keys_only: true}: the smallest quorum read of a revision."""
    return b"\x0a" + _varint(len(key)) + key + b"\x18\x01" + b"\x40\x01"


def _read_varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        byte = buf[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, i


def header_revision(message: bytes) -> int:
    """RangeResponse.header (field 1).revision (field 3); other fields are skipped unread."""
    def fields(buf: bytes) -> list[tuple[int, int, int | bytes]]:
        out: list[tuple[int, int, int | bytes]] = []
        i = 0
        while i < len(buf):
            tag, i = _read_varint(buf, i)
            number, wire = tag >> 3, tag & 7
            if wire == 0:
                value, i = _read_varint(buf, i)
                out.append((number, wire, value))
            elif wire == 2:
                size, i = _read_varint(buf, i)
                out.append((number, wire, buf[i:i + size]))
                i += size
            elif wire in (1, 5):
                i += 8 if wire == 1 else 4
            else:
                raise ProbeError(f"unexpected protobuf wire type {wire}")
        return out
    for number, wire, value in fields(message):
        if number == 1 and wire == 2:
            for inner, inner_wire, revision in fields(cast(bytes, value)):
                if inner == 3 and inner_wire == 0:
                    return cast(int, revision)
    raise ProbeError("etcd's RangeResponse carried no revision")


class _Connection(asyncio.Protocol):
    """An HTTP/2 client connection that runs one stream at a time."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.buffer = b""
        self.stream = -1  # the one stream in flight, or the last one
        self.next_stream = 1
        # The connection's send window, as the server grants it. A stream's own window is never
        # the limit: each carries one request of a few dozen bytes against at least 64 KiB.
        self.send_window = 65535
        self.unacknowledged = 0  # DATA received since our last WINDOW_UPDATE
        self.window_opened = asyncio.Event()
        self.request_headers = request_headers(endpoint, RANGE_METHOD)
        self._block_ends_stream = False
        self._reply: asyncio.Future[bytes] | None = None
        self._data = bytearray()
        self._answered = False  # the reply's first header block said :status 200

    # -- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses
        settings = struct.pack(">HI", SETTINGS_ENABLE_PUSH, 0) + struct.pack(">HI", SETTINGS_INITIAL_WINDOW_SIZE,
                                                                             MAX_WINDOW)
        self.transport.write(PREFACE + _frame(SETTINGS, 0, 0, settings)
                             + _frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", MAX_WINDOW - 65535)))

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer + data
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
        except (ProbeError, ValueError, IndexError, struct.error) as e:
            self._fail(e if isinstance(e, ProbeError) else ProbeError(f"bad HTTP/2 from etcd: {e}"))
            self.close()
            return
        self.buffer = buffer[offset:]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(ProbeError(f"connection to etcd closed: {exc}" if exc else "connection to etcd closed"))
        self.window_opened.set()

    # -- frames ----------------------------------------------------------------------------

    def _on_frame(self, kind: int, flags: int, stream: int, payload: bytes) -> None:
        if kind == SETTINGS:
            if not flags & ACK:
                self._write(_frame(SETTINGS, ACK, 0))
        elif kind == PING:
            if not flags & ACK:
                self._write(_frame(PING, ACK, 0, payload))
        elif kind == WINDOW_UPDATE:
            if stream == 0:
                self.send_window += int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
                self.window_opened.set()
        elif kind == GOAWAY:
            # No new streams; one in flight that etcd accepted may still complete. Then the
            # connection is closed by us: a member shutting down waits for its clients to go.
            self.closed = True
            last = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
            if self.stream > last:
                self._fail(ProbeError("etcd is going away"))
            if self._reply is None:
                self.close()
        elif kind == DATA:
            self._on_data(flags, stream, payload)
        elif kind in (HEADERS, CONTINUATION):
            self._on_headers(kind, flags, stream, payload)
        elif kind == RST_STREAM and stream == self.stream:
            code = int.from_bytes(payload[:4], "big")
            self._fail(ProbeError(f"etcd reset the stream (HTTP/2 error {code})"))

    def _on_data(self, flags: int, stream: int, payload: bytes) -> None:
        self.unacknowledged += len(payload)
        if self.unacknowledged > MAX_WINDOW // 2:  # give back what we consumed, rarely
            self._write(_frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", self.unacknowledged)))
            self.unacknowledged = 0
        if flags & PADDED:
            payload = payload[1:len(payload) - payload[0]]
        if stream == self.stream:
            self._data += payload
            if flags & END_STREAM:
                self._finish()

    def _on_headers(self, kind: int, flags: int, stream: int, payload: bytes) -> None:
        if stream != self.stream:
            return
        if kind == HEADERS:
            if flags & PADDED:
                payload = payload[1:len(payload) - payload[0]]
            if flags & PRIORITY:
                payload = payload[5:]
            if not self._answered and not self._data:  # the reply's headers, not its trailers
                self._answered = _status_is_200(payload)
            self._block_ends_stream = bool(flags & END_STREAM)
        if flags & END_HEADERS and self._block_ends_stream:
            self._finish()

    # -- the call --------------------------------------------------------------------------

    def _write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def _finish(self) -> None:
        reply, self._reply = self._reply, None
        if self.closed:
            self.close()  # after a GOAWAY, the last answer
        if reply is None or reply.done():
            return
        size = int.from_bytes(self._data[1:5], "big") if len(self._data) >= 5 else -1
        if not self._answered or self._data[:1] != b"\0" or size != len(self._data) - 5:
            reply.set_exception(ProbeError("etcd answered the Range without a revision (a gRPC error)"))
        else:
            reply.set_result(bytes(self._data[5:]))

    def _fail(self, error: ProbeError) -> None:
        reply, self._reply = self._reply, None
        if reply is not None and not reply.done():
            reply.set_exception(error)

    async def call(self, message: bytes) -> bytes:
        """One unary Range; the reply message."""
        body = b"\0" + struct.pack(">I", len(message)) + message
        while self.send_window < len(body) and not self.closed:
            self.window_opened.clear()
            await self.window_opened.wait()
        if self.closed:
            raise ProbeError("connection to etcd closed")
        self.send_window -= len(body)
        self.stream, self.next_stream = self.next_stream, self.next_stream + 2
        self._data, self._answered, self._block_ends_stream = bytearray(), False, False
        self._reply = asyncio.get_running_loop().create_future()
        self._write(_frame(HEADERS, END_HEADERS, self.stream, self.request_headers)
                    + _frame(DATA, END_STREAM, self.stream, body))
        return await self._reply

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


class RevisionProbe:
    """Reads etcd's current revision over gRPC, one call at a time, on one connection per endpoint."""

    def __init__(self, ssl_context: ssl.SSLContext | None, connect_timeout: float) -> None:
        self.ssl_context = ssl_context
        self.connect_timeout = connect_timeout
        self._connections: dict[Endpoint, _Connection] = {}
        self._lock = asyncio.Lock()

    async def _connection(self, endpoint: Endpoint) -> _Connection:
        conn = self._connections.get(endpoint)
        if conn is not None and not conn.closed:
            return conn
        if conn is not None:
            conn.close()  # gone away or broken: its streams are over
        if endpoint.tls and self.ssl_context is None:
            raise ProbeError(f"{endpoint.url} needs TLS and no TLS settings were given")
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, conn = await asyncio.get_running_loop().create_connection(
                    lambda: _Connection(endpoint), endpoint.host, endpoint.port,
                    ssl=self.ssl_context if endpoint.tls else None,
                    server_hostname=endpoint.host if endpoint.tls else None)
        except TimeoutError:
            raise ProbeError(f"connecting to {endpoint.url} timed out") from None
        self._connections[endpoint] = conn
        return conn

    async def revision(self, endpoint: Endpoint, key: bytes, timeout: float) -> int:
        """etcd's revision as of a quorum read sent now. Raises ProbeError, OSError, TimeoutError."""
        async with self._lock:  # callers already share reads; one at a time keeps the protocol small
            conn: _Connection | None = None
            try:
                async with asyncio.timeout(timeout):
                    conn = await self._connection(endpoint)
                    return header_revision(await conn.call(range_request(key)))
            except TimeoutError:
                if conn is not None:
                    conn.close()  # its answer may still come: the next call starts afresh
                raise

    def close(self) -> None:
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()
