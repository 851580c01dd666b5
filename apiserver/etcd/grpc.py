"""gRPC calls to etcd over HTTP/2: unary calls multiplexed on one connection per member, and
streams (watches) on a second one.

etcd serves its API natively over gRPC; its JSON gateway turns each call into JSON and then into
a loopback gRPC call to itself, which doubles etcd's CPU: 0.7 ms against 0.36 ms per 800-byte
transaction, 290 ms against 45 ms per 10,000-key range (measured alone).

This is the least of HTTP/2 these calls need, in an :class:`asyncio.Protocol`:

- Calls are multiplexed as concurrent streams, within the member's stream limit and send windows
  (connection and stream), in frames no larger than it allows.
- Request header blocks use HPACK's static table and never-indexed literals, so they change no
  state on either side and are built once per method.
- We announce a header table size of 0, so etcd (grpc-go) keeps no dynamic table for its replies
  and every block it sends can be read alone. Of a successful reply only ``:status: 200`` is
  checked, which grpc-go sends first, as static entry 8; a unary reply carries its message only
  on success. The header blocks of any other ending are decoded (:mod:`apiserver.transport.hpack`) for etcd's
  ``grpc-status`` and ``grpc-message``, raised as :class:`GrpcError`.
- A call that failed before etcd could have seen it raises :class:`NotSent` (safe to send to
  another member); one whose connection broke after it was sent raises :class:`CallBroken`:
  a write may or may not have been applied.
- A stream's window is given back as its reader takes messages: a reader that falls behind
  holds etcd back instead of buffering without bound.
- A reply message larger than the connection's limit (``max_message``) fails its call with
  :class:`ReplyTooLarge` as soon as its gRPC length prefix has arrived: the stream is reset,
  so etcd stops sending it and nothing more of it is buffered, and the connection and its
  other calls go on.
- Frames written in one pass of the event loop leave in one socket write: the transactions of
  requests served together reach etcd together and share one raft batch and one fsync (half as
  many fsyncs per update under load).
- gRPC's keepalive, as kube-apiserver sets it for etcd (:class:`Keepalive`): a connection with
  calls open that has heard nothing from etcd for ``time`` is sent a PING, and one that does not
  hear back within ``timeout`` is dead. That is how a watch learns that its member went away
  without a FIN or RST (a partition, a host that lost power): nothing else would ever end it.
"""

from __future__ import annotations

import asyncio
import ssl
import struct
import urllib.parse
from collections import deque
from dataclasses import dataclass
from typing import cast

from apiserver.transport import hpack
from apiserver.transport.frames import (
    ACK,
    CANCEL,
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    LAST_STREAM_ID,
    MAX_WINDOW,
    PING,
    PREFACE,
    REFUSED_STREAM,
    RST_STREAM,
    SETTINGS,
    SETTINGS_ENABLE_PUSH,
    SETTINGS_HEADER_TABLE_SIZE,
    SETTINGS_INITIAL_WINDOW_SIZE,
    SETTINGS_MAX_CONCURRENT_STREAMS,
    SETTINGS_MAX_FRAME_SIZE,
    WINDOW_UPDATE,
    Change,
    FrameReader,
    HeaderBlocks,
    frame,
    unpad,
)

STATUS_200 = 0x88  # HPACK: indexed header field, static table entry 8 = ":status: 200"
STREAM_WINDOW = 4 * 1024 * 1024  # what a stream's reader may have unread before etcd must wait
PROBE_INTERVAL = 10.0  # seconds between PINGs sent because a call timed out (etcd's ping policy allows 5 s)
PING_ANSWER_DELAY = 0.005  # seconds the answer to etcd's PING may wait for frames of ours to leave with
GRPC_UNKNOWN = 2
MAX_MESSAGE = 2**31 - 1  # grpc-go's math.MaxInt32, the receive limit etcd's Go client gives its calls


@dataclass(frozen=True)
class Endpoint:
    """``http(s)://host:port`` of one member."""

    url: str
    host: str
    port: int
    tls: bool

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"etcd endpoint must be http(s)://host:port, got {url!r}")
        return cls(url.rstrip("/"), parts.hostname, parts.port or (443 if parts.scheme == "https" else 80),
                   parts.scheme == "https")


