"""The etcd client against real members: its gRPC transport, etcd's refusals as it reports them, leases,
failover between endpoints, and mutual TLS as deploy/cluster runs it."""

from __future__ import annotations

import asyncio
import os
import signal
import ssl
import subprocess
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from apiserver.etcd import grpc as etcdgrpc
from apiserver.etcd.client import (
    EtcdClient,
    EtcdCompacted,
    EtcdConfig,
    EtcdError,
    EtcdUnavailable,
    prefix_end,
)
from apiserver.etcd.grpc import Keepalive
from apiserver.etcd.messages import (
    RangeRequest,
    StatusRequest,
    StatusResponse,
    compare_absent,
    compare_mod_revision,
    op_put,
)
from apiserver.transport.frames import ACK, HEADERS, PING, PREFACE, FrameReader
from certs import pki
from hack.harness import Etcd, Proc, binary, free_port, wait_until
from tests.conftest import start_etcd


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Etcd]:
    server = start_etcd(tmp_path_factory.mktemp("etcd-client"), "etcd")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """An etcd that serves only TLS and asks every client for a certificate of its CA."""
    root = tmp_path_factory.mktemp("etcd-client-tls")
    ca = pki.new_ca("etcd-ca")
    ca.write(root, "ca")
    # Server and client usages, as in deploy/cluster: etcd's JSON gateway dials etcd's own gRPC
    # server with this certificate.
    pki.new_leaf(ca, "etcd", hosts=["127.0.0.1"], usages=(pki.SERVER_AUTH, pki.CLIENT_AUTH)).write(root, "server")
    pki.new_leaf(ca, "vc-apiserver", usages=(pki.CLIENT_AUTH,)).write(root, "client")
    url, peer = f"https://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
    proc = Proc("etcd", [binary("etcd"), "--name", "default", "--data-dir", str(root / "data"),
                         "--listen-client-urls", url, "--advertise-client-urls", url,
                         "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                         "--initial-cluster", f"default={peer}", "--listen-metrics-urls", "",
                         "--cert-file", str(root / "server.crt"), "--key-file", str(root / "server.key"),
                         "--trusted-ca-file", str(root / "ca.crt"), "--client-cert-auth", "--log-level", "warn"],
                root / "etcd.log").start()
    ctx = pki_context(root)
    wait_until(lambda: _healthy(url, ctx), 30, "etcd with TLS")
    yield url, root
    proc.stop()


def mutual_tls(tls: tuple[str, Path]) -> EtcdConfig:
    """The client settings deploy/cluster gives vc-apiserver for the TLS member."""
    url, root = tls
    return EtcdConfig([url], cafile=str(root / "ca.crt"), certfile=str(root / "client.crt"),
                      keyfile=str(root / "client.key"), request_timeout=2.0)


def pki_context(root: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(root / "ca.crt"))
    ctx.load_cert_chain(str(root / "client.crt"), str(root / "client.key"))
    return ctx


def _healthy(url: str, ctx: ssl.SSLContext) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=1, context=ctx) as resp:
            return b'"true"' in resp.read()
    except OSError:
        return False


async def _client(config: EtcdConfig) -> AsyncIterator[EtcdClient]:
    client = EtcdClient(config)
    await client.start()
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
def member(tmp_path: Path) -> Iterator[Etcd]:
    """An etcd of the test's own, which it may stop and start."""
    server = start_etcd(tmp_path, "etcd")
    yield server
    server.stop()


def _connections_to(url: str) -> int:
    """This process's established TCP connections to ``url``'s port (etcd's gateway has its own)."""
    port = url.rsplit(":", 1)[1]
    out = subprocess.run(["ss", "-Htnp", "state", "established", f"( dport = :{port} )"], capture_output=True,
                         text=True, check=True).stdout
    return sum(f"pid={os.getpid()}," in line for line in out.splitlines())


