"""HPACK (RFC 7541), both ways, for both of our HTTP/2 ends (the server and the etcd client).

Why our own: behind the host's aggregator every request reaches us as an HPACK block in which
Go's encoder sends the audit ID, the path and ``X-Forwarded-Uri`` (the path again) as fresh
Huffman-coded literals. The :mod:`hpack` library took about 70 µs per such block, a sixth of the
CPU vc-apiserver spent on a proxied GET; this decoder takes about 17 (``python -m bench.hpackcodec``).

- Decoding keeps the dynamic table RFC 7541 describes, and Huffman-decodes a byte at a time through
  a table of the code tree's 256 inner nodes by 256 input bytes, built on first use.
- Encoding never touches a dynamic table (so the peer's table size is never our concern): a header
  is a static-table index when the static table holds it whole, else a literal that is not indexed,
  its name by static index when it has one, its value not Huffman-coded.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Iterable

__all__ = ["NEVER_INDEXED", "NOT_INDEXED", "STATIC_TABLE", "Decoder", "HeaderListTooLarge", "HpackError", "encode", "encode_int", "encode_string",
           "huffman_decode"]

ENTRY_OVERHEAD = 32  # RFC 7541 §4.1: an entry's size is its name's and value's lengths plus 32
EOS = 256
NOT_INDEXED, NEVER_INDEXED = 0x00, 0x10  # a literal's first bits: the peer may not index it / nobody may

STATIC_TABLE: tuple[tuple[bytes, bytes], ...] = (
    (b':authority', b''), (b':method', b'GET'), (b':method', b'POST'), (b':path', b'/'), (b':path', b'/index.html'),
    (b':scheme', b'http'), (b':scheme', b'https'), (b':status', b'200'), (b':status', b'204'), (b':status', b'206'),
    (b':status', b'304'), (b':status', b'400'), (b':status', b'404'), (b':status', b'500'), (b'accept-charset', b''),
    (b'accept-encoding', b'gzip, deflate'), (b'accept-language', b''), (b'accept-ranges', b''), (b'accept', b''),
    (b'access-control-allow-origin', b''), (b'age', b''), (b'allow', b''), (b'authorization', b''),
    (b'cache-control', b''), (b'content-disposition', b''), (b'content-encoding', b''), (b'content-language', b''),
    (b'content-length', b''), (b'content-location', b''), (b'content-range', b''), (b'content-type', b''),
    (b'cookie', b''), (b'date', b''), (b'etag', b''), (b'expect', b''), (b'expires', b''), (b'from', b''),
    (b'host', b''), (b'if-match', b''), (b'if-modified-since', b''), (b'if-none-match', b''), (b'if-range', b''),
    (b'if-unmodified-since', b''), (b'last-modified', b''), (b'link', b''), (b'location', b''),
    (b'max-forwards', b''), (b'proxy-authenticate', b''), (b'proxy-authorization', b''), (b'range', b''),
    (b'referer', b''), (b'refresh', b''), (b'retry-after', b''), (b'server', b''), (b'set-cookie', b''),
    (b'strict-transport-security', b''), (b'transfer-encoding', b''), (b'user-agent', b''), (b'vary', b''),
    (b'via', b''), (b'www-authenticate', b''),
)
_HUFFMAN_CODES = (  # symbol: (code, bit length); 256 is EOS
    (0x1ff8, 13), (0x7fffd8, 23), (0xfffffe2, 28), (0xfffffe3, 28), (0xfffffe4, 28), (0xfffffe5, 28), (0xfffffe6, 28),
    (0xfffffe7, 28), (0xfffffe8, 28), (0xffffea, 24), (0x3ffffffc, 30), (0xfffffe9, 28), (0xfffffea, 28),
    (0x3ffffffd, 30), (0xfffffeb, 28), (0xfffffec, 28), (0xfffffed, 28), (0xfffffee, 28), (0xfffffef, 28),
    (0xffffff0, 28), (0xffffff1, 28), (0xffffff2, 28), (0x3ffffffe, 30), (0xffffff3, 28), (0xffffff4, 28),
    (0xffffff5, 28), (0xffffff6, 28), (0xffffff7, 28), (0xffffff8, 28), (0xffffff9, 28), (0xffffffa, 28),
    (0xffffffb, 28), (0x14, 6), (0x3f8, 10), (0x3f9, 10), (0xffa, 12), (0x1ff9, 13), (0x15, 6), (0xf8, 8),
    (0x7fa, 11), (0x3fa, 10), (0x3fb, 10), (0xf9, 8), (0x7fb, 11), (0xfa, 8), (0x16, 6), (0x17, 6), (0x18, 6),
    (0x0, 5), (0x1, 5), (0x2, 5), (0x19, 6), (0x1a, 6), (0x1b, 6), (0x1c, 6), (0x1d, 6), (0x1e, 6), (0x1f, 6),
    (0x5c, 7), (0xfb, 8), (0x7ffc, 15), (0x20, 6), (0xffb, 12), (0x3fc, 10), (0x1ffa, 13), (0x21, 6), (0x5d, 7),
    (0x5e, 7), (0x5f, 7), (0x60, 7), (0x61, 7), (0x62, 7), (0x63, 7), (0x64, 7), (0x65, 7), (0x66, 7), (0x67, 7),
    (0x68, 7), (0x69, 7), (0x6a, 7), (0x6b, 7), (0x6c, 7), (0x6d, 7), (0x6e, 7), (0x6f, 7), (0x70, 7), (0x71, 7),
    (0x72, 7), (0xfc, 8), (0x73, 7), (0xfd, 8), (0x1ffb, 13), (0x7fff0, 19), (0x1ffc, 13), (0x3ffc, 14), (0x22, 6),
    (0x7ffd, 15), (0x3, 5), (0x23, 6), (0x4, 5), (0x24, 6), (0x5, 5), (0x25, 6), (0x26, 6), (0x27, 6), (0x6, 5),
    (0x74, 7), (0x75, 7), (0x28, 6), (0x29, 6), (0x2a, 6), (0x7, 5), (0x2b, 6), (0x76, 7), (0x2c, 6), (0x8, 5),
    (0x9, 5), (0x2d, 6), (0x77, 7), (0x78, 7), (0x79, 7), (0x7a, 7), (0x7b, 7), (0x7ffe, 15), (0x7fc, 11),
    (0x3ffd, 14), (0x1ffd, 13), (0xffffffc, 28), (0xfffe6, 20), (0x3fffd2, 22), (0xfffe7, 20), (0xfffe8, 20),
    (0x3fffd3, 22), (0x3fffd4, 22), (0x3fffd5, 22), (0x7fffd9, 23), (0x3fffd6, 22), (0x7fffda, 23), (0x7fffdb, 23),
    (0x7fffdc, 23), (0x7fffdd, 23), (0x7fffde, 23), (0xffffeb, 24), (0x7fffdf, 23), (0xffffec, 24), (0xffffed, 24),
    (0x3fffd7, 22), (0x7fffe0, 23), (0xffffee, 24), (0x7fffe1, 23), (0x7fffe2, 23), (0x7fffe3, 23), (0x7fffe4, 23),
    (0x1fffdc, 21), (0x3fffd8, 22), (0x7fffe5, 23), (0x3fffd9, 22), (0x7fffe6, 23), (0x7fffe7, 23), (0xffffef, 24),
    (0x3fffda, 22), (0x1fffdd, 21), (0xfffe9, 20), (0x3fffdb, 22), (0x3fffdc, 22), (0x7fffe8, 23), (0x7fffe9, 23),
    (0x1fffde, 21), (0x7fffea, 23), (0x3fffdd, 22), (0x3fffde, 22), (0xfffff0, 24), (0x1fffdf, 21), (0x3fffdf, 22),
    (0x7fffeb, 23), (0x7fffec, 23), (0x1fffe0, 21), (0x1fffe1, 21), (0x3fffe0, 22), (0x1fffe2, 21), (0x7fffed, 23),
    (0x3fffe1, 22), (0x7fffee, 23), (0x7fffef, 23), (0xfffea, 20), (0x3fffe2, 22), (0x3fffe3, 22), (0x3fffe4, 22),
    (0x7ffff0, 23), (0x3fffe5, 22), (0x3fffe6, 22), (0x7ffff1, 23), (0x3ffffe0, 26), (0x3ffffe1, 26), (0xfffeb, 20),
    (0x7fff1, 19), (0x3fffe7, 22), (0x7ffff2, 23), (0x3fffe8, 22), (0x1ffffec, 25), (0x3ffffe2, 26), (0x3ffffe3, 26),
    (0x3ffffe4, 26), (0x7ffffde, 27), (0x7ffffdf, 27), (0x3ffffe5, 26), (0xfffff1, 24), (0x1ffffed, 25),
    (0x7fff2, 19), (0x1fffe3, 21), (0x3ffffe6, 26), (0x7ffffe0, 27), (0x7ffffe1, 27), (0x3ffffe7, 26),
    (0x7ffffe2, 27), (0xfffff2, 24), (0x1fffe4, 21), (0x1fffe5, 21), (0x3ffffe8, 26), (0x3ffffe9, 26),
    (0xffffffd, 28), (0x7ffffe3, 27), (0x7ffffe4, 27), (0x7ffffe5, 27), (0xfffec, 20), (0xfffff3, 24), (0xfffed, 20),
    (0x1fffe6, 21), (0x3fffe9, 22), (0x1fffe7, 21), (0x1fffe8, 21), (0x7ffff3, 23), (0x3fffea, 22), (0x3fffeb, 22),
    (0x1ffffee, 25), (0x1ffffef, 25), (0xfffff4, 24), (0xfffff5, 24), (0x3ffffea, 26), (0x7ffff4, 23),
    (0x3ffffeb, 26), (0x7ffffe6, 27), (0x3ffffec, 26), (0x3ffffed, 26), (0x7ffffe7, 27), (0x7ffffe8, 27),
    (0x7ffffe9, 27), (0x7ffffea, 27), (0x7ffffeb, 27), (0xffffffe, 28), (0x7ffffec, 27), (0x7ffffed, 27),
    (0x7ffffee, 27), (0x7ffffef, 27), (0x7fffff0, 27), (0x3ffffee, 26), (0x3fffffff, 30),
)

_STATIC_NAMES: dict[bytes, int] = {}
for _index, (_name, _) in enumerate(STATIC_TABLE, 1):
    _STATIC_NAMES.setdefault(_name, _index)
_STATIC_PAIRS: dict[tuple[bytes, bytes], int] = {pair: i for i, pair in enumerate(STATIC_TABLE, 1) if pair[1]}
_STATIC_LEN = len(STATIC_TABLE)
_DYNAMIC_FIRST = _STATIC_LEN + 1  # the index of the dynamic table's newest entry


class HpackError(ValueError):
    """A header block that cannot be decoded: the connection's table can no longer be trusted."""


