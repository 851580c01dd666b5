"""HTTP/1.1 to etcd's JSON gateway: pooled keep-alive connections, one exchange at a time each.

What is not a unary key-value call goes this way: watches (as streams on the same connections),
leases, compaction and status. aiohttp's client spent about 0.3 ms of CPU per call in its request
machinery (timeouts, tracing, URL and header objects); here a call is one write of preformatted
bytes and one parse by llhttp (``httptools``): about 0.1 ms.
"""

from __future__ import annotations

import asyncio
import ssl
import urllib.parse
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import cast

import httptools

STREAM_HIGH_WATER = 64  # body chunks buffered for a stream before the socket stops being read


class GatewayError(ConnectionError):
    """The connection failed or the gateway broke the protocol: nothing usable was answered."""


@dataclass(frozen=True)
class Endpoint:
    """``http(s)://host:port`` of one member, with the request head it needs."""

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

    def request(self, path: str, body: bytes) -> bytes:
        return b"POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
            path.encode(), self.host.encode(), self.port, len(body), body)


class _Connection(asyncio.Protocol):
    """One keep-alive connection; answers one request at a time, whole or as a stream of chunks."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.reusable = False
        self._head: asyncio.Future[int] | None = None  # the status, once the headers are in
        self._done: asyncio.Future[bytes] | None = None  # the whole body (unary calls)
        self._chunks: list[bytes] = []
        self._stream: deque[bytes | Exception | None] | None = None  # chunks of a stream; None = its end
        self._readable: asyncio.Event | None = None
        self._paused = False

    # -- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as e:
            self._fail(GatewayError(f"malformed HTTP response from etcd: {e}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(GatewayError(f"connection to etcd closed: {exc}" if exc else "connection to etcd closed"))

    # -- httptools callbacks ---------------------------------------------------------------

    def on_headers_complete(self) -> None:
        if self._head is not None and not self._head.done():
            self._head.set_result(self.parser.get_status_code())

    def on_body(self, body: bytes) -> None:
        if self._stream is None:
            self._chunks.append(body)
            return
        self._stream.append(body)
        if len(self._stream) >= STREAM_HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        self.reusable = self.parser.should_keep_alive()
        if self._stream is not None:
            self._stream.append(None)
            self._wake()
        elif self._done is not None and not self._done.done():
            self._done.set_result(b"".join(self._chunks))
        self._chunks = []

    # -- use -------------------------------------------------------------------------------

    def _fail(self, error: Exception) -> None:
        for waiter in (self._head, self._done):
            if waiter is not None and not waiter.done():
                waiter.set_exception(error)
        if self._stream is not None:
            self._stream.append(error)
            self._wake()

    def _wake(self) -> None:
        if self._readable is not None:
            self._readable.set()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def send(self, request: bytes, streaming: bool) -> tuple[asyncio.Future[int], asyncio.Future[bytes]]:
        loop = asyncio.get_running_loop()
        self._head, self._done = loop.create_future(), loop.create_future()
        self._done.add_done_callback(_consume)  # a stream never resolves it; a failure is seen via _head
        self.reusable = False
        self._chunks = []
        if streaming:
            self._stream, self._readable = deque(), asyncio.Event()
        assert self.transport is not None
        self.transport.write(request)
        return self._head, self._done

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body of a streamed response as it arrives; ends with it (or with the connection)."""
        assert self._stream is not None and self._readable is not None
        while True:
            while not self._stream:
                self._readable.clear()
                await self._readable.wait()
            chunk = self._stream.popleft()
            if chunk is None:
                return
            if isinstance(chunk, Exception):
                raise chunk
            if self._paused and len(self._stream) < STREAM_HIGH_WATER // 2 and self.transport is not None:
                self._paused = False
                self.transport.resume_reading()
            yield chunk


def _consume(future: asyncio.Future[bytes]) -> None:
    if not future.cancelled():
        future.exception()  # retrieved: an unanswered stream's failure is reported through its head


class GatewayConnections:
    """Keep-alive connections to every endpoint, reused one request at a time."""

    def __init__(self, ssl_context: ssl.SSLContext | None, connect_timeout: float, limit: int = 64) -> None:
        self.ssl_context = ssl_context
        self.connect_timeout = connect_timeout
        self._idle: dict[Endpoint, list[_Connection]] = {}
        self._slots = asyncio.Semaphore(limit)
        self._streams: set[_Connection] = set()

    async def _connect(self, endpoint: Endpoint) -> _Connection:
        idle = self._idle.get(endpoint)
        while idle:
            conn = idle.pop()
            if not conn.closed:
                return conn
        loop = asyncio.get_running_loop()
        tls = self.ssl_context if endpoint.tls else None
        if endpoint.tls and tls is None:
            raise GatewayError(f"{endpoint.url} needs TLS and no TLS settings were given")
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, conn = await loop.create_connection(_Connection, endpoint.host, endpoint.port, ssl=tls,
                                                       server_hostname=endpoint.host if tls else None)
        except TimeoutError:
            raise GatewayError(f"connecting to {endpoint.url} timed out") from None
        return conn

    async def call(self, endpoint: Endpoint, path: str, body: bytes, timeout: float) -> tuple[int, bytes]:
        """POST ``body``; (status, response body). Raises GatewayError, TimeoutError."""
        async with self._slots:
            conn: _Connection | None = None
            try:
                async with asyncio.timeout(timeout):
                    conn = await self._connect(endpoint)
                    head, done = conn.send(endpoint.request(path, body), streaming=False)
                    status = await head
                    raw = await done
            except BaseException:
                if conn is not None:
                    conn.close()  # an answer may still be on its way: this connection cannot be reused
                raise
            if conn.reusable and not conn.closed:
                self._idle.setdefault(endpoint, []).append(conn)
            else:
                conn.close()
            return status, raw

    async def stream(self, endpoint: Endpoint, path: str, body: bytes, timeout: float) -> tuple[int, _Connection]:
        """POST ``body`` on a connection of its own; (status, connection to read ``chunks()`` of).

        ``timeout`` bounds the wait for the response's head, not the stream. The caller must
        :meth:`release` the connection when done with the stream.
        """
        conn = await self._connect(endpoint)
        self._streams.add(conn)
        try:
            head, _ = conn.send(endpoint.request(path, body), streaming=True)
            async with asyncio.timeout(timeout):
                return await head, conn
        except BaseException:
            self.release(conn)
            raise

    def release(self, conn: _Connection) -> None:
        """Streams end by closing their connection: a watch cannot be told apart from its rest."""
        self._streams.discard(conn)
        conn.close()

    async def read_all(self, conn: _Connection) -> bytes:
        return b"".join([chunk async for chunk in conn.chunks()])

    def close(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()
        for conn in list(self._streams):
            self.release(conn)