@dataclass(frozen=True)
class Keepalive:
    """grpc's client keepalive: PING after ``time`` seconds without a byte from etcd while calls are
    open, and give the connection up if nothing arrives within ``timeout`` after it. Idle
    connections are not pinged: etcd counts pings without streams, or more often than its
    ``--grpc-keepalive-min-time`` (5 s), as abuse, and closes the connection
    (GOAWAY ``too_many_pings``)."""

    time: float = 30.0  # kube-apiserver's keepaliveTime for etcd
    timeout: float = 10.0  # and its keepaliveTimeout


class GrpcError(Exception):
    """etcd answered the call with a gRPC status other than OK."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"gRPC status {code}: {message}")
        self.code = code
        self.message = message


class ReplyTooLarge(Exception):
    """A reply message is larger than the connection takes; its stream was reset, unread."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"a message of {size} bytes is larger than the {limit} bytes allowed")
        self.size = size
        self.limit = limit


class NotSent(ConnectionError):
    """The call never reached etcd: no connection, or etcd refused the stream unprocessed."""


class CallBroken(ConnectionError):
    """The connection broke after the call was sent: etcd may or may not have carried it out."""


def request_headers(endpoint: Endpoint, path: bytes) -> bytes:
    """The header block of every call of one method: static-table entries and never-indexed
    literals only, so that it leaves no state in either side's HPACK table."""
    return hpack.encode([(b":method", b"POST"), (b":scheme", b"https" if endpoint.tls else b"http"), (b":path", path),
                         (b":authority", f"{endpoint.host}:{endpoint.port}".encode()),
                         (b"content-type", b"application/grpc"), (b"te", b"trailers")], first=hpack.NEVER_INDEXED)


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
            for name, value in hpack.Decoder(max_table_size=0).decode(block):  # we announced a table of 0
                found[name.decode("latin-1")] = value.decode("utf-8", "replace")
    except hpack.HpackError as e:
        return GrpcError(GRPC_UNKNOWN, f"etcd's reply could not be read ({e})")
    status = found.get("grpc-status")
    if status is None or not status.isdigit():
        return GrpcError(GRPC_UNKNOWN, f"etcd answered without a gRPC status (HTTP {found.get(':status', '?')})")
    return GrpcError(int(status), urllib.parse.unquote(found.get("grpc-message", "")))


class _Call:
    """One stream of a unary call: its reply as it comes in."""

    __slots__ = ("reply", "data", "answered", "blocks", "send_window")

    def __init__(self, reply: asyncio.Future[bytes], send_window: int) -> None:
        self.reply = reply  # the reply message; for a server stream, done when the stream is over
        self.data = bytearray()
        self.answered = False  # the reply's first header block said :status 200
        self.blocks: list[bytes] = []  # header blocks, kept in case they carry an error
        self.send_window = send_window