class HeaderListTooLarge(HpackError):
    """A block that decodes to more than the header list size allowed. It was read to its end, so
    the table is in step and the connection can go on (HTTP answers 431)."""


# -- Huffman ------------------------------------------------------------------------------------

_FAIL = 256  # a state no code leads out of: the string held EOS


@functools.cache  # built on first use, not at import: most processes never meet a Huffman-coded string
def _huffman() -> tuple[list[tuple[int, bytes]], frozenset[int]]:
    """The decoding automaton: state × input byte → (next state × 256, the symbols completed); and
    the states a string may end in."""
    children: list[list[int]] = [[-1, -1]]  # inner nodes; a leaf is stored as -1 - symbol
    for symbol, (code, length) in enumerate(_HUFFMAN_CODES):
        node = 0
        for shift in range(length - 1, 0, -1):
            bit = (code >> shift) & 1
            if children[node][bit] < 0:
                children[node][bit] = len(children)
                children.append([-1, -1])
            node = children[node][bit]
        children[node][code & 1] = -1 - symbol
    accepts, node = {0}, 0
    for _ in range(7):  # padding: up to 7 bits of EOS's prefix, which is all ones
        node = children[node][1]
        accepts.add(node)
    table: list[tuple[int, bytes]] = []
    for state in range(len(children) + 1):
        for byte in range(256):
            node, out = state, bytearray()
            for shift in range(7, -1, -1):
                if node == _FAIL:
                    break
                nxt = children[node][(byte >> shift) & 1]
                if nxt >= 0:
                    node = nxt
                elif nxt == -1 - EOS:
                    node = _FAIL
                else:
                    out.append(-1 - nxt)
                    node = 0
            table.append((node << 8, bytes(out)))
    return table, frozenset(s << 8 for s in accepts)