async def test_calls_share_one_connection_and_watches_another(member: Etcd) -> None:
    async for c in _client(EtcdConfig([member.url])):
        for i in range(50):
            await c.put(f"/client/seq/{i}", b"v")
            assert (await c.get(f"/client/seq/{i}")) is not None
            await c.status()
        assert _connections_to(member.url) == 1
        watch = c.watch("/client/seq/", prefix_end("/client/seq/"))
        assert (await anext(watch)).created
        assert _connections_to(member.url) == 2
        await watch.aclose()


async def test_concurrent_calls_each_get_an_answer_of_their_own_on_one_connection(plain: Etcd) -> None:
    async for c in _client(EtcdConfig([plain.url])):
        await asyncio.gather(*(c.put(f"/client/par/{i:03}", str(i).encode()) for i in range(64)))
        values = await asyncio.gather(*(c.get(f"/client/par/{i:03}") for i in range(64)))
        assert [kv.value if kv else None for kv in values] == [str(i).encode() for i in range(64)]
        assert _connections_to(plain.url) == 1


async def test_calls_beyond_the_members_stream_limit_wait_for_a_free_stream(tmp_path: Path) -> None:
    server = start_etcd(tmp_path, "etcd", ["--max-concurrent-streams", "4"])
    try:
        async for c in _client(EtcdConfig([server.url])):
            revisions = await asyncio.gather(*(c.put(f"/client/limit/{i:03}", b"v") for i in range(64)))
            assert len(set(revisions)) == 64
            result = await c.range("/client/limit/", prefix_end("/client/limit/"), count_only=True)
            assert result.count == 64
    finally:
        server.stop()


async def test_a_connection_out_of_stream_ids_is_replaced_without_failing_a_call(plain: Etcd) -> None:
    async for c in _client(EtcdConfig([plain.url])):
        await c.put("/client/ids", b"0")
        assert c._grpc is not None
        (first,) = c._grpc._connections.values()
        first.next_stream = etcdgrpc.LAST_STREAM_ID - 2  # two stream ids left: 2**31 - 3 and 2**31 - 1
        revisions = [await c.put("/client/ids", str(i).encode()) for i in range(1, 5)]
        assert revisions == sorted(revisions) and len(set(revisions)) == 4
        assert first.closed and first not in c._grpc._connections.values()
        assert _connections_to(plain.url) == 1


async def test_a_range_larger_than_one_frame_arrives_whole(plain: Etcd) -> None:
    """300 values of 1 KiB: ~300 KiB in HTTP/2 frames of at most 16 KiB."""
    async for c in _client(EtcdConfig([plain.url])):
        for i in range(300):
            await c.put(f"/client/big/{i:03}", bytes([65 + i % 26]) * 1024)
        result = await c.range("/client/big/", prefix_end("/client/big/"))
        assert [kv.value for kv in result.kvs] == [bytes([65 + i % 26]) * 1024 for i in range(300)]
        assert (result.count, result.more) == (300, False)


async def test_a_reply_over_the_maximum_fails_its_call_and_the_connection_serves_the_next(plain: Etcd) -> None:
    """300 values of 1 KiB against a 64 KiB maximum: the range, and a watch replaying them, fail
    as soon as the reply's length is known; the stream is reset and its connection carries on."""
    async for c in _client(EtcdConfig([plain.url], max_reply_bytes=64 * 1024)):
        first = await c.put("/client/bounded/start", b"")
        for i in range(300):
            await c.put(f"/client/bounded/{i:03}", b"x" * 1024)
        assert c._grpc is not None
        (calls,) = c._grpc._connections.values()
        with pytest.raises(EtcdError, match=r"^etcd's range reply: a message of 3\d{5} bytes is larger than the "
                                            r"65536 bytes allowed$") as too_large:
            await c.range("/client/bounded/", prefix_end("/client/bounded/"))
        assert too_large.value.code == 8  # RESOURCE_EXHAUSTED, as grpc-go's client says it
        result = await c.range("/client/bounded/", prefix_end("/client/bounded/"), limit=10)
        assert (len(result.kvs), result.more, result.count) == (10, True, 301)
        watch = c.watch("/client/bounded/", prefix_end("/client/bounded/"), start_revision=first)
        assert (await anext(watch)).created
        with pytest.raises(EtcdError, match="^etcd's watch reply: a message of .* larger than the 65536 bytes"):
            await anext(watch)
        streams = c._grpc._connections[(c._endpoints[0], True)]
        watch = c.watch("/client/bounded/", prefix_end("/client/bounded/"))
        assert (await anext(watch)).created
        await watch.aclose()
        assert c._grpc._connections == {(c._endpoints[0], False): calls, (c._endpoints[0], True): streams}
        assert not calls.closed and not streams.closed and _connections_to(plain.url) == 2


