"""Wires the embedded loop into the server: leader election → informer → queue → workers."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable

from aiohttp import web

from apiserver.apis.kubeversion import Offered
from apiserver.apis.virtualcluster import VirtualCluster
from apiserver.etcd.client import EtcdClient
from apiserver.kubeclient.client import HostError, HostUnavailable, KubeClient
from apiserver.kubeclient.events import EventRecorder
from apiserver.machinery import errors
from apiserver.registry.store import Registry
from apiserver.storage.cacher import WatchCache
from apiserver.storage.secrets import SecretStore
from reconciler.controlplane import upgrades
from reconciler.controlplane.controller import Backoff, ControlPlaneController, Requeue
from reconciler.controlplane.rotation import DEFAULT_OVERLAP, Rotations
from reconciler.loop.informer import Informer, split_key
from reconciler.loop.leader import LeaderElector
from reconciler.loop.workqueue import WorkQueue
from reconciler.nodes.kwokjoiner import KwokJoiner
from reconciler.nodes.promoter import NodeJoiner, NodePromoter
from reconciler.options import SliceConfig
from reconciler.quota import QuotaRecount
from reconciler.runtime.base import ControlPlaneRuntime, RuntimeFailure
from reconciler.runtime.process import ProcessRuntime
from reconciler.shared.kubeletapi import KubeletApi
from reconciler.shared.ranges import ServiceRanges
from reconciler.shared.slices import SharedSlices
from reconciler.versions import KUBERNETES_VERSIONS

log = logging.getLogger(__name__)

JANITOR_PERIOD = 30.0  # seconds between sweeps for leftovers of VirtualClusters that are gone
MAX_BACKOFF = 10.0  # seconds: the longest a failing reconcile waits, so an outage ends in at most this much more


class Manager:
    """The loop and what it works with, each handed in: the registry it reads and writes
    VirtualClusters through, the watch cache its informer follows, etcd for the leader lease, the
    host cluster (None in standalone mode), the event recorder and the tenant secret store."""

    def __init__(self, *, registry: Registry, cache: WatchCache, etcd: EtcdClient, host: KubeClient | None,
                 events: EventRecorder, secrets: SecretStore | None, runtime: ControlPlaneRuntime | None,
                 identity: str, lease_duration: int, workers: int = 4, resync_period: float = 60.0,
                 joiner: NodeJoiner | None = None, slices: SliceConfig | None = None,
                 credentials: Registry | None = None, rotation_overlap: float = DEFAULT_OVERLAP,
                 kubernetes_versions: tuple[str, ...] = KUBERNETES_VERSIONS,
                 upgrade_timeout: float = upgrades.TIMEOUT) -> None:
        self.registry = registry
        self.cache = cache
        self.workers = workers
        self.resync_period = resync_period
        self.runtime = runtime
        self.nodes = None
        if joiner is None and isinstance(runtime, ProcessRuntime):
            joiner = KwokJoiner(runtime)  # the playground's and the tests' default
        if host is not None and joiner is not None:
            self.nodes = NodePromoter(host, joiner, events)
        slices = slices or SliceConfig()
        self.slices = SharedSlices(host, events, slices.overcommit, slices.placement,
                                   slices.storage_classes) if host is not None else None
        self.kubelet_api: KubeletApi | None = None
        if self.slices is not None and host is not None and slices.kubelet_port and slices.tls is not None:
            self.kubelet_api = KubeletApi(host, self.slices.tenants, "0.0.0.0", slices.kubelet_port, *slices.tls)
            self.slices.serve_kubelet_api(self.kubelet_api, slices.kubelet_address, slices.kubelet_service)
        ranges = ServiceRanges(host, slices.service_ranges) if host is not None else None
        self.controller = ControlPlaneController(registry, runtime, secrets, events, self.nodes,
                                                 self.slices, host, credentials, Rotations(rotation_overlap), ranges,
                                                 Offered.of(kubernetes_versions), upgrade_timeout)
        self.quota = QuotaRecount(host, registry) if host is not None else None
        self.elector = LeaderElector(etcd, "reconciler", identity, lease_duration)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self.kubelet_api is not None:  # in every replica: the leader's slices point their tenants here
            await self.kubelet_api.start()
        self._task = asyncio.create_task(self.elector.run(self._lead), name="reconciler")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.elector.release()
        if self.kubelet_api is not None:
            await self.kubelet_api.stop()

    async def _lead(self) -> None:
        """Run while leader; cancelled the moment leadership is lost."""
        queue = WorkQueue(max_delay=MAX_BACKOFF)
        informer = Informer(self.cache, self._changed(queue), self.resync_period)
        tasks = [asyncio.create_task(informer.run(), name="informer")]
        if self.quota is not None:
            tasks.append(asyncio.create_task(self.quota.run(), name="quota-recount"))
        tasks.append(asyncio.create_task(self._janitor(), name="janitor"))
        tasks += [asyncio.create_task(self._worker(queue), name=f"worker-{i}") for i in range(self.workers)]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await queue.shutdown()
            if self.slices is not None:  # the next leader's syncers take over
                await self.slices.stop_all()
            if self.runtime is not None:  # what it kept between passes is stale once another leads
                await self.runtime.release()

    def _changed(self, queue: WorkQueue) -> Callable[[str], None]:
        """What a changed VirtualCluster sets off: its reconcile, and its namespace's quota recount."""
        def changed(key: str) -> None:
            queue.add(key)
            if self.quota is not None:
                self.quota.changed(split_key(key)[0])
        return changed

    async def _exists(self, namespace: str, name: str) -> bool:
        try:
            await self.registry.get(namespace, name)
            return True
        except errors.ApiError as e:
            if e.code == 404:
                return False
            raise

    async def _uid_of(self, namespace: str, name: str) -> str | None:
        try:
            return VirtualCluster(await self.registry.get(namespace, name)).meta.uid
        except errors.ApiError as e:
            if e.code == 404:
                return None
            raise

    async def _janitor(self) -> None:
        """What a VirtualCluster that no longer exists left behind goes away: its node claims go back
        to the host and its control plane is torn down. Normally the finalizer does both; this
        covers a finalizer stripped by hand or a crash between teardown steps."""
        while True:
            if self.nodes is not None:
                try:
                    returned = await self.nodes.release_orphans(self._exists)
                    if returned:
                        log.warning("returned orphaned node claims to the host: %s", ", ".join(returned))
                except (errors.ApiError, HostError, HostUnavailable) as e:
                    log.warning("orphan node check failed: %s", e)
            if self.slices is not None:
                try:
                    removed = await self.slices.orphans(self._uid_of)
                    if removed:
                        log.warning("removed the host namespaces of shared slices whose VirtualCluster is gone: %s",
                                    ", ".join(removed))
                except (errors.ApiError, HostError, HostUnavailable) as e:
                    log.warning("orphan slice check failed: %s", e)
            if self.runtime is not None:
                try:
                    for namespace, name in await self.runtime.owned():
                        if not await self._exists(namespace, name):
                            log.warning("tearing down the control plane of %s/%s: its VirtualCluster is gone",
                                        namespace, name)
                            await self.runtime.teardown(namespace, name)
                except (errors.ApiError, HostError, HostUnavailable, RuntimeFailure) as e:
                    log.warning("orphan control plane check failed: %s", e)
            await asyncio.sleep(JANITOR_PERIOD)

    async def _worker(self, queue: WorkQueue) -> None:
        while (key := await queue.get()) is not None:
            try:
                await self.controller.reconcile(*split_key(key))
                queue.forget(key)
            except Requeue as again:
                queue.forget(key)
                queue.add_after(key, again.after)
            except (Backoff, HostUnavailable, HostError) as e:
                delay = queue.add_rate_limited(key)
                log.warning("reconcile %s: %s; retrying in %.2fs", key, e, delay)
            except errors.ApiError as e:
                delay = queue.add_rate_limited(key)
                level = logging.DEBUG if e.code == 409 else logging.WARNING
                log.log(level, "reconcile %s: %s; retrying in %.2fs", key, e, delay)
            except Exception:
                delay = queue.add_rate_limited(key)
                log.exception("reconcile %s failed; retrying in %.2fs", key, delay)
            finally:
                queue.done(key)