class _StreamCall(_Call):
    """A stream whose reply messages are handed over one by one as they arrive (a watch)."""

    __slots__ = ("messages", "waiter", "buffered", "unacknowledged")

    def __init__(self, reply: asyncio.Future[bytes], send_window: int) -> None:
        super().__init__(reply, send_window)
        self.messages: deque[bytes] = deque()
        self.waiter: asyncio.Future[None] | None = None
        self.buffered = 0  # bytes of the messages the reader has yet to take
        self.unacknowledged = 0  # bytes received since the stream's window was last given back

    def split(self, limit: int) -> int:
        """Move the complete messages received so far to ``messages``; the size of the next one if
        that is over ``limit`` (then it is not read), else 0."""
        data, offset, too_large = self.data, 0, 0
        while len(data) - offset >= 5:
            size = int.from_bytes(data[offset + 1:offset + 5], "big")
            if size > limit:
                too_large = size
                break
            if len(data) - offset - 5 < size:
                break
            self.messages.append(bytes(data[offset + 5:offset + 5 + size]))
            self.buffered += size
            offset += 5 + size
        if offset:
            del data[:offset]
            self.wake()
        return too_large

    def wake(self) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class _Connection(asyncio.Protocol):
    """An HTTP/2 client connection that runs calls as concurrent streams."""

    def __init__(self, endpoint: Endpoint, stream_window: int, keepalive: Keepalive,
                 max_message: int = MAX_MESSAGE) -> None:
        self.endpoint = endpoint
        self.stream_window = stream_window  # what each stream may receive before we give window back
        self.keepalive = keepalive
        self.max_message = max_message  # the largest reply message taken
        self._loop = asyncio.get_running_loop()
        self.last_read = self._loop.time()  # loop time of the last bytes from etcd
        self._ping_sent = 0.0  # loop time of the keepalive PING awaiting an answer; 0 if none
        self._last_probe = -PROBE_INTERVAL  # loop time of the last PING sent because a call was given up
        self._timer: asyncio.TimerHandle | None = None
        self._outgoing: list[bytes] = []  # frames written since the loop last flushed them
        self._ping_answers: list[bytes] = []  # PING ACKs waiting for frames of ours to leave with
        self._answer_timer: asyncio.TimerHandle | None = None
        self.transport: asyncio.Transport | None = None
        self.closed = False  # no new calls: gone away, broken, or closed by us
        self._frames = FrameReader()
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
        self._change = Change()  # set when a window opens, a stream ends, or it closes
        self._blocks = HeaderBlocks()

    # -- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses
        settings = b"".join(struct.pack(">HI", key, value) for key, value in (
            (SETTINGS_HEADER_TABLE_SIZE, 0), (SETTINGS_ENABLE_PUSH, 0), (SETTINGS_INITIAL_WINDOW_SIZE, self.stream_window)))
        self.transport.write(PREFACE + frame(SETTINGS, 0, 0, settings)
                             + frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", MAX_WINDOW - 65535)))
        self.last_read = self._loop.time()
        self._timer = self._loop.call_later(self.keepalive.time, self._keep_alive)

    def data_received(self, data: bytes) -> None:
        self.last_read = self._loop.time()
        try:
            for kind, flags, stream, payload in self._frames.feed(data):
                self._on_frame(kind, flags, stream, payload)
        except (ValueError, IndexError, struct.error) as e:
            self._fail_all(CallBroken(f"bad HTTP/2 from etcd: {e}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.settled.set()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._answer_timer is not None:
            self._answer_timer.cancel()
            self._answer_timer = None
        self._fail_all(CallBroken(f"connection to etcd closed: {exc}" if exc else "connection to etcd closed"))

    def _keep_alive(self) -> None:
        """The keepalive timer: PING a connection that has been quiet for ``time`` with calls open,
        and end it, its calls broken, when nothing has come back ``timeout`` after the PING."""
        self._timer = None
        keepalive, loop = self.keepalive, self._loop
        if self.transport is None or self.transport.is_closing():
            return
        now = loop.time()
        if self._ping_sent:
            if self.last_read < self._ping_sent:
                self._fail_all(CallBroken(f"etcd at {self.endpoint.url} did not answer a keepalive ping "
                                          f"within {keepalive.timeout:g}s"))
                self.close()
                return
            self._ping_sent = 0.0
        quiet = now - self.last_read
        if quiet < keepalive.time:
            self._timer = loop.call_later(keepalive.time - quiet, self._keep_alive)
        elif not self.calls:  # idle: nothing to keep alive, and etcd would count the PING as abuse
            self._timer = loop.call_later(keepalive.time, self._keep_alive)
        else:
            self._write(frame(PING, 0, 0, b"keepaliv"))  # 8 opaque bytes, echoed in the ACK
            self._ping_sent = now
            self._timer = loop.call_later(keepalive.timeout, self._keep_alive)

    def probe(self) -> None:
        """PING now rather than after ``time`` of silence (a call was given up: is the member still
        there?), at most once per PROBE_INTERVAL, which etcd's ping policy allows; no answer within
        ``timeout`` ends the connection as the keepalive timer does."""
        now = self._loop.time()
        if self._ping_sent or now - self._last_probe < PROBE_INTERVAL or self.transport is None \
                or self.transport.is_closing():
            return
        self._last_probe = self._ping_sent = now
        self._write(frame(PING, 0, 0, b"keepaliv"))
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop.call_later(self.keepalive.timeout, self._keep_alive)

    # -- frames ----------------------------------------------------------------------------

    def _on_frame(self, kind: int, flags: int, stream: int, payload: bytes) -> None:
        if kind == DATA:
            self._on_data(flags, stream, payload)
        elif kind in (HEADERS, CONTINUATION):
            if (block := self._blocks.take(kind, flags, stream, payload)) is not None:
                self._on_header_block(*block)
        elif kind == SETTINGS:
            if not flags & ACK:
                self._on_settings(payload)
                self._write(frame(SETTINGS, ACK, 0))
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
                self._answer_ping(payload)
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
        size = len(payload)  # what flow control counts, padding included
        self.unacknowledged += size
        if self.unacknowledged > MAX_WINDOW // 2:  # give back what we consumed, rarely
            self._write(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", self.unacknowledged)))
            self.unacknowledged = 0
        payload = unpad(flags, payload)
        call = self.calls.get(stream)
        if call is not None:
            call.data += payload
            data = call.data
            if isinstance(call, _StreamCall):
                call.unacknowledged += size
                if too_large := call.split(self.max_message):
                    self.cancel(stream, ReplyTooLarge(too_large, self.max_message))
                    return
                self._acknowledge(stream, call)
            elif len(data) >= 5:
                # A unary reply's length as its prefix declares it, or what came if that is more (a
                # second message, which _finish refuses): over the limit, the rest is not waited for.
                length = max(int.from_bytes(data[1:5], "big"), len(data) - 5)
                if length > self.max_message:
                    self.cancel(stream, ReplyTooLarge(length, self.max_message))
                    return
            if flags & END_STREAM:
                self._finish(stream, call)

    def _on_header_block(self, stream: int, block: bytes, ends_stream: bool) -> None:
        call = self.calls.get(stream)
        if call is None:
            return
        if not call.blocks and not call.data:  # the reply's headers, not its trailers
            call.answered = _status_is_200(block)
        call.blocks.append(block)
        if ends_stream:
            self._finish(stream, call)

    # -- calls -----------------------------------------------------------------------------

    def _write(self, data: bytes) -> None:
        """Queue frames; they leave together once the loop has run what is ready now, so that the
        calls of requests served in one pass reach etcd in one write (and one raft batch)."""
        if not self._outgoing:
            self._loop.call_soon(self._flush)
        self._outgoing.append(data)

    def _answer_ping(self, payload: bytes) -> None:
        """etcd's gRPC server PINGs on nearly every call it receives, to size its flow-control windows
        from the round trip (grpc-go's BDP estimation). Answered at once, each PING would cost a socket
        write of its own, as much as the call that drew it: the answer leaves first with the next
        frames of ours, or after PING_ANSWER_DELAY if none come (the measure then counts a longer
        trip, so the windows it sets can only be larger)."""
        self._ping_answers.append(frame(PING, ACK, 0, payload))
        if self._answer_timer is None:
            self._answer_timer = self._loop.call_later(PING_ANSWER_DELAY, self._flush)

    def _flush(self) -> None:
        data, self._outgoing = self._outgoing, []
        if self._ping_answers:
            data[:0], self._ping_answers = self._ping_answers, []
        if self._answer_timer is not None:
            self._answer_timer.cancel()
            self._answer_timer = None
        if data and self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(data))

    async def _changed(self) -> None:
        await self._change.wait()

    def _wake(self) -> None:
        self._change.happened()

    def _finish(self, stream: int, call: _Call) -> None:
        data = call.data
        if isinstance(call, _StreamCall):  # its messages are out already; the status says how it ended
            status = grpc_status(call.blocks)
            self._end(stream, None if status.code == 0 and not data else status)
            return
        size = int.from_bytes(data[1:5], "big") if len(data) >= 5 else -1
        if call.answered and data[:1] == b"\0" and size == len(data) - 5:
            self._end(stream, None, bytes(data[5:]))
        else:
            status = grpc_status(call.blocks)
            self._end(stream, status if status.code else GrpcError(GRPC_UNKNOWN, "etcd answered OK without a reply"))

    def _end(self, stream: int, error: Exception | None, result: bytes = b"") -> None:
        call = self.calls.pop(stream, None)
        if call is None:
            return
        if not call.reply.done():
            if error is None:
                call.reply.set_result(result)
            else:
                call.reply.set_exception(error)
        if isinstance(call, _StreamCall):
            if not call.reply.cancelled():
                call.reply.exception()  # marked retrieved: next_message() reports it to a reader
            call.wake()
        if self.closed and not self.calls:
            self.close()  # after a GOAWAY, the last answer
        self._wake()

    def _fail_all(self, error: ConnectionError) -> None:
        for stream in list(self.calls):
            self._end(stream, error)
        self._wake()

    async def call(self, method: bytes, message: bytes) -> bytes:
        """One unary call; the reply message. Raises GrpcError, NotSent, CallBroken or ReplyTooLarge.

        A caller that gives up (its deadline passed) resets this call's stream alone: the calls
        beside it on the connection carry on, and whether the member is alive is keepalive's to say."""
        call = _Call(asyncio.get_running_loop().create_future(), 0)
        try:
            await self._start(method, message, call, end_stream=True)
            return await call.reply
        except asyncio.CancelledError:
            self._abandon(call)
            raise

    def _abandon(self, call: _Call) -> None:
        stream = next((sid for sid, c in self.calls.items() if c is call), None)
        if stream is not None:
            self.cancel(stream)
            self.probe()
        if call.reply.done() and not call.reply.cancelled():
            call.reply.exception()  # nobody waits for it any more

    async def open_stream(self, method: bytes, message: bytes, half_close: bool = False) -> tuple[int, _StreamCall]:
        """A call whose reply is a stream of messages, after one request message: (stream id, call).
        ``half_close``: that message is the only one (a server-streaming call such as a snapshot:
        grpc-go waits for the client's end of stream before it serves one)."""
        call = _StreamCall(asyncio.get_running_loop().create_future(), 0)
        return await self._start(method, message, call, end_stream=half_close), call

    async def _start(self, method: bytes, message: bytes, call: _Call, end_stream: bool) -> int:
        if not self.settled.is_set():
            await self.settled.wait()
        while len(self.calls) >= self.max_streams and not self.closed:
            await self._changed()
        if self.closed:
            raise NotSent("connection to etcd closed")
        headers = self.headers_by_method.get(method)
        if headers is None:
            headers = self.headers_by_method[method] = request_headers(self.endpoint, method)
        stream, self.next_stream = self.next_stream, self.next_stream + 2
        if self.next_stream > LAST_STREAM_ID:
            self.closed = True  # that was its last stream id: the next call gets a new connection
        call.send_window = self.initial_window
        self.calls[stream] = call
        body = b"\0" + struct.pack(">I", len(message)) + message
        last = END_STREAM if end_stream else 0
        if len(body) <= min(self.send_window, call.send_window, self.max_frame):  # headers and message at once
            self.send_window -= len(body)
            call.send_window -= len(body)
            self._write(frame(HEADERS, END_HEADERS, stream, headers) + frame(DATA, last, stream, body))
            return stream
        self._write(frame(HEADERS, END_HEADERS, stream, headers))
        view = memoryview(body)
        while view and not call.reply.done():  # DATA frames as the windows allow
            size = min(len(view), self.send_window, call.send_window, self.max_frame)
            if size <= 0:
                await self._changed()
                continue
            self.send_window -= size
            call.send_window -= size
            self._write(frame(DATA, last if size == len(view) else 0, stream, bytes(view[:size])))
            view = view[size:]
        return stream

    async def next_message(self, stream: int, call: _StreamCall) -> bytes | None:
        """The stream's next message; None once it has ended well. Raises as :meth:`call` does."""
        while not call.messages:
            if call.reply.done():
                call.reply.result()  # raises how it ended, if not well
                return None
            call.waiter = asyncio.get_running_loop().create_future()
            await call.waiter
        message = call.messages.popleft()
        call.buffered -= len(message)
        self._acknowledge(stream, call)
        return message

    def _acknowledge(self, stream: int, call: _StreamCall) -> None:
        """Give a stream's window back, a quarter at a time, unless its reader has a window's worth
        of messages yet to take: then etcd waits until it does. What is received is given back
        whatever it belongs to, so that a message larger than the window can still complete."""
        if (call.unacknowledged >= self.stream_window // 4 and call.buffered < self.stream_window
                and stream in self.calls):
            self._write(frame(WINDOW_UPDATE, 0, stream, struct.pack(">I", call.unacknowledged)))
            call.unacknowledged = 0

    def cancel(self, stream: int, error: Exception | None = None) -> None:
        """End a stream we no longer read (etcd drops what it was doing for it); its call fails with
        ``error``."""
        if stream in self.calls:
            self._write(frame(RST_STREAM, 0, stream, struct.pack(">I", CANCEL)))
            self._end(stream, error or NotSent("cancelled"))

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


class ServerStream:
    """The replies of a call that streams them (a watch), read one at a time."""

    def __init__(self, conn: _Connection, stream: int, call: _StreamCall) -> None:
        self._conn, self._stream, self._call = conn, stream, call

    async def next(self) -> bytes | None:
        """The next message; None when etcd ended the stream well. Raises GrpcError, CallBroken or
        ReplyTooLarge."""
        return await self._conn.next_message(self._stream, self._call)

    def cancel(self) -> None:
        self._conn.cancel(self._stream)


class GrpcConnections:
    """Per etcd member, one HTTP/2 connection for unary calls and one for streams, each made when
    first needed and again after it ends.

    Streams have their own connection so that a reader that falls behind holds etcd back through
    its stream's window (``STREAM_WINDOW``) without holding back the calls.
    """

    def __init__(self, ssl_context: ssl.SSLContext | None, connect_timeout: float, keepalive: Keepalive,
                 max_message: int = MAX_MESSAGE) -> None:
        self.ssl_context = ssl_context
        self.connect_timeout = connect_timeout
        self.keepalive = keepalive
        self.max_message = max_message
        self._connections: dict[tuple[Endpoint, bool], _Connection] = {}
        self._connecting: dict[tuple[Endpoint, bool], asyncio.Future[_Connection]] = {}

    async def _connection(self, endpoint: Endpoint, streams: bool = False) -> _Connection:
        slot = (endpoint, streams)
        conn = self._connections.get(slot)
        if conn is not None and not conn.closed:
            return conn
        pending = self._connecting.get(slot)
        if pending is not None:  # one connect per member, however many calls wait for it
            return await asyncio.shield(pending)
        pending = self._connecting[slot] = asyncio.get_running_loop().create_future()
        try:
            conn = await self._connect(endpoint, STREAM_WINDOW if streams else MAX_WINDOW)
        except BaseException as e:
            pending.set_exception(e if isinstance(e, NotSent) else NotSent(str(e)))
            pending.exception()  # retrieved: callers that shared it got it already
            raise
        finally:
            del self._connecting[slot]
        pending.set_result(conn)
        old = self._connections.get(slot)
        if old is not None and not old.calls:
            old.close()  # gone away or broken: its streams are over
        self._connections[slot] = conn
        return conn

    async def _connect(self, endpoint: Endpoint, stream_window: int) -> _Connection:
        if endpoint.tls and self.ssl_context is None:
            raise NotSent(f"{endpoint.url} needs TLS and no TLS settings were given")
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, conn = await asyncio.get_running_loop().create_connection(
                    lambda: _Connection(endpoint, stream_window, self.keepalive, self.max_message),
                    endpoint.host, endpoint.port,
                    ssl=self.ssl_context if endpoint.tls else None,
                    server_hostname=endpoint.host if endpoint.tls else None)
        except TimeoutError:
            raise NotSent(f"connecting to {endpoint.url} timed out") from None
        except OSError as e:
            raise NotSent(f"connecting to {endpoint.url} failed: {e}") from e
        return conn

    async def call(self, endpoint: Endpoint, method: bytes, message: bytes, timeout: float,
                   first_of_stream: bool = False) -> bytes:
        """One unary call within ``timeout``, or the first reply of a streaming one (which is then
        ended, as for a lease's keep-alive). Raises GrpcError, NotSent, CallBroken, ReplyTooLarge,
        TimeoutError. A call that times out has its stream reset; the connection carries on."""
        async with asyncio.timeout(timeout):
            conn = await self._connection(endpoint)
            try:
                return await self._call_on(conn, method, message, first_of_stream)
            except NotSent:
                if not conn.closed:
                    raise
            # The connection closed before etcd took the call (it went away, or its stream ids ran
            # out): once more, on a new one.
            conn = await self._connection(endpoint)
            return await self._call_on(conn, method, message, first_of_stream)

    @staticmethod
    async def _call_on(conn: _Connection, method: bytes, message: bytes, first_of_stream: bool) -> bytes:
        if not first_of_stream:
            return await conn.call(method, message)
        stream, call = await conn.open_stream(method, message)
        try:
            reply = await conn.next_message(stream, call)
        finally:
            conn.cancel(stream)
        if reply is None:
            raise GrpcError(GRPC_UNKNOWN, "etcd ended the stream without a reply")
        return reply

    async def open_stream(self, endpoint: Endpoint, method: bytes, message: bytes, timeout: float,
                          half_close: bool = False) -> ServerStream:
        """Start a call that streams its replies; ``timeout`` bounds connecting and sending only;
        ``half_close`` as :meth:`_Connection.open_stream` says."""
        async with asyncio.timeout(timeout):
            conn = await self._connection(endpoint, streams=True)
            stream, call = await conn.open_stream(method, message, half_close)
        return ServerStream(conn, stream, call)

    def close(self) -> None:
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()