async def test_a_value_larger_than_the_send_window_is_written_whole(plain: Etcd) -> None:
    """1.4 MiB, under etcd's 1.5 MiB request limit but over the window it grants a stream (< 1 MiB)."""
    value = bytes(range(256)) * (1400 * 4)
    async for c in _client(EtcdConfig([plain.url])):
        written = await c.put("/client/large", value)
        kv = await c.get("/client/large")
        assert kv is not None and (kv.value, kv.mod_revision) == (value, written)


async def test_transactions_apply_only_when_their_compares_hold(plain: Etcd) -> None:
    async for c in _client(EtcdConfig([plain.url])):
        created = await c.txn([compare_absent("/client/txn")], [op_put("/client/txn", b"1")])
        again = await c.txn([compare_absent("/client/txn")], [op_put("/client/txn", b"2")])
        stale = await c.txn([compare_mod_revision("/client/txn", created.header.revision - 1)], [op_put("/client/txn", b"3")])
        updated = await c.txn([compare_mod_revision("/client/txn", created.header.revision)], [op_put("/client/txn", b"4")])
        assert (created.succeeded, again.succeeded, stale.succeeded, updated.succeeded) == (True, False, False, True)
        kv = await c.get("/client/txn")
        assert kv is not None and (kv.value, kv.mod_revision, kv.version) == (b"4", updated.header.revision, 2)


async def test_a_lease_kept_alive_holds_its_key_until_revoked(plain: Etcd) -> None:
    async for c in _client(EtcdConfig([plain.url])):
        lease = await c.lease_grant(30)
        await c.put("/client/leased", b"held", lease=lease)
        assert 0 < await c.lease_keepalive(lease) <= 30
        kv = await c.get("/client/leased")
        assert kv is not None and kv.lease == lease
        await c.lease_revoke(lease)
        assert await c.get("/client/leased") is None
        assert await c.lease_keepalive(lease) == 0  # a lease that is gone


async def test_etcds_refusals_carry_its_grpc_status_and_message(plain: Etcd) -> None:
    async for c in _client(EtcdConfig([plain.url])):
        with pytest.raises(EtcdError, match="received message larger than max") as too_large:
            await c.put("/client/huge", b"x" * (2 * 1024 * 1024))
        assert too_large.value.code == 8  # RESOURCE_EXHAUSTED
        with pytest.raises(EtcdError, match="unknown method NoSuchMethod for service etcdserverpb.KV") as unknown:
            await c._call(b"/etcdserverpb.KV/NoSuchMethod", StatusRequest(), StatusResponse, idempotent=True)
        assert unknown.value.code == 12  # UNIMPLEMENTED
        first = await c.put("/client/compacted", b"1")
        latest = await c.put("/client/compacted", b"2")
        await c.compact(latest)
        with pytest.raises(EtcdCompacted, match="required revision has been compacted"):
            await c.range("/client/compacted", revision=first)
        kv = await c.get("/client/compacted")  # the connection carries on after each refusal
        assert kv is not None and kv.value == b"2"


