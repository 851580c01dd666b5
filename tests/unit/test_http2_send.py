"""What the server's HTTP/2 connection sends of a payload that must go out at once (the watch fan-out's
path): all of it within both flow-control windows, in frames of at most the peer's frame size, or none."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest

from apiserver.transport.frames import DATA, DEFAULT_MAX_FRAME, FrameReader
from apiserver.transport.http2 import Http2Connection, _Stream


class _Server:
    """What the connection tells aiohttp's server about itself: nothing these tests read."""

    def connection_made(self, *_: object) -> None:
        return None


class _Peer:
    def __init__(self, conn: Http2Connection, sock: socket.socket) -> None:
        self.conn = conn
        self.sock = sock
        self.reader = FrameReader()

    def stream(self, stream_id: int, window: int) -> _Stream:
        stream = _Stream(self.conn, stream_id, [], window)
        self.conn._streams[stream_id] = stream
        return stream

    async def data_frames(self) -> list[tuple[int, bytes]]:
        """The DATA frames sent since the last look, as (stream, payload)."""
        self.conn._flush()
        await asyncio.sleep(0.05)
        try:
            received = self.sock.recv(1 << 20)
        except BlockingIOError:
            received = b""
        frames = self.reader.feed(received)
        return [(stream, payload) for kind, _, stream, payload in frames if kind == DATA]


@pytest.fixture
async def peer() -> AsyncIterator[_Peer]:
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    conn = Http2Connection(_Server(), 100, 60.0)  # type: ignore[arg-type]
    await asyncio.get_running_loop().connect_accepted_socket(lambda: conn, ours)
    found = _Peer(conn, theirs)
    await found.data_frames()  # the server's SETTINGS and WINDOW_UPDATE
    yield found
    conn._transport.close()  # type: ignore[union-attr]
    theirs.close()


async def test_a_payload_filling_the_stream_window_exactly_goes_out_and_the_next_byte_waits(peer: _Peer) -> None:
    stream = peer.stream(1, 1000)

    assert peer.conn.send_data_now(stream, b"a" * 1000)
    assert not peer.conn.send_data_now(stream, b"b")

    assert await peer.data_frames() == [(1, b"a" * 1000)]
    assert stream.send_window == 0


async def test_the_connection_window_bounds_every_stream(peer: _Peer) -> None:
    peer.conn._send_window = 1500
    first, second = peer.stream(1, 10_000), peer.stream(3, 10_000)

    assert peer.conn.send_data_now(first, b"a" * 1000)
    assert not peer.conn.send_data_now(second, b"b" * 1000)  # 500 left on the connection: nothing is sent
    assert peer.conn.send_data_now(second, b"c" * 500)

    assert await peer.data_frames() == [(1, b"a" * 1000), (3, b"c" * 500)]


async def test_a_payload_over_the_frame_size_leaves_in_frames_the_peer_takes(peer: _Peer) -> None:
    stream = peer.stream(1, 1 << 20)
    peer.conn._send_window = 1 << 20
    payload = bytes(range(256)) * 200  # 51,200 bytes

    assert peer.conn.send_data_now(stream, payload)

    frames = await peer.data_frames()
    assert all(sid == 1 and len(part) <= DEFAULT_MAX_FRAME for sid, part in frames)
    assert b"".join(part for _, part in frames) == payload


async def test_nothing_is_sent_on_a_closed_stream_a_lowered_window_or_for_nothing(peer: _Peer) -> None:
    closed, lowered, open_ = peer.stream(1, 1000), peer.stream(3, -10), peer.stream(5, 1000)
    closed.closed = True

    assert not peer.conn.send_data_now(closed, b"a")
    assert not peer.conn.send_data_now(lowered, b"a")  # a SETTINGS that lowered the window: below 0
    assert not peer.conn.send_data_now(open_, b"")

    assert await peer.data_frames() == []
