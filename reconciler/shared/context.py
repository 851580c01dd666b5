"""What every part of one slice's syncer shares: the VirtualCluster, both clients, the slice's host
namespace, its limit of host writes in flight, and how a part wakes the next pass or tells the tenant.

The syncer is one object made of parts, each in its own module (:mod:`.copies`, :mod:`.volumes`,
:mod:`.services`, and the pods and node in :mod:`.syncer`); each part is a class on this one, so they
share this state without passing it around.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable

from apiserver.apis.virtualcluster import VirtualCluster
from apiserver.kubeclient.client import HostError, HostUnavailable, KubeClient
from apiserver.machinery.jsonutil import Obj
from apiserver.machinery.timefmt import now_rfc3339
from reconciler.shared.names import NODE_NAME
from reconciler.shared.translate import TenantNetwork

log = logging.getLogger(__name__)

POD_PATH = "/api/v1/namespaces/{}/pods"
SERVICE_PATH = "/api/v1/namespaces/{}/services"
CLAIM_PATH = "/api/v1/namespaces/{}/persistentvolumeclaims"
CLASSES = "/apis/storage.k8s.io/v1/storageclasses"
ENDPOINTSLICE_PATH = "/apis/discovery.k8s.io/v1/namespaces/{}/endpointslices"


class SliceContext:
    """The state the parts share (set by :class:`~reconciler.shared.syncer.SliceSyncer`), and their helpers."""

    vc: Obj
    host: KubeClient
    tenant: KubeClient
    network: TenantNetwork
    namespace: str  # the slice's host namespace
    storage_classes: tuple[str, ...]  # the host's StorageClasses offered to the tenant
    api_addresses: list[tuple[str, int]]  # where pods reach the tenant apiserver directly
    _wake: asyncio.Event  # set: a pass comes at once
    _writes: asyncio.Semaphore  # host writes in flight
    _told: set[tuple[str, str]]  # (tenant object uid, message) of refusals already told
    _again: bool  # something was refused this pass: the next comes after RETRY, not SCAN_PERIOD
    _driver_made: bool  # the tenant's CSIDriver of the slice exists

    @property
    def uid(self) -> str:
        return VirtualCluster(self.vc).meta.uid

    async def _all(self, steps: list[Awaitable[None]]) -> None:
        """Every step, at most WRITES_IN_FLIGHT at a time; one that fails is logged and the rest go on, but an
        unanswering host ends the pass."""
        async def bounded(step: Awaitable[None]) -> None:
            async with self._writes:
                await step
        results = await asyncio.gather(*(bounded(s) for s in steps), return_exceptions=True)
        for r in results:
            if isinstance(r, HostUnavailable):
                raise r
            if isinstance(r, BaseException):
                log.warning("shared slice %s: %s", self.namespace, r)

    async def _tenant_event(self, obj: Obj, type_: str, reason: str, message: str, kind: str = "Pod") -> None:
        meta = obj["metadata"]
        now = now_rfc3339()
        event = {"apiVersion": "v1", "kind": "Event",
                 "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
                 "involvedObject": {"apiVersion": "v1", "kind": kind, "name": meta["name"],
                                    "namespace": meta["namespace"], "uid": meta["uid"]},
                 "reason": reason, "message": message[:1024], "type": type_, "firstTimestamp": now,
                 "lastTimestamp": now, "count": 1, "source": {"component": "shared-slice", "host": NODE_NAME},
                 "reportingComponent": "shared-slice", "reportingInstance": NODE_NAME}
        try:
            await self.tenant.create(f"/api/v1/namespaces/{meta['namespace']}/events", event)
        except (HostError, HostUnavailable) as e:
            log.debug("event %s on %s/%s not recorded: %s", reason, meta["namespace"], meta["name"], e)

    async def _tell_once(self, obj: Obj, reason: str, message: str, kind: str = "Pod") -> None:
        """A refusal told on the tenant object as a Warning, once for each object and message (a pass that
        meets it again says nothing new)."""
        told = (obj["metadata"].get("uid", ""), message)
        if told not in self._told:
            self._told.add(told)
            await self._tenant_event(obj, "Warning", reason, message, kind=kind)

    async def _delete(self, path: str, name: str) -> None:
        """A host object gone (already gone is done)."""
        try:
            await self.host.delete(f"{path}/{name}")
        except HostError as e:
            if e.code != 404:
                raise


class Missing(Exception):
    """A pod's non-optional ConfigMap or Secret is not there (or a foreign object holds its host name)."""


async def ignore_missing(step: Awaitable[None]) -> None:
    with contextlib.suppress(Missing):
        await step
