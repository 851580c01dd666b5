"""Other real clients: the python kubernetes dynamic client, and writers across an etcd outage."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from kubernetes import config, dynamic

from hack.harness import ApiServer, Etcd, Pki, free_port
from tests.conftest import Server, start_etcd, vc

pytestmark = pytest.mark.e2e


def test_python_dynamic_client_discovers_lists_and_watches(server: Server, namespace: str) -> None:
    client = dynamic.DynamicClient(config.new_client_from_config(config_file=str(server.kubeconfig)))
    resource = client.resources.get(api_version="kosmos.io/v1alpha1", kind="VirtualCluster")
    assert resource.namespaced and resource.name == "virtualclusters"
    resource.create(body=vc("dyn", namespace), namespace=namespace)
    listed = resource.get(namespace=namespace)
    assert [i.metadata.name for i in listed.items] == ["dyn"]
    events = [e["type"] for e in resource.watch(namespace=namespace, timeout=2)]
    assert events and events[0] == "ADDED"


@pytest.fixture
def isolated(tmp_path: Path, pki_files: Pki) -> Iterator[tuple[Etcd, ApiServer]]:
    """An etcd and a vc-apiserver of their own, so killing etcd disturbs no other test."""
    etcd = start_etcd(tmp_path, "etcd")
    api = ApiServer(pki_files, etcd.url, free_port(), tmp_path / "vc-apiserver.log",
                    extra_args=["--etcd-request-timeout", "2"]).start()
    yield etcd, api
    api.stop()
    etcd.stop()


async def test_etcd_killed_under_writes_gives_503_loses_no_acknowledged_write_and_recovers(
        isolated: tuple[Etcd, ApiServer], pki_files: Pki) -> None:
    etcd, api = isolated
    ns = "outage"
    acked: set[str] = set()
    failures: dict[int, int] = {}
    slowest = 0.0
    stop = asyncio.Event()
    url = f"/apis/kosmos.io/v1alpha1/namespaces/{ns}/virtualclusters"

    async with aiohttp.ClientSession(base_url=api.url, connector=aiohttp.TCPConnector(
            ssl=pki_files.ssl_context("admin"))) as http:

        async def writer(w: int) -> None:
            nonlocal slowest
            i = 0
            while not stop.is_set():
                name = f"w{w}-{i}"
                i += 1
                started = time.monotonic()
                try:
                    async with http.post(url, json=vc(name, ns), timeout=aiohttp.ClientTimeout(total=15)) as r:
                        body = await r.json(content_type=None)
                        if r.status == 201:
                            acked.add(name)
                        else:
                            assert body["kind"] == "Status", body
                            failures[r.status] = failures.get(r.status, 0) + 1
                finally:
                    slowest = max(slowest, time.monotonic() - started)
                await asyncio.sleep(0.02)

        writers = [asyncio.create_task(writer(w)) for w in range(4)]
        await asyncio.sleep(1.5)
        etcd.proc.kill()
        await asyncio.sleep(3)
        etcd.start()
        await asyncio.sleep(3)
        stop.set()
        await asyncio.gather(*writers)

        assert failures and set(failures) == {503}, failures
        assert slowest < 6, f"a request hung for {slowest:.1f}s during the outage"
        async with http.get(url) as r:
            stored = {i["metadata"]["name"] for i in (await r.json())["items"]}
        assert acked <= stored, f"acknowledged but lost: {sorted(acked - stored)[:5]}"
        async with http.post(url, json=vc("after", ns)) as r:
            assert r.status == 201
        async with http.get("/readyz") as r:
            assert r.status == 200
