"""HTTP/2's framing as both the etcd client and the server read it: frames out of reads cut anywhere,
header blocks out of HEADERS and CONTINUATION frames, padding, and the errors RFC 9113 names."""

from __future__ import annotations

import pytest

from apiserver.transport.frames import (
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    FRAME_SIZE_ERROR,
    HEADERS,
    PADDED,
    PING,
    PREFACE,
    PRIORITY,
    PROTOCOL_ERROR,
    FrameError,
    FrameReader,
    HeaderBlocks,
    frame,
    unpad,
)


def test_frames_come_out_whole_however_the_reads_cut_them() -> None:
    wire = PREFACE + frame(DATA, END_STREAM, 1, b"hello") + frame(PING, 0, 0, b"12345678") + frame(DATA, 0, 3)
    for cut in range(1, len(wire)):
        reader = FrameReader(preface=PREFACE)
        got = reader.feed(wire[:cut]) + reader.feed(wire[cut:])
        assert got == [(DATA, END_STREAM, 1, b"hello"), (PING, 0, 0, b"12345678"), (DATA, 0, 3, b"")]


def test_the_stream_identifiers_reserved_bit_is_ignored() -> None:
    wire = bytearray(frame(DATA, 0, 5, b"x"))
    wire[5] |= 0x80
    assert FrameReader().feed(bytes(wire)) == [(DATA, 0, 5, b"x")]


def test_a_connection_without_the_preface_is_a_protocol_error() -> None:
    with pytest.raises(FrameError) as e:
        FrameReader(preface=PREFACE).feed(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert e.value.code == PROTOCOL_ERROR


def test_a_frame_larger_than_announced_is_a_frame_size_error_before_it_arrives() -> None:
    with pytest.raises(FrameError) as e:
        FrameReader(limit=16384).feed(frame(DATA, 0, 1, b"x" * 16385)[:9])
    assert e.value.code == FRAME_SIZE_ERROR


def test_padding_is_taken_off_and_padding_longer_than_the_frame_is_an_error() -> None:
    assert unpad(PADDED, bytes([3]) + b"data" + b"\0\0\0") == b"data"
    assert unpad(0, b"\x03data") == b"\x03data"
    for bad in (b"", bytes([4]) + b"abc"):
        with pytest.raises(FrameError) as e:
            unpad(PADDED, bad)
        assert e.value.code == PROTOCOL_ERROR


def test_a_header_block_is_whole_after_its_last_continuation_with_priority_and_padding_removed() -> None:
    blocks = HeaderBlocks()
    first = bytes([2]) + b"\0\0\0\0\x10" + b"ab" + b"\0\0"  # pad length 2, priority (5 bytes), "ab", padding
    assert blocks.headers(PADDED | PRIORITY | END_STREAM, 7, first) is None and blocks.open
    assert blocks.continuation(0, 7, b"cd") is None
    assert blocks.continuation(END_HEADERS, 7, b"ef") == (7, b"abcdef", True)
    assert not blocks.open
    assert blocks.headers(END_HEADERS, 9, b"gh") == (9, b"gh", False)


def test_a_continuation_of_another_stream_or_over_the_limit_is_a_protocol_error() -> None:
    blocks = HeaderBlocks(limit=4)
    with pytest.raises(FrameError):
        blocks.continuation(END_HEADERS, 1, b"x")  # no block open
    blocks.headers(0, 1, b"ab")
    with pytest.raises(FrameError):
        blocks.continuation(END_HEADERS, 3, b"x")  # another stream
    with pytest.raises(FrameError) as e:
        blocks.continuation(0, 1, b"cde")
    assert e.value.code == PROTOCOL_ERROR


def test_frames_have_nine_bytes_of_header() -> None:
    assert frame(HEADERS, END_HEADERS, 1, b"abc") == b"\x00\x00\x03\x01\x04\x00\x00\x00\x01abc"
    assert frame(CONTINUATION, 0, 2**31 - 1)[:9] == b"\x00\x00\x00\x09\x00\x7f\xff\xff\xff"
