"""HTTP/2's wire vocabulary (RFC 9113): frame types, flags, settings, error codes, and a frame's bytes.
Shared by the etcd gRPC client and the server's own HTTP/2."""

from __future__ import annotations

import asyncio
import struct

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
# frame types
DATA, HEADERS, PRIORITY_FRAME, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
# flags
END_STREAM = ACK = 0x1
END_HEADERS, PADDED, PRIORITY = 0x4, 0x8, 0x20
# settings
SETTINGS_HEADER_TABLE_SIZE, SETTINGS_ENABLE_PUSH, SETTINGS_MAX_CONCURRENT_STREAMS = 0x1, 0x2, 0x3
SETTINGS_INITIAL_WINDOW_SIZE, SETTINGS_MAX_FRAME_SIZE, SETTINGS_MAX_HEADER_LIST_SIZE = 0x4, 0x5, 0x6
# error codes
NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR = 0x0, 0x1, 0x2, 0x3
STREAM_CLOSED, FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL, COMPRESSION_ERROR = 0x5, 0x6, 0x7, 0x8, 0x9

DEFAULT_WINDOW = 65535  # every window's size until SETTINGS or WINDOW_UPDATE say otherwise
DEFAULT_MAX_FRAME = 16384
MAX_WINDOW = 2**31 - 1
LAST_STREAM_ID = 2**31 - 1

_HEADER = struct.Struct(">BHBBI")  # a frame's 9 bytes: length (24 bits), type, flags, stream


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return frame_header(kind, flags, stream, len(payload)) + payload


def frame_header(kind: int, flags: int, stream: int, size: int) -> bytes:
    """The header alone, for a payload written after it without being copied into one buffer."""
    return _HEADER.pack(size >> 16, size & 0xFFFF, kind, flags, stream)


def u32(value: int) -> bytes:
    return struct.pack(">I", value)


class Change:
    """What many writers wait for at once (a window opening, a stream ending, the connection closing):
    every waiter wakes when it happens, and the next wait is for the next one."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event: asyncio.Event | None = None

    async def wait(self) -> None:
        if self._event is None:
            self._event = asyncio.Event()
        await self._event.wait()

    def happened(self) -> None:
        if self._event is not None:
            self._event.set()
            self._event = None


class FrameError(ValueError):
    """The peer broke the protocol: a connection error with RFC 9113's ``code``."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def unpad(flags: int, payload: bytes) -> bytes:
    """A DATA or HEADERS frame's payload without its padding."""
    if not flags & PADDED:
        return payload
    if not payload or payload[0] >= len(payload):
        raise FrameError(PROTOCOL_ERROR, "padding longer than its frame")
    return payload[1:len(payload) - payload[0]]


class HeaderBlocks:
    """Header blocks as HEADERS and its CONTINUATION frames bring them: each whole, with its stream."""

    __slots__ = ("_block", "_ends_stream", "_limit", "_stream")

    def __init__(self, limit: int = 2**31) -> None:
        self._limit = limit  # bytes of a block, coded
        self._block: bytearray | None = None
        self._stream = 0
        self._ends_stream = False

    @property
    def open(self) -> bool:
        """A block has begun and not ended: only its CONTINUATION may come next."""
        return self._block is not None

    def take(self, kind: int, flags: int, stream: int, payload: bytes) -> tuple[int, bytes, bool] | None:
        """A HEADERS or CONTINUATION frame: (stream, block, END_STREAM) once the block is whole."""
        return (self.headers if kind == HEADERS else self.continuation)(flags, stream, payload)

    def headers(self, flags: int, stream: int, payload: bytes) -> tuple[int, bytes, bool] | None:
        payload = unpad(flags, payload)
        if flags & PRIORITY:
            payload = payload[5:]
        self._block, self._stream, self._ends_stream = bytearray(payload), stream, bool(flags & END_STREAM)
        return self._end() if flags & END_HEADERS else None

    def continuation(self, flags: int, stream: int, payload: bytes) -> tuple[int, bytes, bool] | None:
        if self._block is None or stream != self._stream:
            raise FrameError(PROTOCOL_ERROR, "CONTINUATION outside a header block")
        self._block += payload
        if len(self._block) > self._limit:
            raise FrameError(PROTOCOL_ERROR, "a header block over the limit")
        return self._end() if flags & END_HEADERS else None

    def _end(self) -> tuple[int, bytes, bool]:
        block, self._block = bytes(self._block or b""), None
        return self._stream, block, self._ends_stream


class FrameReader:
    """Frames out of a connection's bytes, however its reads cut them; after ``preface``, if given."""

    __slots__ = ("_buffer", "_limit", "_preface")

    def __init__(self, limit: int = 2**24 - 1, preface: bytes = b"") -> None:
        self._limit = limit  # the largest frame taken: what SETTINGS_MAX_FRAME_SIZE announced
        self._preface = preface
        self._buffer = b""

    def feed(self, data: bytes) -> list[tuple[int, int, int, bytes]]:
        """The frames ``data`` completes, each as (type, flags, stream, payload)."""
        buffer = self._buffer + data if self._buffer else data
        offset = 0
        if self._preface:
            if len(buffer) < len(self._preface):
                self._buffer = buffer
                return []
            if not buffer.startswith(self._preface):
                raise FrameError(PROTOCOL_ERROR, "the connection did not start with HTTP/2's preface")
            offset, self._preface = len(self._preface), b""
        frames = []
        while len(buffer) - offset >= 9:
            size = int.from_bytes(buffer[offset:offset + 3], "big")
            if size > self._limit:
                raise FrameError(FRAME_SIZE_ERROR, f"a frame of {size} bytes")
            if len(buffer) - offset < 9 + size:
                break
            stream = int.from_bytes(buffer[offset + 5:offset + 9], "big") & 0x7FFFFFFF
            frames.append((buffer[offset + 3], buffer[offset + 4], stream, buffer[offset + 9:offset + 9 + size]))
            offset += 9 + size
        self._buffer = buffer[offset:]
        return frames
