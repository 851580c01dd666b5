"""``python -m bench.etcdcodec``: the client's CPU for etcd's messages, before and after the
generated classes, in one run.

"Before" is the hand-written encoder and decoder as git has it (``--ref``; by default the parent
of the commit that took it out), loaded into a module of its own; "after" is
:mod:`apiserver.etcd.messages`. Each case does what :class:`~apiserver.etcd.client.EtcdClient`
does with a call's bytes, with both codecs on the same bytes, in alternating rounds; the table
gives the best round's microseconds per operation:

- ``range 10k``: a reply of 10,000 keys (~700-byte values, as the watch cache's relist reads
  them), parsed, then every key's key, value and mod_revision read (upb builds a key's Python
  object when it is first read, so a parse alone would leave out work the reader pays for).
- ``watch event``: a watch reply with one PUT event, its kv and prev_kv, read as the watch cache
  reads it.
- ``revision read``: the request of ``current_revision`` (a keys-only Range, limit 1) encoded,
  and the header's revision read from its reply.
- ``txn``: an update's transaction (compare mod_revision, put a ~700-byte value) encoded, its
  reply parsed for ``succeeded`` and the revision.

    python -m bench.etcdcodec                  # ~30 s
    python -m bench.etcdcodec --rounds 3 --ref 5b846b7
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import google.protobuf
from google.protobuf.internal import api_implementation

from apiserver.etcd import messages as pb

REPO = Path(__file__).resolve().parent.parent
BEFORE_PATHS = ("apiserver/etcd/messages.py", "apiserver/etcdpb.py")  # where the hand-written codec lived
MARKER = "def varint("  # a function only the hand-written codec has


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout


def default_ref() -> str:
    """The parent of the last commit that changed whether the codec's files define ``varint``:
    the commit that replaced the hand-written codec."""
    commit = _git("log", "-1", "--format=%H", f"-S{MARKER}", "--", *BEFORE_PATHS).strip()
    if not commit:
        raise SystemExit("no commit of the hand-written codec found: pass --ref")
    return f"{commit}^"


def load_before(ref: str) -> tuple[ModuleType, str]:
    """The hand-written codec at ``ref``, as a module of its own (named ``etcdcodec_before``)."""
    for path in BEFORE_PATHS:
        try:
            source = _git("show", f"{ref}:{path}")
        except subprocess.CalledProcessError:
            continue
        if MARKER in source:
            break
    else:
        raise SystemExit(f"{ref} has no hand-written codec at {' or '.join(BEFORE_PATHS)}")
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location("etcdcodec_before", f.name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    Path(f.name).unlink()
    return module, f"{_git('rev-parse', '--short', ref).strip()}:{path}"


# -- what etcd sends ---------------------------------------------------------------------------

HEADER = pb.ResponseHeader(cluster_id=0xCDF818194E3A8C32, member_id=0x8E9E05C52164694D, revision=1_234_567,
                           raft_term=9)
VALUE = b'{"apiVersion":"kosmos.io/v1alpha1","kind":"VirtualCluster",' + b'"x":"' + b"v" * 620 + b'"}'


def key(i: int) -> bytes:
    return f"/registry/kosmos.io/virtualclusters/ns-{i % 10}/vc-{i:05}".encode()


def kv(i: int, value: bytes = VALUE) -> pb.KeyValue:
    return pb.KeyValue(key=key(i), value=value, create_revision=1000 + i, mod_revision=200_000 + i, version=3)


def range_reply(keys: int) -> bytes:
    return pb.RangeResponse(header=HEADER, kvs=[kv(i) for i in range(keys)], count=keys).SerializeToString()


def watch_reply() -> bytes:
    event = pb.Event(type=pb.Event.PUT, kv=kv(7), prev_kv=kv(7, VALUE[:-3] + b'w"}'))
    return pb.WatchResponse(header=HEADER, watch_id=1, events=[event]).SerializeToString()


def revision_reply() -> bytes:
    return pb.RangeResponse(header=HEADER, kvs=[pb.KeyValue(key=key(1), create_revision=1001, mod_revision=200_001,
                                                             version=3)],
                            more=True, count=10_000).SerializeToString()


def txn_reply() -> bytes:
    put = pb.ResponseOp(response_put=pb.PutResponse(header=HEADER))
    return pb.TxnResponse(header=HEADER, succeeded=True, responses=[put]).SerializeToString()


# -- the cases: (name, before, after), each a function of no arguments ---------------------------

Case = tuple[str, Callable[[], object], Callable[[], object]]  # name, before, after


def cases(old: ModuleType, keys: int) -> list[Case]:
    big, watch, revision, txn = range_reply(keys), watch_reply(), revision_reply(), txn_reply()
    prefix = b"/registry/kosmos.io/virtualclusters/"

    def range_before() -> int:
        result = old.RangeResult.decode(big)
        return sum(len(x.key) + len(x.value) + x.mod_revision for x in result.kvs) + result.revision

    def range_after() -> int:
        result = pb.RangeResponse.FromString(big)
        assert result.HasField("header")
        return sum(len(x.key) + len(x.value) + x.mod_revision for x in result.kvs) + result.header.revision

    def watch_before() -> tuple[Any, ...]:
        resp = old.WatchResponse.decode(watch)
        ev = resp.events[-1]
        return resp.canceled, resp.created, ev.type == "DELETE", ev.kv.key, ev.kv.value, ev.kv.mod_revision

    def watch_after() -> tuple[Any, ...]:
        resp = pb.WatchResponse.FromString(watch)
        ev = resp.events[-1]
        return resp.canceled, resp.created, ev.type == pb.Event.DELETE, ev.kv.key, ev.kv.value, ev.kv.mod_revision

    def revision_before() -> int:
        old.range_request(prefix, limit=1, keys_only=True)
        return old.reply_revision(revision)

    def revision_after() -> int:
        pb.RangeRequest(key=prefix, limit=1, keys_only=True).SerializeToString()
        result = pb.RangeResponse.FromString(revision)
        assert result.HasField("header")
        return result.header.revision

    def txn_before() -> tuple[bool, int]:
        old.txn_request([old.compare_mod_revision(key(7), 200_007)], [old.op_put(key(7), VALUE)], [])
        result = old.TxnResult.decode(txn)
        return result.succeeded, result.revision

    def txn_after() -> tuple[bool, int]:
        pb.TxnRequest(compare=[pb.compare_mod_revision(key(7), 200_007)], success=[pb.op_put(key(7), VALUE)],
                      failure=None).SerializeToString()
        result = pb.TxnResponse.FromString(txn)
        assert result.HasField("header")
        return result.succeeded, result.header.revision

    for before, after in ((range_before, range_after), (watch_before, watch_after),
                          (revision_before, revision_after), (txn_before, txn_after)):
        assert before() == after(), before.__name__  # the same answer from the same bytes
    return [(f"range {keys // 1000}k keys: parse, read each kv", range_before, range_after),
            ("watch event (kv + prev_kv): parse, read", watch_before, watch_after),
            ("revision read: encode request, read revision", revision_before, revision_after),
            ("txn (compare + put 700 B): encode, read reply", txn_before, txn_after)]


def per_op(fn: Callable[[], Any], seconds: float) -> float:
    """Microseconds per call: calls timed in batches of about ``seconds``, the best batch."""
    n, elapsed = 1, 0.0
    while True:  # a batch size that takes about a tenth of the budget
        started = time.perf_counter()
        for _ in range(n):
            fn()
        elapsed = time.perf_counter() - started
        if elapsed >= seconds / 10:
            break
        n *= 2 if elapsed == 0 else max(2, min(10, int(seconds / 10 / elapsed) + 1))
    best = elapsed / n
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        started = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - started) / n)
    return best * 1e6


def alternate(table: list[Case], rounds: int, seconds: float) -> dict[str, tuple[float, float]]:
    """Each case's best µs per operation, before and after, in rounds that alternate which goes first."""
    best: dict[str, list[float]] = {name: [float("inf"), float("inf")] for name, _, _ in table}
    gc.collect()
    for round_ in range(rounds):
        for name, before, after in table:
            pair = (before, after) if round_ % 2 == 0 else (after, before)
            for fn in pair:
                side = 0 if fn is before else 1
                best[name][side] = min(best[name][side], per_op(fn, seconds))
    return {name: (b, a) for name, (b, a) in best.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.etcdcodec", description=__doc__.split("\n")[0])
    parser.add_argument("--ref", help="the git revision of the hand-written codec (default: found from history)")
    parser.add_argument("--keys", type=int, default=10_000, help="keys in the range reply (default 10,000)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (default 5)")
    parser.add_argument("--seconds", type=float, default=0.6, help="time per case per round (default 0.6)")
    args = parser.parse_args(argv)
    old, where = load_before(args.ref or default_ref())
    table = cases(old, args.keys)
    print(f"before: {where} (hand-written, pure Python)")
    print(f"after:  apiserver/etcd/pb, protobuf {google.protobuf.__version__} ({api_implementation.Type()}); "
          f"Python {platform.python_version()}")
    best = alternate(table, args.rounds, args.seconds)
    print()
    print("| case | before µs/op | after µs/op | before ÷ after |")
    print("|---|---:|---:|---:|")
    for name, (before_us, after_us) in best.items():
        print(f"| {name} | {before_us:,.2f} | {after_us:,.2f} | {before_us / after_us:.2f}x |")


if __name__ == "__main__":
    main()
