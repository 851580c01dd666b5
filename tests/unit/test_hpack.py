"""HPACK as RFC 7541 specifies it: its Appendix C examples, its errors, and agreement with an
independent implementation (the ``hpack`` library the test client's ``h2`` brings)."""

from __future__ import annotations

import hpack as reference
import pytest
from hpack.huffman import HuffmanEncoder
from hpack.huffman_constants import REQUEST_CODES, REQUEST_CODES_LENGTH
from hypothesis import given, settings
from hypothesis import strategies as st

from apiserver.transport import hpack

huffman_encode = HuffmanEncoder(REQUEST_CODES, REQUEST_CODES_LENGTH).encode  # the independent implementation's

REQUESTS_HUFFMAN = [  # RFC 7541 C.4: three requests on one connection, Huffman-coded
    ("828684418cf1e3c2e5f23a6ba0ab90f4ff",
     [(b":method", b"GET"), (b":scheme", b"http"), (b":path", b"/"), (b":authority", b"www.example.com")]),
    ("828684be5886a8eb10649cbf",
     [(b":method", b"GET"), (b":scheme", b"http"), (b":path", b"/"), (b":authority", b"www.example.com"),
      (b"cache-control", b"no-cache")]),
    ("828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf",
     [(b":method", b"GET"), (b":scheme", b"https"), (b":path", b"/index.html"), (b":authority", b"www.example.com"),
      (b"custom-key", b"custom-value")]),
]
RESPONSES_HUFFMAN = [  # RFC 7541 C.6: three responses, a 256-byte table, so entries are evicted
    ("488264025885aec3771a4b6196d07abe941054d444a8200595040b8166e082a62d1bff6e919d29ad171863c78f0b97c8e9ae82ae43d3",
     [(b":status", b"302"), (b"cache-control", b"private"), (b"date", b"Mon, 21 Oct 2013 20:13:21 GMT"),
      (b"location", b"https://www.example.com")]),
    ("4883640effc1c0bf",
     [(b":status", b"307"), (b"cache-control", b"private"), (b"date", b"Mon, 21 Oct 2013 20:13:21 GMT"),
      (b"location", b"https://www.example.com")]),
    ("88c16196d07abe941054d444a8200595040b8166e084a62d1bffc05a839bd9ab77ad94e7821dd7f2e6c7b335dfdfcd5b3960d5af27087f3"
     "672c1ab270fb5291f9587316065c003ed4ee5b1063d5007",
     [(b":status", b"200"), (b"cache-control", b"private"), (b"date", b"Mon, 21 Oct 2013 20:13:22 GMT"),
      (b"location", b"https://www.example.com"), (b"content-encoding", b"gzip"),
      (b"set-cookie", b"foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1")]),
]


def test_requests_of_rfc7541_c4_decode_in_order_on_one_table() -> None:
    decoder = hpack.Decoder()
    assert [decoder.decode(bytes.fromhex(block)) for block, _ in REQUESTS_HUFFMAN] == [h for _, h in REQUESTS_HUFFMAN]


def test_responses_of_rfc7541_c6_evict_the_oldest_entries_of_a_256_byte_table() -> None:
    decoder = hpack.Decoder(max_table_size=256)
    assert [decoder.decode(bytes.fromhex(block)) for block, _ in RESPONSES_HUFFMAN] == [h for _, h in RESPONSES_HUFFMAN]
    # C.6.3's table: the set-cookie, content-encoding and date entries; 215 bytes
    assert decoder.decode(bytes.fromhex("bebfc0")) == [
        (b"set-cookie", b"foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"),
        (b"content-encoding", b"gzip"), (b"date", b"Mon, 21 Oct 2013 20:13:22 GMT")]
    with pytest.raises(hpack.HpackError, match="index 65 out of range"):
        decoder.decode(b"\xc1")


def test_a_table_size_update_shrinks_the_table_and_must_come_first() -> None:
    decoder = hpack.Decoder()
    decoder.decode(bytes.fromhex(REQUESTS_HUFFMAN[0][0]))
    assert decoder.decode(b"\x20") == []  # size 0: every entry goes
    with pytest.raises(hpack.HpackError, match="out of range"):
        decoder.decode(b"\xbe")
    with pytest.raises(hpack.HpackError, match="after a header field"):
        hpack.Decoder().decode(b"\x82\x20")
    with pytest.raises(hpack.HpackError, match="over the 4096 allowed"):
        hpack.Decoder().decode(b"\x3f\xe2\x1f")  # 4097