def attach(app: web.Application, *, registry: Registry, cache: WatchCache, etcd: EtcdClient, host: KubeClient | None,
           events: EventRecorder, secrets: SecretStore | None, runtime: ControlPlaneRuntime | None,
           lease_duration: int = 15, identity: str = "", workers: int = 4,
           joiner: NodeJoiner | None = None, slices: SliceConfig | None = None,
           credentials: Registry | None = None, rotation_overlap: float = DEFAULT_OVERLAP,
           kubernetes_versions: tuple[str, ...] = KUBERNETES_VERSIONS,
           upgrade_timeout: float = upgrades.TIMEOUT) -> Manager:
    """A manager that starts with the application and stops first when it shuts down."""
    manager = Manager(registry=registry, cache=cache, etcd=etcd, host=host, events=events, secrets=secrets,
                      runtime=runtime, identity=identity or f"{socket.gethostname()}:{os.getpid()}",
                      lease_duration=lease_duration, workers=workers, joiner=joiner,
                      slices=slices, credentials=credentials, rotation_overlap=rotation_overlap,
                      kubernetes_versions=kubernetes_versions, upgrade_timeout=upgrade_timeout)

    async def on_startup(_: web.Application) -> None:
        await manager.start()

    async def on_cleanup(_: web.Application) -> None:
        await manager.stop()

    app.on_startup.append(on_startup)
    app.on_cleanup.insert(0, on_cleanup)
    return manager