def huffman_decode(data: bytes | memoryview) -> bytes:
    (table, accepts), state, out = _huffman(), 0, bytearray()
    for byte in data:
        state, emitted = table[state | byte]
        if emitted:
            out += emitted
    if state not in accepts:
        raise HpackError("a Huffman-coded string with EOS in it, or padded other than with EOS's first bits")
    return bytes(out)


# -- decoding -----------------------------------------------------------------------------------

class Decoder:
    """One direction of one connection: the dynamic table the peer's encoder fills.

    ``max_table_size`` is what our SETTINGS_HEADER_TABLE_SIZE allows the peer (4,096 unless we said
    otherwise). ``max_header_list_size`` bounds what one block may expand to, by RFC 7541's measure
    (a byte can name a 4 KiB entry): fields past it are not kept, and the block raises
    :class:`HeaderListTooLarge` once read.
    """

    def __init__(self, max_table_size: int = 4096, max_header_list_size: int = 1 << 20) -> None:
        self.max_table_size = max_table_size
        self.max_header_list_size = max_header_list_size
        self._limit = max_table_size  # as the peer last set it, within max_table_size
        self._entries: deque[tuple[bytes, bytes]] = deque()  # newest first
        self._size = 0

    def decode(self, block: bytes | memoryview) -> list[tuple[bytes, bytes]]:
        headers: list[tuple[bytes, bytes]] = []
        data, i, end, listed = bytes(block), 0, len(block), 0
        decoded: dict[bytes, bytes] = {}
        entries = self._entries
        try:
            while i < end:
                first = data[i]
                if first & 0x80:  # indexed: most fields of a block, one byte each
                    if first != 0xFF:
                        index, i = first & 0x7F, i + 1
                    else:
                        index, i = _int(data, i, 0x7F)
                    if index > _STATIC_LEN and index - _DYNAMIC_FIRST < len(entries):
                        header = entries[index - _DYNAMIC_FIRST]
                    else:
                        header = self._at(index)
                elif first & 0x40:  # literal, then indexed
                    header, i = self._literal(data, i, 0x3F, decoded)
                    self._add(header)
                elif first & 0x20:  # dynamic table size update: only before the first header
                    size, i = _int(data, i, 0x1F)
                    if listed:
                        raise HpackError("a dynamic table size update after a header field")
                    if size > self.max_table_size:
                        raise HpackError(f"a dynamic table size of {size}, over the {self.max_table_size} allowed")
                    self._limit = size
                    self._evict(0)
                    continue
                else:  # literal, not indexed (0000) or never indexed (0001)
                    header, i = self._literal(data, i, 0x0F, decoded)
                listed += len(header[0]) + len(header[1]) + ENTRY_OVERHEAD
                if listed <= self.max_header_list_size:
                    headers.append(header)
        except IndexError:
            raise HpackError("a header block that ends inside a field") from None
        if listed > self.max_header_list_size:
            raise HeaderListTooLarge(f"a header list over {self.max_header_list_size} bytes")
        return headers

    def _literal(self, data: bytes, i: int, mask: int, decoded: dict[bytes, bytes]) -> tuple[tuple[bytes, bytes], int]:
        """A literal field at ``data[i]`` (its name indexed or literal too), and where it ends."""
        index, i = _int(data, i, mask)
        if index:
            name = self._at(index)[0]
        else:
            name, i = _string(data, i, decoded)
        value, i = _string(data, i, decoded)
        return (name, value), i

    def _at(self, index: int) -> tuple[bytes, bytes]:
        if 0 < index <= _STATIC_LEN:
            return STATIC_TABLE[index - 1]
        dynamic = index - _DYNAMIC_FIRST
        if 0 <= dynamic < len(self._entries):
            return self._entries[dynamic]
        raise HpackError(f"header table index {index} out of range")

    def _add(self, header: tuple[bytes, bytes]) -> None:
        size = len(header[0]) + len(header[1]) + ENTRY_OVERHEAD
        self._evict(size)
        if size <= self._limit:  # an entry larger than the table empties it and is not kept
            self._entries.appendleft(header)
            self._size += size

    def _evict(self, room: int) -> None:
        while self._entries and self._size + room > self._limit:
            name, value = self._entries.pop()
            self._size -= len(name) + len(value) + ENTRY_OVERHEAD


