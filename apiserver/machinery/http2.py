"""HTTP/2's wire vocabulary (RFC 9113): frame types, flags, settings, error codes, and a frame's bytes.
Shared by the etcd gRPC client and the server's own HTTP/2."""

from __future__ import annotations

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
    size = len(payload)
    return _HEADER.pack(size >> 16, size & 0xFFFF, kind, flags, stream) + payload


def frame_header(kind: int, flags: int, stream: int, size: int) -> bytes:
    """The header alone, for a payload written after it without being copied into one buffer."""
    return _HEADER.pack(size >> 16, size & 0xFFFF, kind, flags, stream)


def u32(value: int) -> bytes:
    return struct.pack(">I", value)