async def test_a_write_whose_connection_breaks_is_unavailable_with_its_outcome_unknown(member: Etcd) -> None:
    async for c in _client(EtcdConfig([member.url], request_timeout=10.0)):
        await c.put("/client/broken", b"before")
        pid = member.proc.pid if member.proc else None
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)  # the write is sent and never answered ...
        write = asyncio.create_task(c.put("/client/broken", b"after"))
        await asyncio.sleep(0.3)
        os.kill(pid, signal.SIGKILL)  # ... and then its connection is reset
        with pytest.raises(EtcdUnavailable, match="may or may not have been applied"):
            await write


async def test_a_watch_burst_read_slowly_arrives_complete_and_in_order(plain: Etcd,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """More events than the stream's window: etcd waits for the reader, nothing is lost or reordered."""
    monkeypatch.setattr(etcdgrpc, "STREAM_WINDOW", 16 * 1024)  # ~150 events, given back as they are read
    async for c in _client(EtcdConfig([plain.url])):
        first = await c.put("/client/burst/start", b"")
        for i in range(1500):
            await c.put(f"/client/burst/{i % 10}", str(i).encode())
        seen: list[bytes] = []
        async for resp in c.watch("/client/burst/", prefix_end("/client/burst/"), start_revision=first + 1):
            seen += [ev.kv.value for ev in resp.events]
            await asyncio.sleep(0.001)  # a slow reader
            if len(seen) >= 1500:
                break
        assert seen == [str(i).encode() for i in range(1500)]


async def test_a_watch_on_a_member_that_stops_answering_ends_by_keepalive_and_resumes_on_a_new_connection(
        member: Etcd) -> None:
    """A hung member (or one across a partition) keeps its TCP connections open and sends nothing:
    only the keepalive PING going unanswered ends the watch, which then resumes where it was."""
    async for c in _client(EtcdConfig([member.url], keepalive=Keepalive(time=1.0, timeout=1.0))):
        start = await c.put("/client/hung/a", b"before")
        watch = c.watch("/client/hung/", prefix_end("/client/hung/"), start_revision=start + 1)
        assert (await anext(watch)).created
        pid = member.proc.pid if member.proc else None
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            with pytest.raises(EtcdUnavailable, match="did not answer a keepalive ping within 1s"):
                await asyncio.wait_for(anext(watch), 30)
        finally:
            os.kill(pid, signal.SIGCONT)
        written = await c.put("/client/hung/a", b"after")
        resumed = c.watch("/client/hung/", prefix_end("/client/hung/"), start_revision=start + 1)
        assert (await anext(resumed)).created
        events = (await asyncio.wait_for(anext(resumed), 10)).events
        assert [(ev.kv.value, ev.kv.mod_revision) for ev in events] == [(b"after", written)]
        await resumed.aclose()


async def test_a_quiet_watch_on_a_healthy_member_outlives_many_keepalive_pings(tmp_path: Path) -> None:
    """A PING every second of silence, each answered: the stream and its connection stay."""
    server = start_etcd(tmp_path, "etcd", ["--grpc-keepalive-min-time", "500ms"])  # etcd allows pings that often
    try:
        async for c in _client(EtcdConfig([server.url], keepalive=Keepalive(time=1.0, timeout=1.0))):
            start = await c.put("/client/quiet/a", b"before")
            watch = c.watch("/client/quiet/", prefix_end("/client/quiet/"), start_revision=start + 1)
            assert (await anext(watch)).created
            await asyncio.sleep(4.5)  # four pings and their answers, nothing else on the stream
            written = await c.put("/client/quiet/a", b"after")
            events = (await asyncio.wait_for(anext(watch), 10)).events
            assert [(ev.kv.value, ev.kv.mod_revision) for ev in events] == [(b"after", written)]
            assert _connections_to(server.url) == 2  # calls and the watch, each on its first connection
            await watch.aclose()
    finally:
        server.stop()


async def test_a_restarted_member_is_reached_again_on_a_new_connection(member: Etcd) -> None:
    async for c in _client(EtcdConfig([member.url], request_timeout=2.0, connect_timeout=0.5)):
        await c.put("/client/restart", b"before")
        member.stop()
        with pytest.raises(EtcdUnavailable):
            await c.get("/client/restart")
        member.start()
        kv = await c.get("/client/restart")  # the kept-alive connection died with the old process
        assert kv is not None and kv.value == b"before"
        assert _connections_to(member.url) == 1


async def test_a_dead_endpoint_is_skipped_for_a_live_one(plain: Etcd) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    async for c in _client(EtcdConfig([dead, plain.url], request_timeout=2.0, connect_timeout=0.5)):
        written = await c.put("/client/failover", b"x")
        kv = await c.get("/client/failover")
        assert kv is not None and (kv.value, kv.mod_revision) == (b"x", written)


async def test_no_reachable_member_is_unavailable_within_the_request_timeout() -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    async for c in _client(EtcdConfig([dead], request_timeout=1.0, connect_timeout=0.5)):
        started = time.monotonic()
        with pytest.raises(EtcdUnavailable, match="etcd is unavailable"):
            await c.get("/client/any")
        assert time.monotonic() - started < 3.0


async def test_etcd_with_mutual_tls_serves_a_client_with_its_certificate(tls: tuple[str, Path]) -> None:
    async for c in _client(mutual_tls(tls)):
        written = await c.put("/client/tls", b"x")
        result = await c.range("/client/", prefix_end("/client/"))
        assert [(kv.key, kv.value) for kv in result.kvs] == [(b"/client/tls", b"x")] and result.header.revision == written


async def test_etcd_with_mutual_tls_refuses_a_client_without_a_certificate(tls: tuple[str, Path]) -> None:
    url, root = tls
    async for c in _client(EtcdConfig([url], cafile=str(root / "ca.crt"), request_timeout=1.0)):
        with pytest.raises(EtcdUnavailable):
            await c.get("/client/tls")


# -- the revision read behind consistent reads -------------------------------------------------------------

async def test_the_revision_read_is_the_revision_of_the_last_write(plain: Etcd) -> None:
    async for c in _client(EtcdConfig([plain.url])):
        for i in range(3):
            written = await c.put(f"/client/rev/{i}", b"v")
            assert await c.current_revision("/client/rev/") == written


async def test_the_revision_read_with_mutual_tls(tls: tuple[str, Path]) -> None:
    async for c in _client(mutual_tls(tls)):
        written = await c.put("/client/tls-rev", b"x")
        assert await c.current_revision("/client/") == written


async def test_a_revision_read_reconnects_after_the_member_restarts(member: Etcd) -> None:
    async for c in _client(EtcdConfig([member.url], request_timeout=2.0, connect_timeout=0.5)):
        written = await c.put("/client/r", b"v")
        assert await c.current_revision("/client/") == written
        await asyncio.to_thread(member.stop)  # the loop runs meanwhile: etcd's GOAWAY is answered
        with pytest.raises(EtcdUnavailable):
            await c.current_revision("/client/")
        member.start()
        assert await c.current_revision("/client/") == written


async def test_a_call_that_times_out_is_reset_alone_and_the_calls_beside_it_on_its_connection_succeed(
        plain: Etcd) -> None:
    """A range of ~8 MiB given 5 ms, beside 32 puts on the same connection: the range's stream is
    reset (RST_STREAM), every put is answered, and the connection serves the next call."""
    async for c in _client(EtcdConfig([plain.url])):
        for i in range(80):
            await c.put(f"/client/slow/{i:03}", b"s" * 100_000)
        assert c._grpc is not None
        (connection,) = c._grpc._connections.values()
        request = RangeRequest(key=b"/client/slow/", range_end=prefix_end("/client/slow/")).SerializeToString()
        slow = c._grpc.call(c._endpoints[0], b"/etcdserverpb.KV/Range", request, timeout=0.005)
        results = await asyncio.gather(slow, *(c.put(f"/client/beside/{i}", b"v") for i in range(32)),
                                       return_exceptions=True)
        assert isinstance(results[0], TimeoutError)
        assert all(isinstance(r, int) and r > 0 for r in results[1:]), results[1:]
        assert c._grpc._connections == {(c._endpoints[0], False): connection} and not connection.closed
        assert not connection.calls  # the reset stream is forgotten
        assert (await c.range("/client/beside/", prefix_end("/client/beside/"))).count == 32
        assert _connections_to(plain.url) == 1


async def test_a_snapshot_streams_the_whole_database_with_etcds_sha256_over_mutual_tls(
        tls: tuple[str, Path], tmp_path: Path) -> None:
    from reconciler.backup.snapshots import verify

    async for c in _client(mutual_tls(tls)):
        for i in range(200):
            await c.put(f"/snap/{i:03d}", b"x" * 1000)
        revision = await c.current_revision(b"\0")
        path = tmp_path / "etcd.db"
        parts = [part.blob async for part in c.snapshot()]
        path.write_bytes(b"".join(parts))
        assert verify(path) == ""  # the trailing SHA-256 matches, the bbolt meta pages are good
        data = path.read_bytes()
        assert b"/snap/199" in data and len(data) > 200 * 1000
        await c.put("/snap/after", b"y")  # the client and its stream connection carry on
        assert await c.current_revision(b"\0") == revision + 1


class _Wire:
    """What one client's connections wrote, write by write, and the frames etcd sent them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.writes: list[list[tuple[int, int, int, bytes]]] = []
        self.received: list[tuple[int, int, int, bytes]] = []
        wire, made, received = self, etcdgrpc._Connection.connection_made, etcdgrpc._Connection.data_received
        outgoing, incoming = FrameReader(preface=PREFACE), FrameReader()

        class Recording:
            def __init__(self, transport: asyncio.Transport) -> None:
                self._transport = transport

            def write(self, data: bytes) -> None:
                wire.writes.append(outgoing.feed(bytes(data)))
                self._transport.write(data)

            def __getattr__(self, name: str) -> object:
                return getattr(self._transport, name)

        def connection_made(conn: etcdgrpc._Connection, transport: asyncio.BaseTransport) -> None:
            made(conn, Recording(transport))  # type: ignore[arg-type]

        def data_received(conn: etcdgrpc._Connection, data: bytes) -> None:
            wire.received += incoming.feed(data)
            received(conn, data)

        monkeypatch.setattr(etcdgrpc._Connection, "connection_made", connection_made)
        monkeypatch.setattr(etcdgrpc._Connection, "data_received", data_received)

    def pings(self) -> list[bytes]:
        return [payload for kind, flags, _, payload in self.received if kind == PING and not flags & ACK]

    def answers(self) -> list[bytes]:
        return [payload for frames in self.writes for kind, flags, _, payload in frames if kind == PING and flags & ACK]


async def test_etcds_pings_are_all_answered_and_the_answers_leave_with_the_next_calls_frames(
        plain: Etcd, monkeypatch: pytest.MonkeyPatch) -> None:
    """etcd PINGs on nearly every call it receives (grpc-go sizes its windows from the round trip): each
    PING is answered, but not with a socket write of its own while calls follow one another."""
    wire = _Wire(monkeypatch)
    monkeypatch.setattr(etcdgrpc, "PING_ANSWER_DELAY", 1.0)  # longer than any call here takes: no race with it
    async for c in _client(EtcdConfig([plain.url])):
        await c.current_revision("/client/pings/")
        writes_before = len(wire.writes)
        for _ in range(50):
            await c.current_revision("/client/pings/")
        calls_writes = len(wire.writes) - writes_before
        await asyncio.sleep(1.2)  # the last answer has no call to leave with: it leaves on its own

        assert len(wire.pings()) >= 25  # etcd does PING as this test assumes
        assert sorted(wire.answers()) == sorted(wire.pings())
        assert calls_writes <= 51  # one write per call: the answers went with the calls' frames
        assert any(kind == HEADERS for frames in wire.writes for kind, *_ in frames
                   if any(k == PING for k, *_ in frames))
