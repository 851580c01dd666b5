"""``python -m bench.hpackcodec``: vc-apiserver's CPU for HTTP/2 header blocks, the ``hpack``
library against :mod:`apiserver.transport.hpack`, in one run.

The blocks are the ones the host's aggregator sends for proxied requests, as a capture of its
traffic showed them: the same 17 fields each time in an order that changes from request to request
(Go ranges over a map), every field indexed as it goes by, so that each block is mostly one-byte
references plus three fresh Huffman-coded literals (``:path``, ``x-forwarded-uri`` with the same
value, and a new ``audit-id``). Here the library's encoder writes them with the same choices.
Each case runs the same inputs through both codecs, in alternating rounds; the table gives the best
round's microseconds per block:

- ``decode a proxied GET``: a connection's worth of GET blocks, each a different object's path;
- ``decode a proxied POST``: the same for creates (only the audit ID is new);
- ``encode a response``: a GET's response headers (the library as the server used it: not
  Huffman-coded, its dynamic table on).

    python -m bench.hpackcodec                 # ~15 s
"""

from __future__ import annotations

import argparse
import platform
import random
import uuid

import hpack as library

from apiserver.transport import hpack as ours

from .etcdcodec import Case, alternate

BLOCKS = 1000  # per connection: the table fills and entries are evicted as in a long-lived one


def aggregator_blocks(method: bytes, count: int, seed: int = 1) -> list[bytes]:
    """``count`` header blocks of one connection, as the aggregator's Go transport encodes them."""
    rng = random.Random(seed)
    encoder = library.Encoder()
    blocks = []
    for i in range(count):
        ns, name = f"bench-{i % 10:02d}", f"vc-{i % 10:02d}-{i:05d}"
        path = (f"/apis/kosmos.io/v1alpha1/namespaces/{ns}/virtualclusters/{name}" if method == b"GET"
                else f"/apis/kosmos.io/v1alpha1/namespaces/{ns}/virtualclusters").encode()
        fields = [
            (b"x-forwarded-for", b"127.0.0.1"), (b"x-forwarded-uri", path), (b"x-forwarded-proto", b"https"),
            (b"x-forwarded-host", b"localhost:6443"), (b"x-remote-user", b"kubernetes-admin"),
            (b"x-remote-group", b"system:masters"), (b"x-remote-group", b"system:authenticated"),
            (b"audit-id", str(uuid.UUID(int=rng.getrandbits(128))).encode()), (b"accept", b"application/json"),
            (b"accept-encoding", b"gzip, deflate"),
            (b"x-remote-extra-authentication.kubernetes.io%2fcredential-id", b"X509SHA256=" + b"6005" * 16)]
        if method == b"POST":
            fields += [(b"content-type", b"application/json"), (b"content-length", b"636")]
        rng.shuffle(fields)
        pseudo = [(b":authority", b"localhost:6443"), (b":method", method), (b":path", path), (b":scheme", b"https")]
        blocks.append(encoder.encode(pseudo + fields, huffman=True))
    return blocks


RESPONSE = [(b":status", b"200"), (b"audit-id", b"0814e5d6-edb1-4f65-aeb6-c649f9ea5412"),
            (b"cache-control", b"no-cache, private"), (b"content-type", b"application/json"),
            (b"x-kubernetes-pf-flowschema-uid", b""), (b"content-length", b"911"),
            (b"date", b"Thu, 26 Nov 2026 17:00:00 GMT")]


def cases(blocks: int) -> list[Case]:
    table = []
    for method in (b"GET", b"POST"):
        encoded = aggregator_blocks(method, blocks)

        def before(encoded: list[bytes] = encoded) -> None:
            decoder = library.Decoder(max_header_list_size=1 << 20)
            for block in encoded:
                decoder.decode(block, raw=True)

        def after(encoded: list[bytes] = encoded) -> None:
            decoder = ours.Decoder(max_header_list_size=1 << 20)
            for block in encoded:
                decoder.decode(block)

        check, mine = library.Decoder(), ours.Decoder()
        for block in encoded:  # both read the same headers, or the comparison means nothing
            assert [(bytes(n), bytes(v)) for n, v in check.decode(block, raw=True)] == mine.decode(block)
        table.append((f"decode a proxied {method.decode()} (µs per block, {blocks:,} blocks of one connection)",
                      before, after))
    encoder = library.Encoder()
    table.append(("encode a response's 7 headers (µs per block)",
                  lambda: encoder.encode(RESPONSE, huffman=False), lambda: ours.encode(RESPONSE)))
    return table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.hpackcodec", description=__doc__.split("\n")[0])
    parser.add_argument("--blocks", type=int, default=BLOCKS, help=f"blocks per connection (default {BLOCKS:,})")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (default 5)")
    parser.add_argument("--seconds", type=float, default=0.6, help="time per case per round (default 0.6)")
    args = parser.parse_args(argv)
    ours.huffman_decode(b"")  # the decoding table is built on first use, not in a timed round
    ours.Decoder().decode(library.Encoder().encode([(b"x", b"y")], huffman=True))
    table = cases(args.blocks)
    print(f"before: hpack {library.__version__} (pure Python)")
    print(f"after:  apiserver/transport/hpack.py; Python {platform.python_version()}")
    best = alternate(table, args.rounds, args.seconds)
    print()
    print("| case | before µs | after µs | before ÷ after |")
    print("|---|---:|---:|---:|")
    for name, (before_us, after_us) in best.items():
        per = args.blocks if name.startswith("decode") else 1
        print(f"| {name} | {before_us / per:,.2f} | {after_us / per:,.2f} | {before_us / after_us:.2f}x |")


if __name__ == "__main__":
    main()