@pytest.mark.parametrize(("block", "error"), [
    (b"\x80", "index 0 out of range"),
    (b"\x82\x44", "ends inside a field"),
    (b"\x04\x85abc", "runs past the end"),
    (b"\x7f\xff\xff\xff\xff\xff\x01", "too large"),
    (b"\x04" + hpack.encode_int(4, 7, 0x80) + bytes.fromhex("ffffffff"), "EOS"),  # EOS itself, Huffman-coded
    (b"\x04\x81\x00", "EOS"),  # padding of zeros, not EOS's ones
    (b"\x04\x82\x1f\xff", "EOS"),  # 'a' and then 11 bits of padding: more than 7
])
def test_malformed_blocks_are_errors(block: bytes, error: str) -> None:
    with pytest.raises(hpack.HpackError, match=error):
        hpack.Decoder().decode(block)


def test_a_block_expanding_past_the_header_list_limit_is_an_error() -> None:
    decoder = hpack.Decoder(max_header_list_size=1000)
    decoder.decode(b"\x40" + hpack.encode_string(b"x-big") + hpack.encode_string(b"v" * 400))  # table: 437 bytes
    assert len(decoder.decode(b"\xbe\xbe")) == 2  # 874
    with pytest.raises(hpack.HpackError, match="over 1000 bytes"):
        decoder.decode(b"\xbe\xbe\xbe")
    with pytest.raises(hpack.HeaderListTooLarge):  # read to its end: the entry it adds is in the table
        decoder.decode(b"\xbe\xbe\xbe" + b"\x40" + hpack.encode_string(b"x-after") + hpack.encode_string(b"1"))
    assert decoder.decode(b"\xbe\xbf") == [(b"x-after", b"1"), (b"x-big", b"v" * 400)]


def test_an_entry_larger_than_the_table_empties_it_and_is_not_kept() -> None:
    decoder = hpack.Decoder(max_table_size=100)
    decoder.decode(b"\x40" + hpack.encode_string(b"a") + hpack.encode_string(b"1"))
    assert decoder.decode(b"\x40" + hpack.encode_string(b"b") + hpack.encode_string(b"2" * 80)) == [(b"b", b"2" * 80)]
    with pytest.raises(hpack.HpackError, match="out of range"):
        decoder.decode(b"\xbe")


def test_every_byte_survives_huffman_both_ways() -> None:
    everything = bytes(range(256))
    assert hpack.huffman_decode(huffman_encode(everything)) == everything
    assert hpack.huffman_decode(bytes.fromhex("f1e3c2e5f23a6ba0ab90f4ff")) == b"www.example.com"  # RFC 7541 C.4.1
    assert hpack.huffman_decode(b"") == b""


def test_our_blocks_use_the_static_table_and_no_dynamic_one() -> None:
    block = hpack.encode([(b":status", b"200"), (b"content-type", b"application/json"), (b"audit-id", b"a1")])
    assert block == b"\x88" + b"\x0f\x10\x10application/json" + b"\x00\x08audit-id\x02a1"
    assert hpack.encode([(b"te", b"trailers")], first=hpack.NEVER_INDEXED) == b"\x10\x02te\x08trailers"


headers_lists = st.lists(st.tuples(
    st.sampled_from([b":path", b"audit-id", b"x-remote-group", b"accept", b"content-type", b"x-custom"])
    | st.binary(min_size=1, max_size=20).map(bytes.lower),
    st.binary(max_size=120)), max_size=12)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(headers_lists, st.booleans()), min_size=1, max_size=8))
def test_blocks_of_an_independent_encoder_decode_to_what_it_encoded(blocks: list[tuple[list[tuple[bytes, bytes]], bool]]) -> None:
    encoder, decoder = reference.Encoder(), hpack.Decoder()
    for headers, huffman in blocks:
        assert decoder.decode(encoder.encode(headers, huffman=huffman)) == headers


@settings(max_examples=200, deadline=None)
@given(headers_lists)
def test_our_blocks_decode_alike_in_an_independent_decoder(headers: list[tuple[bytes, bytes]]) -> None:
    decoder = reference.Decoder()
    decoded = decoder.decode(hpack.encode(headers), raw=True)
    assert [(bytes(n), bytes(v)) for n, v in decoded] == headers
    assert len(decoder.header_table.dynamic_entries) == 0
