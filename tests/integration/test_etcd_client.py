"""The etcd client against real members: failover between endpoints, and mutual TLS as deploy/cluster runs it."""

from __future__ import annotations

import ssl
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from apiserver.etcd import EtcdClient, EtcdConfig, EtcdUnavailable, prefix_end
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
    url, root = tls
    config = EtcdConfig([url], cafile=str(root / "ca.crt"), certfile=str(root / "client.crt"),
                        keyfile=str(root / "client.key"), request_timeout=2.0)
    async for c in _client(config):
        written = await c.put("/client/tls", b"x")
        result = await c.range("/client/", prefix_end("/client/"))
        assert [(kv.key, kv.value) for kv in result.kvs] == [(b"/client/tls", b"x")] and result.revision == written


async def test_etcd_with_mutual_tls_refuses_a_client_without_a_certificate(tls: tuple[str, Path]) -> None:
    url, root = tls
    async for c in _client(EtcdConfig([url], cafile=str(root / "ca.crt"), request_timeout=1.0)):
        with pytest.raises(EtcdUnavailable):
            await c.get("/client/tls")
