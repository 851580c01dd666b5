"""A leader replica killed: another vc-apiserver replica takes the reconciler's lease within the
lease time and finishes what the dead leader left pending."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from apiserver.apis.resource import FINALIZER
from hack.harness import ApiServer, Etcd, Pki, free_port
from tests.conftest import start_etcd, vc
from tests.support.etcdadmin import EtcdAdmin
from tests.support.faults import ETCD_TIMEOUT, LEASE, no_tracebacks, say
from tests.support.load import collection

pytestmark = pytest.mark.e2e

LEADER_KEY = "/registry/kosmos.io/leases/reconciler"


@dataclass
class Replicas:
    etcd: Etcd
    servers: dict[str, ApiServer]

    def log(self, name: str) -> str:
        return self.servers[name].log.read_text(errors="replace")


@pytest.fixture
def replicas(tmp_path: Path, pki_files: Pki) -> Iterator[Replicas]:
    """Two vc-apiserver replicas, a and b, on one etcd, electing a reconciler leader on a 3 s lease."""
    etcd = start_etcd(tmp_path, "etcd")
    servers = {name: ApiServer(pki_files, etcd.url, free_port(), tmp_path / f"vc-apiserver-{name}.log", extra_args=[
        "--identity", name, "--leader-elect-lease-duration", str(LEASE), "--control-plane-runtime", "none",
        "--etcd-request-timeout", str(ETCD_TIMEOUT)]) for name in ("a", "b")}
    try:
        for server in servers.values():
            server.start()
        yield Replicas(etcd, servers)
    finally:
        for server in servers.values():
            server.stop()
        etcd.stop()


async def eventually(check: Callable[[], Awaitable[Any]], timeout: float, what: str) -> tuple[Any, float]:
    """Poll ``check`` until it returns something truthy; returns it and how long that took."""
    started = time.monotonic()
    while True:
        value = await check()
        if value:
            return value, time.monotonic() - started
        assert time.monotonic() - started < timeout, f"{what}: not within {timeout:.0f}s"
        await asyncio.sleep(0.05)


async def test_killed_leader_is_replaced_within_the_lease_and_finalizers_are_still_removed(
        replicas: Replicas, pki_files: Pki) -> None:
    admin = EtcdAdmin(replicas.etcd.url)
    leader, _ = await eventually(lambda: admin.get(LEADER_KEY), 2 * LEASE, "a leader elected")
    follower = "b" if leader == "a" else "a"
    await asyncio.sleep(LEASE)  # the follower has tried, and failed, to take the lease meanwhile
    assert replicas.log(leader).count("became leader") == 1
    assert replicas.log(follower).count("became leader") == 0
    assert await admin.get(LEADER_KEY) == leader

    namespace = "ha"
    url = replicas.servers[follower].url + collection(namespace)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=pki_files.ssl_context("admin"))) as http:

        async def gone(name: str) -> bool:
            async with http.get(f"{url}/{name}") as r:
                return r.status == 404

        async def create(name: str) -> None:
            async with http.post(url, json=vc(name, namespace)) as r:
                assert r.status == 201, await r.text()
                assert (await r.json())["metadata"]["finalizers"] == [FINALIZER]

        async def delete(name: str) -> dict[str, Any]:
            async with http.delete(f"{url}/{name}") as r:
                assert r.status == 200, await r.text()
                return await r.json()

        # Only the leader reconciles: it alone releases the finalizer of a deleted VirtualCluster.
        await create("first")
        await delete("first")
        await eventually(lambda: gone("first"), 10, "first deleted by the leader")
        assert f"deleted {namespace}/first" in replicas.log(leader)
        assert f"deleted {namespace}/first" not in replicas.log(follower)

        # The leader dies with a deletion pending; nobody holds the lease until it expires.
        await create("second")
        killed = replicas.servers[leader].proc
        assert killed is not None
        killed_at = time.monotonic()
        await asyncio.to_thread(killed.kill)
        pending = await delete("second")
        assert pending["metadata"].get("deletionTimestamp") and pending["metadata"]["finalizers"] == [FINALIZER]

        async def held_by_follower() -> bool:
            return await admin.get(LEADER_KEY) == follower
        await eventually(held_by_follower, 3 * LEASE, "the follower took the lease")
        takeover = time.monotonic() - killed_at
        await eventually(lambda: gone("second"), 10, "second deleted by the new leader")
        released = time.monotonic() - killed_at
        assert replicas.log(follower).count("became leader") == 1
        assert f"deleted {namespace}/second" in replicas.log(follower)

        await create("third")
        await delete("third")
        _, third = await eventually(lambda: gone("third"), 10, "third deleted by the new leader")
    say(f"leader {leader} SIGKILLed: {follower} held the lease {takeover:.2f}s later (lease {LEASE}s), "
        f"released the pending finalizer {released:.2f}s after the kill, a new create+delete completed in "
        f"{third:.2f}s")
    # The dead leader's lease runs out at most LEASE after the kill (it renewed it no later than that);
    # etcd expires leases on a 500 ms tick, and the follower acts on the key's deletion at once.
    assert takeover <= LEASE + 1.0, f"the follower took {takeover:.1f}s to take over a {LEASE}s lease"
    no_tracebacks(replicas.servers[follower])
