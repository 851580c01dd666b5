"""The reconciler's building blocks: work queue semantics, leader election and the control-plane
controller's passes, on real etcd."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from apiserver.apis.resource import VIRTUALCLUSTERS
from apiserver.etcd.client import EtcdClient, EtcdConfig
from apiserver.kubeclient.client import ClusterAccess, KubeClient
from apiserver.kubeclient.events import EventRecorder
from apiserver.registry.rest import DeleteOptions, WriteOptions
from apiserver.registry.store import Registry
from apiserver.registry.virtualcluster import VirtualClusterStrategy
from apiserver.storage.etcd3 import Store
from apiserver.storage.secrets import SecretStore, generate_key_file, load_key_file
from certs.tenant import TenantPki
from hack.harness import Etcd, free_port
from reconciler.controlplane.controller import Backoff, ControlPlaneController, Requeue, patch_object
from reconciler.controlplane.status import HEALTH_CHECK, POLL, RUNTIME_RETRY
from reconciler.loop.leader import LeaderElector
from reconciler.loop.workqueue import WorkQueue
from reconciler.nodes.kwokjoiner import KwokJoiner
from reconciler.nodes.promoter import NodePromoter
from reconciler.runtime.base import ControlPlaneState, RuntimeFailure
from reconciler.runtime.process import ProcessRuntime
from reconciler.tenantapi import TenantClients
from tests.conftest import start_etcd, vc


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


# -- the control-plane controller: one status write per pass ------------------------------------

STARTING = ControlPlaneState(False, "Starting", "components are starting", "https://127.0.0.1:1", 1)
READY = ControlPlaneState(True, "Ready", "the tenant apiserver answers", "https://127.0.0.1:1", 1)


@dataclass
class ScriptedRuntime:
    """A control-plane runtime (the plug-in point) whose answer the test sets; it runs nothing."""

    answer: ControlPlaneState | RuntimeFailure = STARTING
    name: str = "scripted"
    torn_down: list[tuple[str, str]] = field(default_factory=list)
    clients: TenantClients = field(default_factory=TenantClients)

    def endpoint_host(self, vc: dict[str, Any]) -> str:
        return "127.0.0.1"

    async def ensure(self, vc: dict[str, Any], pki: TenantPki, version: str = "") -> ControlPlaneState:
        if isinstance(self.answer, RuntimeFailure):
            raise self.answer
        return self.answer

    async def teardown(self, namespace: str, name: str) -> None:
        self.torn_down.append((namespace, name))

    async def owned(self) -> list[tuple[str, str]]:
        return []

    async def release(self) -> None:
        await self.clients.close()


@dataclass
class Parts:
    etcd: EtcdClient
    registry: Registry
    secrets: SecretStore
    runtime: ScriptedRuntime
    unreachable_host: KubeClient

    def controller(self, *, host_down: bool = False) -> ControlPlaneController:
        """The controller; with ``host_down``, node promotion through a host that does not answer."""
        nodes = None
        if host_down:
            nodes = NodePromoter(self.unreachable_host, KwokJoiner(ProcessRuntime(Path("/nonexistent"), Path("/"))),
                                 EventRecorder(None))
        return ControlPlaneController(self.registry, self.runtime, self.secrets, EventRecorder(None), nodes)

    async def writes(self, namespace: str, name: str) -> int:
        """How often the object's key was written since its creation (etcd's version of the key)."""
        kv = await self.etcd.get(self.registry.storage.layout.key(namespace, name))
        return kv.version if kv is not None else -1

    async def one_pass(self, controller: ControlPlaneController, namespace: str, name: str) -> tuple[int, str]:
        """One reconcile pass: how many writes it made to the object, and what it asked for next."""
        before = await self.writes(namespace, name)
        try:
            await controller.reconcile(namespace, name)
            then = "done"
        except Requeue as again:
            then = f"requeue after {again.after}"
        except Backoff:
            then = "back off"
        after = await self.writes(namespace, name)
        return (after - before if after >= 0 else 1), (then if after >= 0 else "deleted")

    async def status(self, namespace: str, name: str) -> dict[str, Any]:
        obj = await self.registry.get(namespace, name)
        status = obj.get("status") or {}
        conditions = {c["type"]: (c["status"], c["reason"]) for c in status.get("conditions") or []}
        return {"phase": status.get("phase"), "reason": status.get("reason"), **conditions}


@pytest.fixture
async def parts(lease_etcd: Etcd, tmp_path: Path) -> AsyncIterator[Parts]:
    etcd = EtcdClient(EtcdConfig([lease_etcd.url]))
    await etcd.start()
    secrets = SecretStore(etcd, load_key_file(generate_key_file(tmp_path / "encryption.key")))
    closed_port = free_port()  # nothing listens there: the host does not answer
    host = KubeClient(ClusterAccess(f"https://127.0.0.1:{closed_port}", ssl.create_default_context()), timeout=2)
    try:
        yield Parts(etcd, Registry(Store(etcd, VIRTUALCLUSTERS), VirtualClusterStrategy()), secrets,
                    ScriptedRuntime(), host)
    finally:
        await host.close()
        await etcd.close()


async def test_each_reconcile_pass_writes_the_status_at_most_once(parts: Parts) -> None:
    ns, name = "writes", "once"
    await parts.registry.create(ns, vc(name, ns), WriteOptions())
    controller = parts.controller()

    assert await parts.one_pass(controller, ns, name) == (1, "requeue after 0.0")
    assert await parts.status(ns, name) == {"phase": "Pending", "reason": "Accepted", "ControlPlaneReady": (
        "False", "Pending"), "NodesReady": ("False", "Pending"), "Ready": ("False", "Pending")}

    assert await parts.one_pass(controller, ns, name) == (1, f"requeue after {POLL}")
    assert await parts.status(ns, name) == {"phase": "Preparing", "reason": "BuildingControlPlane", "ControlPlaneReady": (
        "False", "Starting"), "NodesReady": ("False", "Pending"), "Ready": ("False", "Starting")}
    assert await parts.one_pass(controller, ns, name) == (0, f"requeue after {POLL}")  # nothing new: no write

    parts.runtime.answer = RuntimeFailure("PortsExhausted", "no free ports in the tenant port range")
    assert await parts.one_pass(controller, ns, name) == (1, f"requeue after {RUNTIME_RETRY}")
    assert (await parts.status(ns, name))["ControlPlaneReady"] == ("False", "PortsExhausted")

    # the tenant was bootstrapped by an earlier pass (its admin binding needs a real tenant apiserver)
    obj = await parts.registry.get(ns, name)
    conditions = [{**c, "status": "True"} if c["type"] == "ControlPlaneReady" else c
                  for c in obj["status"]["conditions"]]
    await patch_object(parts.registry, obj, {"status": {"conditions": conditions}}, "status")
    parts.runtime.answer = READY
    assert await parts.one_pass(controller, ns, name) == (1, f"requeue after {HEALTH_CHECK}")
    assert await parts.status(ns, name) == {"phase": "Completed", "reason": "Ready", "ControlPlaneReady": (
        "True", "Ready"), "NodesReady": ("True", "NoNodesRequested"), "Ready": ("True", "Ready")}
    assert await parts.one_pass(controller, ns, name) == (0, f"requeue after {HEALTH_CHECK}")

    obj = await parts.registry.get(ns, name)
    await patch_object(parts.registry, obj, {"spec": {"promotePolicies": [{"nodeCount": 1}]}})
    assert await parts.one_pass(parts.controller(host_down=True), ns, name) == (1, "back off")
    assert await parts.status(ns, name) == {"phase": "Completed", "reason": "HostUnreachable", "ControlPlaneReady": (
        "True", "Ready"), "NodesReady": ("False", "HostUnreachable"), "Ready": ("False", "HostUnreachable")}


async def test_each_deletion_pass_writes_the_status_at_most_once_then_releases_the_finalizer(parts: Parts) -> None:
    ns, name = "writes", "deleted"
    await parts.registry.create(ns, vc(name, ns), WriteOptions())
    await parts.registry.delete(ns, name, DeleteOptions(), WriteOptions())  # marked: the finalizer holds it
    host_down = parts.controller(host_down=True)

    assert await parts.one_pass(host_down, ns, name) == (1, "requeue after 0.0")
    assert await parts.status(ns, name) == {"phase": "Deleting", "reason": "TearingDown"}
    assert await parts.one_pass(host_down, ns, name) == (1, "back off")  # nodes cannot go back yet
    assert await parts.status(ns, name) == {"phase": "Deleting", "reason": "HostUnreachable",
                                            "NodesReady": ("False", "HostUnreachable"),
                                            "Ready": ("False", "HostUnreachable")}
    assert parts.runtime.torn_down == []

    assert await parts.one_pass(parts.controller(), ns, name) == (1, "deleted")  # the finalizer's patch
    assert parts.runtime.torn_down == [(ns, name)]
