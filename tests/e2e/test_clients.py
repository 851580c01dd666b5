"""Other real clients: the python kubernetes dynamic client (directly and through a host's
aggregator), and writers across an etcd outage."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes import config, dynamic
from kubernetes.dynamic.exceptions import ConflictError

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


@pytest.fixture(params=["direct", "via-host"])
def dynamic_client(request: pytest.FixtureRequest, namespace: str) -> dynamic.DynamicClient:
    """The dynamic client against vc-apiserver directly, and through a host's aggregator (where
    ``namespace`` is created first)."""
    if request.param == "direct":
        return dynamic.DynamicClient(config.new_client_from_config(
            config_file=str(request.getfixturevalue("server").kubeconfig)))
    client = dynamic.DynamicClient(config.new_client_from_config(
        config_file=str(request.getfixturevalue("host_stack").kubeconfig)))
    client.resources.get(api_version="v1", kind="Namespace").create(body={"metadata": {"name": namespace}})
    return client


def managers(obj: Any) -> dict[tuple[str, str], Any]:
    """The main resource's entries, (manager, operation) -> fieldsV1."""
    return {(e["manager"], e["operation"]): e["fieldsV1"] for e in obj.to_dict()["metadata"]["managedFields"]
            if not e.get("subresource")}


def test_python_dynamic_client_server_side_apply_creates_keeps_conflicts_and_forces(
        dynamic_client: dynamic.DynamicClient, namespace: str) -> None:
    client = dynamic_client
    vcs = client.resources.get(api_version="kosmos.io/v1alpha1", kind="VirtualCluster")
    mine = vc("py-ssa", namespace, {"kubeconfig": "a"}, labels={"team": "a"})
    created = client.server_side_apply(vcs, body=mine, field_manager="python-app", serialize=False)
    assert created.status == 201
    deadline = time.monotonic() + 30  # the reconciler's one status write (no runtime here) comes first
    while not ((first := client.get(vcs, "py-ssa", namespace)).to_dict().get("status") or {}).get("reason"):
        assert time.monotonic() < deadline, "the reconciler never wrote the status"
        time.sleep(0.1)
    assert managers(first) == {("python-app", "Apply"): {"f:metadata": {"f:labels": {"f:team": {}}},
                                                         "f:spec": {"f:kubeconfig": {}}}}
    # The same configuration again is a no-op: same resourceVersion.
    again = client.server_side_apply(vcs, body=mine, field_manager="python-app")
    assert again.metadata.resourceVersion == first.metadata.resourceVersion
    # Another manager's value for the same field conflicts (force_conflicts=False is sent as force=false).
    theirs = vc("py-ssa", namespace, {"kubeconfig": "b"})
    with pytest.raises(ConflictError) as conflict:
        client.server_side_apply(vcs, body=theirs, field_manager="other-app", force_conflicts=False)
    status = json.loads(conflict.value.body)
    assert status["reason"] == "Conflict"
    assert status["message"] == 'Apply failed with 1 conflict: conflict with "python-app": .spec.kubeconfig'
    assert status["details"]["causes"] == [{"reason": "FieldManagerConflict", "message": 'conflict with "python-app"',
                                            "field": ".spec.kubeconfig"}]
    assert client.get(vcs, "py-ssa", namespace).spec.kubeconfig == "a"
    # Forced, the field and its ownership move; the label stays the first manager's.
    forced = client.server_side_apply(vcs, body=theirs, field_manager="other-app", force_conflicts=True)
    assert forced.spec.kubeconfig == "b" and forced.metadata.labels.team == "a"
    assert managers(forced) == {("python-app", "Apply"): {"f:metadata": {"f:labels": {"f:team": {}}}},
                                ("other-app", "Apply"): {"f:spec": {"f:kubeconfig": {}}}}
    # A server-side dry run answers the result and stores nothing.
    dry = client.server_side_apply(vcs, body=vc("py-ssa", namespace, {"kubeconfig": "c"}), field_manager="other-app",
                                   dry_run="All")
    assert dry.spec.kubeconfig == "c"
    assert client.get(vcs, "py-ssa", namespace).spec.kubeconfig == "b"


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
