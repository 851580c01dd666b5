"""Overload: inflight limits answer 429 with Retry-After, health stays answerable, slow watchers are cut off."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from hack.harness import ApiServer, Etcd, Pki, free_port
from tests.conftest import start_etcd, vc

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory, pki_files: Pki) -> Iterator[ApiServer]:
    root: Path = tmp_path_factory.mktemp("overload")
    etcd: Etcd = start_etcd(root, "etcd")
    api = ApiServer(pki_files, etcd.url, free_port(), root / "vc-apiserver.log",
                    extra_args=["--max-mutating-requests-inflight", "2", "--max-requests-inflight", "2",
                                "--enable-reconciler", "false"]).start()
    yield api
    api.stop()
    etcd.stop()


async def test_requests_beyond_the_inflight_limit_get_429_and_health_still_answers(limited: ApiServer,
                                                                                  pki_files: Pki) -> None:
    url = "/apis/kosmos.io/v1alpha1/namespaces/busy/virtualclusters"
    async with aiohttp.ClientSession(base_url=limited.url, connector=aiohttp.TCPConnector(
            ssl=pki_files.ssl_context("admin"), limit=0)) as http:

        async def create(i: int) -> tuple[int, str | None, dict]:
            async with http.post(url, json=vc(f"o{i}", "busy")) as r:
                return r.status, r.headers.get("Retry-After"), await r.json()

        async def health() -> int:
            async with http.get("/readyz") as r:
                return r.status

        results, healthy = await asyncio.gather(asyncio.gather(*(create(i) for i in range(60))),
                                                asyncio.gather(*(health() for _ in range(20))))
        codes = [code for code, _, _ in results]
        assert set(codes) <= {201, 429} and 429 in codes and 201 in codes
        for code, retry_after, body in results:
            if code == 429:
                assert retry_after == "1" and body["reason"] == "TooManyRequests"
        assert healthy == [200] * 20
        async with http.get(url) as r:
            stored = {i["metadata"]["name"] for i in (await r.json())["items"]}
        assert stored == {f"o{i}" for i, (code, _, _) in enumerate(results) if code == 201}


async def test_failed_requests_are_counted_in_metrics(limited: ApiServer, pki_files: Pki) -> None:
    async with aiohttp.ClientSession(base_url=limited.url, connector=aiohttp.TCPConnector(
            ssl=pki_files.ssl_context("admin"))) as http:
        async with http.get("/apis/kosmos.io/v1alpha1/namespaces/x/virtualclusters/missing") as r:
            assert r.status == 404
        async with http.get("/metrics") as r:
            text = await r.text()
    assert 'apiserver_request_total{code="404",group="kosmos.io",resource="virtualclusters",scope="resource",subresource="",verb="GET",version="v1alpha1"}' in text


async def test_a_watcher_that_never_reads_is_closed_and_memory_stays_bounded(limited: ApiServer,
                                                                            pki_files: Pki) -> None:
    ctx = pki_files.ssl_context("admin")
    reader, writer = await asyncio.open_connection("127.0.0.1", limited.port, ssl=ctx, server_hostname="localhost")
    path = "/apis/kosmos.io/v1alpha1/namespaces/slow/virtualclusters?watch=1"
    writer.write(f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
    await writer.drain()
    await asyncio.sleep(0.5)  # the watch is registered; from now on this client reads nothing
    big = {"x": "y" * 60_000}
    async with aiohttp.ClientSession(base_url=limited.url, connector=aiohttp.TCPConnector(ssl=ctx)) as http:
        async with http.post("/apis/kosmos.io/v1alpha1/namespaces/slow/virtualclusters",
                             json=vc("w", "slow", annotations=big)) as r:
            assert r.status == 201
        for i in range(1200):  # more than a watcher may have queued
            async with http.patch("/apis/kosmos.io/v1alpha1/namespaces/slow/virtualclusters/w",
                                  data=json.dumps({"metadata": {"labels": {"i": str(i)}}}),
                                  headers={"Content-Type": "application/merge-patch+json"}) as r:
                assert r.status in (200, 429)
        registered = -1.0
        for _ in range(40):  # within the server's write timeout, the slow watcher is dropped
            async with http.get("/metrics") as r:
                text = await r.text()
            line = next(x for x in text.splitlines() if x.startswith("apiserver_registered_watchers{"))
            registered = float(line.split()[-1])
            if registered == 0.0:
                break
            await asyncio.sleep(1)
    assert registered == 0.0
    writer.close()


LOAD_SECONDS = 60.0
WATCH_NAMESPACES = 49  # 49 × 20 namespaced watchers + 20 watching everything = 1,000 watches
RATE = 500.0  # requests per second: 80 % get, 5 % list of a namespace, 15 % label patch


@pytest.fixture(scope="module")
def roomy(tmp_path_factory: pytest.TempPathFactory, pki_files: Pki) -> Iterator[ApiServer]:
    """vc-apiserver with kube's default inflight limits."""
    root: Path = tmp_path_factory.mktemp("load")
    etcd: Etcd = start_etcd(root, "etcd")
    api = ApiServer(pki_files, etcd.url, free_port(), root / "vc-apiserver.log",
                    extra_args=["--enable-reconciler", "false"]).start()
    yield api
    api.stop()
    etcd.stop()