def _int(data: bytes, i: int, mask: int) -> tuple[int, int]:
    """An integer with an N-bit prefix (``mask`` = 2^N - 1) at ``data[i]``: it, and where it ends."""
    value = data[i] & mask
    i += 1
    if value < mask:
        return value, i
    shift = 0
    while True:
        byte = data[i]
        i += 1
        value += (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i
        shift += 7
        if shift > 28:  # past any size this decoder accepts: a bomb or garbage
            raise HpackError("an integer too large for a header block")


def _string(data: bytes, i: int, decoded: dict[bytes, bytes]) -> tuple[bytes, int]:
    """A string literal at ``data[i]``, and where it ends. ``decoded``: the block's Huffman-coded
    strings so far (Go's proxy sends the path twice, as ``:path`` and as ``x-forwarded-uri``)."""
    length, start = _int(data, i, 0x7F)
    stop = start + length
    if stop > len(data):
        raise HpackError("a string that runs past the end of its header block")
    if not data[i] & 0x80:
        return data[start:stop], stop
    coded = data[start:stop]
    if (text := decoded.get(coded)) is None:
        text = decoded[coded] = huffman_decode(coded)
    return text, stop


# -- encoding -----------------------------------------------------------------------------------

def encode_int(value: int, prefix_bits: int, first: int) -> bytes:
    """``value`` with an N-bit prefix, the first byte's other bits from ``first``."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first | value,))
    out, value = bytearray((first | limit,)), value - limit
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_string(raw: bytes) -> bytes:
    """A string literal, not Huffman-coded."""
    return encode_int(len(raw), 7, 0) + raw


def encode(headers: Iterable[tuple[bytes, bytes]], first: int = NOT_INDEXED) -> bytes:
    """A header block that leaves both sides' dynamic tables as they were. ``first`` says how its
    literals are marked: not indexed, or never indexed (intermediaries may not index them either)."""
    out = bytearray()
    for name, value in headers:
        if (index := _STATIC_PAIRS.get((name, value))) is not None:
            out += encode_int(index, 7, 0x80)
        elif (index := _STATIC_NAMES.get(name)) is not None:
            out += encode_int(index, 4, first)
            out += encode_string(value)
        else:
            out.append(first)
            out += encode_string(name)
            out += encode_string(value)
    return bytes(out)
