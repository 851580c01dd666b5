"""An HTTP/2 client for tests: many requests as streams of one TLS connection, each answered whole or
read as it comes (watches), and any stream reset on demand. The ``h2`` library keeps the protocol
until the server's GOAWAY; after it, the library refuses every frame, where RFC 9113 (6.8) lets the
streams the GOAWAY names finish, so those frames are read here."""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import h2.config
import h2.connection
import h2.events
import h2.settings
import orjson


@dataclass
class Reply:
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytearray = field(default_factory=bytearray)
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    reset_code: int | None = None  # the server reset the stream
    arrived: asyncio.Event = field(default_factory=asyncio.Event)  # set on every DATA frame

    def json(self) -> Any:
        return orjson.loads(bytes(self.body))


class H2Client(asyncio.Protocol):
    """One HTTP/2 connection to ``url``; ``await H2Client.connect(url, ctx)``."""

    def __init__(self, authority: str) -> None:
        self.authority = authority
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.transport: asyncio.Transport | None = None
        self.replies: dict[int, Reply] = {}
        self.goaway: h2.events.ConnectionTerminated | None = None
        self.lost = asyncio.Event()
        self.window_opened = asyncio.Event()
        self._unread = bytearray()  # the start of a frame not yet whole

    @classmethod
    async def connect(cls, url: str, ctx: ssl.SSLContext) -> H2Client:
        parts = urlsplit(url)
        ctx.set_alpn_protocols(["h2"])
        loop = asyncio.get_running_loop()
        _, client = await loop.create_connection(lambda: cls(parts.netloc), parts.hostname, parts.port, ssl=ctx)
        assert client.transport is not None
        chosen = client.transport.get_extra_info("ssl_object").selected_alpn_protocol()
        assert chosen == "h2", f"the server chose {chosen!r}, not h2"
        return client

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.conn.initiate_connection()
        self.transport.write(self.conn.data_to_send())

    def data_received(self, data: bytes) -> None:
        self._unread += data
        while len(self._unread) >= 9 and len(self._unread) >= 9 + int.from_bytes(self._unread[:3], "big"):
            end = 9 + int.from_bytes(self._unread[:3], "big")
            frame, self._unread = bytes(self._unread[:end]), self._unread[end:]
            if self.goaway is None:
                self._events(self.conn.receive_data(frame))
            else:
                self._after_goaway(frame[3], frame[4], int.from_bytes(frame[5:9], "big") & 0x7FFFFFFF, frame[9:])
        self._flush()

    def _after_goaway(self, kind: int, flags: int, sid: int, payload: bytes) -> None:
        reply = self.replies.get(sid)
        if reply is None:
            return
        if kind == 0x0:  # DATA
            if flags & 0x8:  # PADDED
                payload = payload[1:len(payload) - payload[0]]
            reply.body += payload
            reply.arrived.set()
        elif kind == 0x3:  # RST_STREAM
            reply.reset_code = int.from_bytes(payload[:4], "big")
            reply.ended.set()
        if kind in (0x0, 0x1) and flags & 0x1:  # END_STREAM
            reply.ended.set()

    def _events(self, events: list[h2.events.Event]) -> None:
        for ev in events:
            if isinstance(ev, h2.events.ResponseReceived):
                reply = self.replies[ev.stream_id]
                for name, value in ev.headers:
                    if name == ":status":
                        reply.status = int(value)
                    else:
                        reply.headers[name] = value
            elif isinstance(ev, h2.events.DataReceived):
                reply = self.replies[ev.stream_id]
                reply.body += ev.data
                reply.arrived.set()
                self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.StreamEnded):
                self.replies[ev.stream_id].ended.set()
            elif isinstance(ev, h2.events.StreamReset):
                reply = self.replies[ev.stream_id]
                reply.reset_code = ev.error_code
                reply.ended.set()
            elif isinstance(ev, h2.events.WindowUpdated):
                self.window_opened.set()
            elif isinstance(ev, h2.events.ConnectionTerminated):
                self.goaway = ev

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost.set()
        for reply in self.replies.values():
            reply.ended.set()

    def _flush(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(self.conn.data_to_send())

    async def start(self, method: str, path: str, body: bytes | None = None,
                    headers: list[tuple[str, str]] | None = None) -> tuple[int, Reply]:
        """Opens a stream, sends the request (its body as the windows allow); its reply fills as it comes."""
        sid = self.conn.get_next_available_stream_id()
        reply = self.replies[sid] = Reply()
        fields = [(":method", method), (":path", path), (":scheme", "https"), (":authority", self.authority),
                  ("accept", "application/json"), *(headers or ())]
        if body is not None:
            fields.append(("content-type", "application/json"))
        self.conn.send_headers(sid, fields, end_stream=body is None)
        self._flush()
        view = memoryview(body or b"")
        while view:
            room = min(self.conn.local_flow_control_window(sid), self.conn.max_outbound_frame_size, len(view))
            if room <= 0:
                self.window_opened.clear()
                await self.window_opened.wait()
                continue
            self.conn.send_data(sid, view[:room].tobytes(), end_stream=room == len(view))
            view = view[room:]
            self._flush()
        return sid, reply

    async def request(self, method: str, path: str, body: Any = None, timeout: float = 30.0) -> Reply:
        _, reply = await self.start(method, path, None if body is None else orjson.dumps(body))
        await asyncio.wait_for(reply.ended.wait(), timeout)
        return reply

    def open_windows(self, stream: int, connection: int) -> None:
        """Lets the server send ``stream`` bytes on each stream and ``connection`` in all before waiting, as Go's
        client (the aggregator's) does: 4 MiB and 1 GiB."""
        self.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: stream})
        self.conn.increment_flow_control_window(connection - self.conn.inbound_flow_control_window)
        self._flush()

    def reset(self, sid: int) -> None:
        self.conn.reset_stream(sid)
        self._flush()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
