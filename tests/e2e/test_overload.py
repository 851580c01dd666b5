"""Overload: inflight limits answer 429 with Retry-After, health stays answerable, slow watchers are cut off."""

from __future__ import annotations

import asyncio
import json
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
    assert 'apiserver_request_total{code="404",resource="virtualclusters",subresource="",verb="GET"}' in text


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