def rss_mib(pid: int) -> tuple[float, float]:
    """(current, peak) resident memory of a process."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


async def test_a_thousand_watches_and_500_requests_per_second_for_a_minute_lose_nothing_and_stay_bounded(
        roomy: ApiServer, pki_files: Pki) -> None:
    gv = "/apis/kosmos.io/v1alpha1"
    namespaces = [f"load-{i}" for i in range(WATCH_NAMESPACES)]
    rng = random.Random(7)
    ctx = pki_files.ssl_context("admin")
    pid = roomy.proc.pid
    assert pid is not None
    async with aiohttp.ClientSession(base_url=roomy.url, connector=aiohttp.TCPConnector(ssl=ctx, limit=64)) as http, \
            aiohttp.ClientSession(base_url=roomy.url, connector=aiohttp.TCPConnector(ssl=ctx, limit=0),
                                  timeout=aiohttp.ClientTimeout(total=None, sock_read=None)) as watch_http:
        objects = [(ns, f"o{i}") for ns in namespaces for i in range(10)]
        for ns, name in objects:
            async with http.post(f"{gv}/namespaces/{ns}/virtualclusters", json=vc(name, ns)) as r:
                assert r.status == 201
        async with http.get(f"{gv}/virtualclusters") as r:
            start_rv = (await r.json())["metadata"]["resourceVersion"]
        rss_before = rss_mib(pid)[0]

        seen: list[set[str]] = []
        opened = 0

        async def watch(ns: str | None) -> None:
            nonlocal opened
            events: set[str] = set()
            seen.append(events)
            path = f"{gv}/namespaces/{ns}/virtualclusters" if ns else f"{gv}/virtualclusters"
            async with watch_http.get(path, params={"watch": "1", "resourceVersion": start_rv,
                                                    "allowWatchBookmarks": "false"}) as r:
                assert r.status == 200
                opened += 1
                async for line in r.content:
                    event = json.loads(line)
                    events.add(f"{event['object']['metadata']['namespace']}/"
                               f"{event['object']['metadata']['resourceVersion']}")

        scopes: list[str | None] = [ns for ns in namespaces for _ in range(20)] + [None] * 20
        watchers = [asyncio.create_task(watch(ns)) for ns in scopes]
        while opened < len(scopes):
            await asyncio.sleep(0.1)
            assert not [w for w in watchers if w.done()], "a watch ended before the load started"

        latencies: list[float] = []
        failures: list[str] = []
        written: dict[str, set[str]] = {ns: set() for ns in namespaces}
        peak = 0.0

        async def one(i: int) -> None:
            ns, name = rng.choice(objects)
            began = time.monotonic()
            roll = rng.random()
            if roll < 0.80:
                request = http.get(f"{gv}/namespaces/{ns}/virtualclusters/{name}")
            elif roll < 0.85:
                request = http.get(f"{gv}/namespaces/{ns}/virtualclusters")
            else:
                request = http.patch(f"{gv}/namespaces/{ns}/virtualclusters/{name}",
                                     data=json.dumps({"metadata": {"labels": {"i": str(i)}}}),
                                     headers={"Content-Type": "application/merge-patch+json"})
            async with request as r:
                body = await r.read()
                if r.status != 200:
                    failures.append(f"{r.status} {body[:200]!r}")
                elif roll >= 0.85:
                    written[ns].add(f"{ns}/{json.loads(body)['metadata']['resourceVersion']}")
            latencies.append(time.monotonic() - began)

        pending: set[asyncio.Task[None]] = set()
        began = time.monotonic()
        sent = 0
        health: list[int] = []
        next_sample = began
        total = int(RATE * LOAD_SECONDS)
        while sent < total:
            now = time.monotonic()
            due = min(int((now - began) * RATE), total)
            for _ in range(due - sent):  # open loop: requests leave on schedule, not when others return
                task = asyncio.create_task(one(sent))
                pending.add(task)
                task.add_done_callback(pending.discard)
                sent += 1
            if now >= next_sample:
                peak = max(peak, rss_mib(pid)[0])
                async with http.get("/readyz") as r:
                    health.append(r.status)
                next_sample += 1.0
            await asyncio.sleep(0.002)
        await asyncio.gather(*pending)
        elapsed = time.monotonic() - began
        await asyncio.sleep(2)  # the last events reach every watcher
        current, hwm = rss_mib(pid)
        alive = sum(not w.done() for w in watchers)
        for w in watchers:
            w.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)

    latencies.sort()
    writes = sum(len(v) for v in written.values())
    print(f"\n  load: {len(latencies)} requests asked at {RATE:.0f}/s, answered in {elapsed:.1f}s ({len(latencies) / elapsed:.0f}/s, {writes} writes), "
          f"p50 {latencies[len(latencies) // 2] * 1000:.1f} ms, p99 {latencies[int(len(latencies) * 0.99)] * 1000:.1f} ms"
          f"; 1,000 watches; RSS {rss_before:.0f} MiB before, peak {max(peak, hwm):.0f} MiB, {current:.0f} MiB after")
    assert failures == []
    assert len(latencies) == sent == RATE * LOAD_SECONDS  # every request answered
    assert health and set(health) == {200}
    assert alive == len(scopes)  # no watch was dropped
    everything = set().union(*written.values())
    for scope, events in zip(scopes, seen, strict=True):
        expected = written[scope] if scope else everything
        assert expected <= events, f"{scope}: {len(expected - events)} acknowledged writes never delivered"
    assert max(peak, hwm) < 1024, "memory is not bounded"
