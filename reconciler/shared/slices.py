"""The slices of all VirtualClusters: one syncer task per VirtualCluster that asks for one, started
while its control plane is up, resized with its spec, and torn down with it (node, then the host
namespace and everything in it)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from apiserver.apis.virtualcluster import VirtualCluster
from apiserver.kubeclient.client import HostError, HostUnavailable, KubeClient
from apiserver.kubeclient.events import EventRecorder
from apiserver.machinery.jsonutil import Obj
from certs.tenant import TenantPki
from reconciler.shared import capacity, names, translate
from reconciler.shared.kubeletapi import KubeletApi, Tenant
from reconciler.shared.nodeaddress import NodeAddresses
from reconciler.shared.placement import Placement
from reconciler.shared.syncer import SliceReport, SliceSyncer, remove_namespace
from reconciler.shared.translate import TenantNetwork
from reconciler.tenantapi import admin_client
from reconciler.versions import KUBERNETES_VERSION

log = logging.getLogger(__name__)


INSUFFICIENT = "InsufficientHostCapacity"


def _more(new: object, old: object) -> bool:
    """Whether a slice's amount grew (a new resource counts as grown)."""
    if new is None:
        return False
    if old is None:
        return True
    return capacity.amount(new) > capacity.amount(old)


class SharedSlices:
    def __init__(self, host: KubeClient, events: EventRecorder | None = None, overcommit: float = 1.0,
                 placement: Placement | None = None, storage_classes: tuple[str, ...] = ()) -> None:
        self.storage_classes = storage_classes  # the host StorageClasses offered to slices
        self.host = host
        self.events = events
        self.overcommit = overcommit  # how many times the slice pool's allocatable may be promised
        self.placement = placement or Placement()  # the host's slice node pool
        self._syncers: dict[str, SliceSyncer] = {}
        self._kubelet_api: KubeletApi | None = None
        self._addresses: NodeAddresses | None = None

    def serve_kubelet_api(self, api: KubeletApi, address: str, service: tuple[str, str] | None = None) -> None:
        """Slices' nodes point their tenant apiservers at ``api``, reached at ``address``, or published as the
        host NodePort Service ``service`` (namespace, name; :mod:`.nodeaddress`)."""
        self._kubelet_api = api
        self._addresses = NodeAddresses(self.host, self.placement, address, lambda: api.port, service)

    def tenants(self) -> list[Tenant]:
        """The slices that run here, for the kubelet API."""
        return [s.kubelet_tenant for s in self._syncers.values() if s.kubelet_tenant is not None]

    def running(self, vc: Obj) -> bool:
        return VirtualCluster(vc).meta.uid in self._syncers

    def may_hold(self, vc: Obj) -> bool:
        """Whether a slice of this VirtualCluster may be on the host: its syncer runs here, or its spec
        or status names one (a slice left by another leader, or by a spec that no longer asks)."""
        view = VirtualCluster(vc)
        return self.running(vc) or view.spec.slice is not None or view.status.shared_resources is not None

    async def ensure(self, vc: Obj, slice_: dict[str, str], pki: TenantPki, endpoint: str,
                     api_addresses: list[tuple[str, int]] | None = None,
                     version: str = KUBERNETES_VERSION) -> SliceReport:
        """The slice's syncer runs (started on first sight, resized on a change); what it reports.
        ``api_addresses``: where the slice's pods reach the tenant apiserver (its ``kubernetes`` Service);
        ``version``: the tenant's Kubernetes version, which its virtual node's kubelet reports (kube's skew policy:
        never newer than its apiserver)."""
        meta = VirtualCluster(vc).meta
        syncer = self._syncers.get(meta.uid)
        namespace = names.host_namespace(vc)
        grows = syncer is None or any(_more(slice_.get(r), syncer.slice.get(r)) for r in capacity.RESOURCES)
        short = await capacity.room_for(self.host, namespace, slice_, self.overcommit,
                                             self.placement) if grows else ""
        if short and syncer is None:  # no node promises what the host does not have: it waits, Pending
            return SliceReport(namespace, translate.capacity(slice_), reason=INSUFFICIENT, message=short, room=False)
        if short and syncer is not None:  # a slice that runs keeps its size until the host has room for more
            if self.events is not None:
                await self.events.record(vc, "Warning", INSUFFICIENT, f"the slice stays at {syncer.slice}: {short}")
            return syncer.report
        if syncer is None:
            syncer = SliceSyncer(vc, slice_, self.host, admin_client(pki, endpoint), version,
                                 self.events, self.placement, TenantNetwork(pki.service_cidr), self.storage_classes)
            if self._kubelet_api is not None:
                self._kubelet_api.trust(pki.files["ca.crt"])
                syncer.addresses = self._addresses
                syncer.kubelet_tenant = Tenant(meta.uid, pki.cert("ca"), syncer.namespace)
            self._syncers[meta.uid] = syncer
            syncer.start()
            log.info("shared slice of %s: %s in host namespace %s", meta.key, slice_, syncer.namespace)
        else:
            syncer.resize(vc, slice_)
        syncer.reach_apiserver_at(api_addresses or [])
        syncer.version = version
        return syncer.report

    async def stop(self, vc: Obj) -> None:
        """The syncer stops (hibernation keeps nothing running; a lost leadership hands it over)."""
        syncer = self._syncers.pop(VirtualCluster(vc).meta.uid, None)
        if syncer is not None:
            await syncer.stop()

    async def remove(self, vc: Obj, tenant: KubeClient | None) -> bool:
        """The slice goes: the node leaves a tenant that still answers, the host namespace is deleted with
        everything in it; True once the namespace is gone."""
        await self.stop(vc)
        if tenant is not None:
            try:
                await tenant.delete(f"/api/v1/nodes/{names.NODE_NAME}")
            except HostError as e:
                if e.code != 404:
                    log.warning("removing the shared node of %s: %s", VirtualCluster(vc).meta.name, e)
            except HostUnavailable:
                pass
        return await remove_namespace(self.host, names.host_namespace(vc))

    async def stop_all(self) -> None:
        for syncer in list(self._syncers.values()):
            await syncer.stop()
        self._syncers.clear()

    async def orphans(self, uid_of: Callable[[str, str], Awaitable[str | None]]) -> list[str]:
        """Host namespaces of slices whose VirtualCluster is gone (or was made again, with another uid):
        deleted with everything in them."""
        found = (await self.host.get("/api/v1/namespaces",
                                     labelSelector=f"{names.MANAGED_BY}={names.MANAGER}"))["items"]
        removed = []
        for ns in found:
            meta = ns["metadata"]
            notes = meta.get("annotations") or {}
            uid = (meta.get("labels") or {}).get(names.VC_UID, "")
            if meta.get("deletionTimestamp") or not uid or uid in self._syncers:
                continue
            if await uid_of(notes.get(names.TENANT_NAMESPACE, ""), notes.get(names.TENANT_NAME, "")) != uid:
                await remove_namespace(self.host, meta["name"])
                removed.append(meta["name"])
        return removed
