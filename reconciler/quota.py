"""The recount behind host quota: ``status.used`` of our quota names kept equal to what the
VirtualClusters of each namespace hold, as kube's quota controller keeps its own names.

Admission charges a create or a scale-up (:mod:`apiserver.registry.quota`); nothing there gives back
what a deleted or shrunk VirtualCluster held, or corrects a charge whose write then failed. The
leader recounts a namespace shortly after any change to a VirtualCluster in it, and every namespace
whose quotas cap our names every :data:`RESYNC` seconds.
"""

from __future__ import annotations

import asyncio
import logging

from apiserver.apis.quota import RESOURCES
from apiserver.kubeclient.client import HostError, HostUnavailable, KubeClient
from apiserver.machinery import errors
from apiserver.registry.quota import caps, recount
from apiserver.registry.store import Registry
from apiserver.storage.interface import ListOptions

log = logging.getLogger(__name__)

RESYNC = 60.0  # seconds between recounts of every namespace whose quotas cap our names
SETTLE = 0.5  # seconds a changed namespace waits, so a burst of changes is one recount


class QuotaRecount:
    def __init__(self, host: KubeClient, registry: Registry) -> None:
        self.host = host
        self.registry = registry
        self._dirty: set[str] = set()
        self._wake = asyncio.Event()

    def changed(self, namespace: str) -> None:
        """A VirtualCluster of ``namespace`` changed (created, updated, deleted)."""
        self._dirty.add(namespace)
        self._wake.set()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        next_full = loop.time()
        while True:
            if loop.time() >= next_full:
                self._dirty |= await self._capped_namespaces()
                next_full = loop.time() + RESYNC
            dirty, self._dirty = self._dirty, set()
            for namespace in sorted(dirty):
                await self.namespace(namespace)
            self._wake.clear()
            if not self._dirty:
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout=max(next_full - loop.time(), 0.0))
                except TimeoutError:
                    continue
                await asyncio.sleep(SETTLE)

    async def namespace(self, namespace: str) -> None:
        try:
            listed = await self.registry.list(namespace, ListOptions())
            written = await recount(self.host, namespace, [e.obj.get("spec") for e in listed.entries])
        except (HostError, HostUnavailable, errors.ApiError) as e:
            log.warning("recounting the quota of namespace %s (again with the next change or resync): %s",
                        namespace, e)
            return
        if written:
            log.info("recounted %d resource quota(s) of namespace %s", written, namespace)

    async def _capped_namespaces(self) -> set[str]:
        try:
            items = (await self.host.get("/api/v1/resourcequotas")).get("items") or []
        except (HostError, HostUnavailable) as e:
            log.warning("listing the host's resource quotas: %s", e)
            return set()
        return {q["metadata"]["namespace"] for q in items if caps(q, RESOURCES)}
