"""The reconciler's building blocks: work queue semantics and leader election on real etcd."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from apiserver.etcd.client import EtcdClient, EtcdConfig
from hack.harness import Etcd
from reconciler.loop.leader import LeaderElector
from reconciler.loop.workqueue import WorkQueue
from tests.conftest import start_etcd


async def test_a_key_added_twice_before_processing_is_processed_once() -> None:
    q = WorkQueue()
    q.add("a")
    q.add("a")
    q.add("b")
    assert [await q.get(), await q.get()] == ["a", "b"]
    assert len(q) == 0


async def test_a_key_added_while_processing_is_requeued_only_after_done() -> None:
    q = WorkQueue()
    q.add("a")
    key = await q.get()
    q.add("a")
    assert len(q) == 0  # not handed to a second worker while the first holds it
    q.done(key)
    assert await asyncio.wait_for(q.get(), 1) == "a"


async def test_rate_limited_retries_back_off_exponentially_up_to_the_cap() -> None:
    q = WorkQueue(base_delay=0.01, max_delay=0.05)
    delays = [q.add_rate_limited("a") for _ in range(5)]
    assert delays == [0.01, 0.02, 0.04, 0.05, 0.05]
    q.forget("a")
    assert q.add_rate_limited("a") == 0.01


async def test_shutdown_releases_waiting_workers() -> None:
    q = WorkQueue()
    waiter = asyncio.create_task(q.get())
    await asyncio.sleep(0.01)
    await q.shutdown()
    assert await asyncio.wait_for(waiter, 1) is None


@pytest.fixture(scope="module")
def lease_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Etcd]:
    server = start_etcd(tmp_path_factory.mktemp("leases"), "etcd")
    yield server
    server.stop()


async def test_only_one_of_two_replicas_leads_and_the_other_takes_over_on_release(lease_etcd: Etcd) -> None:
    clients = [EtcdClient(EtcdConfig([lease_etcd.url])) for _ in range(2)]
    for c in clients:
        await c.start()
    electors = [LeaderElector(c, "test", f"replica-{i}", lease_duration=3, retry_period=0.2)
                for i, c in enumerate(clients)]
    leading: list[str] = []

    def work(name: str):  # type: ignore[no-untyped-def]
        async def lead() -> None:
            leading.append(name)
            await asyncio.Event().wait()
        return lead

    tasks = [asyncio.create_task(e.run(work(e.identity))) for e in electors]
    try:
        await asyncio.sleep(1.0)
        assert len(leading) == 1
        assert sum(e.is_leader for e in electors) == 1
        first = next(e for e in electors if e.is_leader)
        tasks[electors.index(first)].cancel()
        await first.release()
        for _ in range(50):
            if len(leading) == 2:
                break
            await asyncio.sleep(0.1)
        assert leading[1] != leading[0]
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for c in clients:
            await c.close()
