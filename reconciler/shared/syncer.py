"""One slice's syncer: it plays the kubelet of the tenant's shared node, and the tenant's Services to the
host's proxies. This module holds the passes, the pods and the node; the parts the syncer is also made of
hold what pods reference (:mod:`.copies`), storage (:mod:`.volumes`) and Services (:mod:`.services`).

Level-triggered: a pass reads the tenant pods bound to the node and the host pods of the slice's
namespace afresh and makes them correspond (create, update status, delete both ways, fail a started
pod whose host pod vanished). Watches on both sides only say *when* to pass; a pass also runs every
``SCAN_PERIOD`` and at start, so whatever a restart or a dropped watch missed is repaired. Nothing in
memory is needed for correctness: names are derived from the objects, and the host pod carries the
tenant identity it stands for.

Each syncer has its own task, its own limit of host writes in flight and its own tenant client, so
one tenant's burst cannot starve another's.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

from apiserver.apis.virtualcluster import VirtualCluster
from apiserver.kubeclient.client import HostError, HostUnavailable, KubeClient
from apiserver.kubeclient.events import EventRecorder
from apiserver.machinery.jsonutil import Obj
from apiserver.machinery.timefmt import now_rfc3339
from reconciler.shared import names, translate
from reconciler.shared.context import POD_PATH, SERVICE_PATH, Missing
from reconciler.shared.copies import Copies
from reconciler.shared.kubeletapi import Tenant
from reconciler.shared.names import NODE_NAME
from reconciler.shared.nodeaddress import NodeAddresses
from reconciler.shared.placement import Placement
from reconciler.shared.services import Services
from reconciler.shared.translate import TenantNetwork
from reconciler.shared.volumes import Volumes

log = logging.getLogger(__name__)

SCAN_PERIOD = 60.0  # seconds: a full comparison even when no watch said anything
HEARTBEAT = 10.0  # seconds between Lease renewals (the Lease lasts 40 s, the grace period is 40 s or more)
STATUS_REFRESH = 60.0  # seconds between node status heartbeats when nothing changed
WRITES_IN_FLIGHT = 16  # host writes of one slice at a time
RETRY = 5.0  # seconds until a pass that met an unanswering host is tried again
STRATEGIC_MERGE = "application/strategic-merge-patch+json"


def _micro_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _age_key(pod: Obj) -> tuple[str, str]:
    meta = pod["metadata"]
    return meta.get("creationTimestamp", ""), meta["name"]


def _quota_exceeded(e: HostError) -> bool:
    return e.code == 403 and "exceeded quota" in e.message


@dataclass
class SliceReport:
    """What the VirtualCluster's status says of the slice."""

    namespace: str
    capacity: dict[str, str]
    used: dict[str, str] = field(default_factory=dict)
    ready: bool = False
    reason: str = "Starting"
    message: str = "the shared slice is being set up on the host"
    room: bool = True  # False: the host cannot hold the slice yet; it has no node and waits (Pending)

    def status(self) -> Obj:
        return {"namespace": self.namespace, "capacity": self.capacity, "used": self.used}

    def node(self) -> dict[str, Any]:
        return {"name": NODE_NAME, "phase": "Ready" if self.ready else "Joining", "shared": True}


class SliceSyncer(Copies, Volumes, Services):
    """The kubelet of the tenant's shared node: its pods and the node itself (the parts it is made of
    hold the rest)."""

    def __init__(self, vc: Obj, slice_: dict[str, str], host: KubeClient, tenant: KubeClient,
                 version: str = "v0.0.0", events: EventRecorder | None = None,
                 placement: Placement | None = None, network: TenantNetwork | None = None,
                 storage_classes: tuple[str, ...] = ()) -> None:
        self.vc = vc
        self.storage_classes = storage_classes  # the host's StorageClasses offered to the tenant
        self.placement = placement
        self.network = network or TenantNetwork()
        self.api_addresses: list[tuple[str, int]] = []  # where pods reach the tenant apiserver directly
        self.addresses: NodeAddresses | None = None  # where the node says it is (its kubelet API, its NodePorts)
        self._reported: tuple[str, int] | None = None  # what its status last said of that
        self.kubelet_tenant: Tenant | None = None  # what that API knows of this slice
        self.slice = dict(slice_)
        self.host = host
        self.tenant = tenant
        self.version = version
        self.events = events
        self.namespace = names.host_namespace(vc)
        self.report = SliceReport(self.namespace, translate.capacity(self.slice))
        self._wake = asyncio.Event()
        self._writes = asyncio.Semaphore(WRITES_IN_FLIGHT)
        self._tasks: list[asyncio.Task[None]] = []
        self._status_written = 0.0
        # what the host side was last found to be (ready, reason, message); the report follows it once
        # the tenant's node says so too, so the VirtualCluster is never Ready before its node
        self._host: tuple[bool, str, str] = (False, self.report.reason, self.report.message)
        self._beat = asyncio.Event()
        self._seen_events: set[str] = set()
        self._told: set[tuple[str, str]] = set()  # (tenant object uid, message) of refusals already told
        self._driver_made = False
        self._again = False  # something was refused this pass: the next comes after RETRY, not SCAN_PERIOD
        self._started_at = now_rfc3339()
        self.passes = 0


    # -- life ----------------------------------------------------------------------------------

    def start(self) -> None:
        label = VirtualCluster(self.vc).meta.key
        self._tasks = [asyncio.create_task(self._passes(), name=f"slice {label}"),
                       asyncio.create_task(self._heartbeat(), name=f"slice heartbeat {label}"),
                       asyncio.create_task(self._watch(self.tenant, "/api/v1/pods",
                                                       fieldSelector=f"spec.nodeName={NODE_NAME}"),
                                           name=f"slice tenant watch {label}"),
                       asyncio.create_task(self._watch(self.host, POD_PATH.format(self.namespace)),
                                           name=f"slice host watch {label}"),
                       asyncio.create_task(self._watch(self.host, f"/api/v1/namespaces/{self.namespace}/resourcequotas"),
                                           name=f"slice quota watch {label}"),
                       # what pods' volumes and environment copy: a change reaches the host's copies at once
                       *(asyncio.create_task(self._watch(self.tenant, f"/api/v1/{plural}"), name=f"slice {plural} {label}")
                         for plural in ("configmaps", "secrets"))]
        if self.storage_classes:
            self._tasks.append(asyncio.create_task(self._watch(self.tenant, "/api/v1/persistentvolumeclaims"),
                                                   name=f"slice claims {label}"))
        if self.network.routed:  # the tenant's Services and their endpoints, and the host's copies of them
            self._tasks += [
                asyncio.create_task(self._watch(self.tenant, "/api/v1/services"), name=f"slice services {label}"),
                asyncio.create_task(self._watch(self.tenant, "/apis/discovery.k8s.io/v1/endpointslices"),
                                    name=f"slice endpointslices {label}"),
                asyncio.create_task(self._watch(self.host, SERVICE_PATH.format(self.namespace)),
                                    name=f"slice host services {label}")]

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        await self.tenant.close()

    def resize(self, vc: Obj, slice_: dict[str, str]) -> None:
        """A changed slice: quota and node follow on the next pass (nothing running is evicted)."""
        self.vc = vc
        if slice_ != self.slice:
            self.slice = dict(slice_)
            self.report.capacity = translate.capacity(self.slice)
            self._status_written = 0.0
            self._wake.set()

    def reach_apiserver_at(self, addresses: list[tuple[str, int]]) -> None:
        """The tenant apiserver moved (a new pod, another address): the ``kubernetes`` Service follows."""
        if addresses != self.api_addresses:
            self.api_addresses = list(addresses)
            self._wake.set()

    def poke(self) -> None:
        self._wake.set()

    async def _watch(self, client: KubeClient, path: str, **params: str) -> None:
        """Any change on ``path`` wakes the passes; a broken watch is opened again (the periodic pass
        covers the gap)."""
        while True:
            try:
                async for _ in client.watch(path, allowWatchBookmarks="false", **params):
                    self._wake.set()
            except (HostError, HostUnavailable) as e:
                log.debug("slice watch %s ended: %s", path, e)
            await asyncio.sleep(1.0)

    async def _passes(self) -> None:
        while True:
            self._wake.clear()
            try:
                self._again = False
                await self.sync()
                delay = RETRY if self._again else SCAN_PERIOD
            except (HostError, HostUnavailable) as e:
                log.warning("shared slice %s: %s", self.namespace, e)
                delay = RETRY
            except Exception:
                log.exception("shared slice %s: pass failed", self.namespace)
                delay = RETRY
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)
            await asyncio.sleep(0.05)  # a burst of watch events becomes one pass

    async def _heartbeat(self) -> None:
        while True:
            try:
                await self._renew_lease()
                await self._check_host()
                await self._node_status()
            except (HostError, HostUnavailable) as e:
                log.debug("shared node heartbeat of %s: %s", self.namespace, e)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._beat.wait(), HEARTBEAT)  # a readiness change: at once
            self._beat.clear()

    # -- the host's side -------------------------------------------------------------------------

    async def ensure_host(self) -> None:
        """Namespace, then quota and limits (each made or corrected); pods wait for the quota's status."""
        ns = translate.namespace(self.vc)
        try:
            current = await self.host.get(f"/api/v1/namespaces/{self.namespace}")
            if current["metadata"].get("deletionTimestamp"):
                return
        except HostError as e:
            if e.code != 404:
                raise
            await self.host.create("/api/v1/namespaces", ns)
        base = f"/api/v1/namespaces/{self.namespace}"
        for want, plural in ((translate.quota(self.vc, self.slice), "resourcequotas"),
                             (translate.limit_range(self.vc), "limitranges")):
            try:
                have = await self.host.get(f"{base}/{plural}/{want['metadata']['name']}")
                if have.get("spec") != want["spec"]:
                    await self.host.patch(f"{base}/{plural}/{want['metadata']['name']}", {"spec": want["spec"]})
            except HostError as e:
                if e.code != 404:
                    raise
                await self.host.create(f"{base}/{plural}", want)

    async def _check_host(self) -> None:
        """Ready only while the host answers and the namespace and a quota with status exist."""
        ns = await self._read(f"/api/v1/namespaces/{self.namespace}", "HostNamespaceMissing",
                              f"the slice's host namespace {self.namespace} is missing")
        if ns is None:
            return
        quota = await self._read(f"/api/v1/namespaces/{self.namespace}/resourcequotas/{names.QUOTA}",
                                 "QuotaNotReady", f"the quota of {self.namespace} is missing")
        if quota is None:
            return
        if ns["metadata"].get("deletionTimestamp"):
            self._ready(False, "HostNamespaceMissing", f"the slice's host namespace {self.namespace} is terminating")
            return
        hard = (quota.get("status") or {}).get("hard")
        if not hard:
            self._ready(False, "QuotaNotReady", f"the host has not yet accounted the quota of {self.namespace}")
            return
        self.report.used = {k: str(v) for k, v in ((quota.get("status") or {}).get("used") or {}).items()}
        self._ready(True, "SliceReady", f"pods run in the host namespace {self.namespace} under its quota")

    async def _read(self, path: str, missing: str, message: str) -> Obj | None:
        """The host object at ``path``; None when it cannot be had, the node's readiness saying why."""
        try:
            return dict(await self.host.get(path))
        except HostUnavailable as e:
            self._ready(False, "HostAPIUnreachable", f"the host does not answer: {e}")
        except HostError as e:
            if e.code == 404:
                self._ready(False, missing, message)
            else:
                self._ready(False, "HostAPIUnreachable", f"the host answered {e.code}: {e.message}")
        return None

    def _ready(self, ready: bool, reason: str, message: str) -> None:
        if (ready, reason) != self._host[:2]:
            self._status_written = 0.0  # a readiness change is written at once
            self._beat.set()
            log.info("shared node of %s: Ready=%s %s: %s", self.namespace, ready, reason, message)
        self._host = (ready, reason, message)

    # -- the tenant's node ---------------------------------------------------------------------

    async def _renew_lease(self) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{NODE_NAME}"
        try:
            await self.tenant.patch(path, {"spec": {"renewTime": _micro_now(), "holderIdentity": NODE_NAME,
                                                    "leaseDurationSeconds": 40}})
        except HostError as e:
            if e.code != 404:
                raise
            await self.tenant.create("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
                                     translate.lease(_micro_now()))

    async def _node_status(self) -> None:
        """The node exists with its labels; its status is written on a change and every STATUS_REFRESH."""
        loop = asyncio.get_running_loop()
        try:
            current = await self.tenant.get(f"/api/v1/nodes/{NODE_NAME}")
        except HostError as e:
            if e.code != 404:
                raise
            current = await self.tenant.create("/api/v1/nodes", translate.node(self.vc))
            self._status_written = 0.0
        want_labels = translate.node(self.vc)["metadata"]["labels"]
        if any((current["metadata"].get("labels") or {}).get(k) != v for k, v in want_labels.items()):
            current = await self.tenant.patch(f"/api/v1/nodes/{NODE_NAME}", {"metadata": {"labels": want_labels}})
        kubelet = await self.addresses.current() if self.addresses is not None else None
        if loop.time() - self._status_written < STATUS_REFRESH and self._status_written and kubelet == self._reported:
            return
        ready, reason, message = self._host
        told = (self.report.ready, self.report.reason) != (ready, reason)
        status = translate.node_status(self.slice, ready, reason, message, now_rfc3339(), self.version, current,
                                       kubelet)
        await self.tenant.patch(f"/api/v1/nodes/{NODE_NAME}/status", {"status": status},
                                "application/strategic-merge-patch+json")
        self._status_written = loop.time()
        self._reported = kubelet
        self.report.ready, self.report.reason, self.report.message = ready, reason, message
        if told and self.events is not None:  # every transition of the slice is an Event on its VirtualCluster
            await self.events.record(self.vc, "Normal" if ready else "Warning", reason,
                                     f"shared node {NODE_NAME}: {message}")

    # -- the pass ------------------------------------------------------------------------------

    async def sync(self) -> None:
        await self.ensure_host()
        await self._check_host()
        self.passes += 1
        if self.storage_classes:  # claims before pods: a pod waits for its claims' host claims
            await self._volumes()
        tenant_pods = (await self.tenant.get("/api/v1/pods", fieldSelector=f"spec.nodeName={NODE_NAME}"))["items"]
        services = (await self.tenant.get("/api/v1/services"))["items"] if self.network.routed else []
        host_pods = (await self.host.get(POD_PATH.format(self.namespace)))["items"]  # foreign ones too: never ours
        by_name = {p["metadata"]["name"]: p for p in host_pods}
        wanted = set()
        creates: list[tuple[Obj, Obj]] = []
        steps: list[Awaitable[None]] = []
        for pod in sorted(tenant_pods, key=_age_key):
            meta = pod["metadata"]
            hname = names.host_name(meta["namespace"], meta["name"])
            wanted.add(hname)
            host = by_name.get(hname)
            step = self._decide(pod, host, creates, services)
            if step is not None:
                steps.append(step)
        for name, host in by_name.items():
            if name not in wanted and names.owned_by(host, self.uid):
                steps.append(self._delete_host(host, None))
        await self._all(steps)
        if creates:
            await self._create_in_order(creates)
        await self._collect_copies(tenant_pods)
        await self._forward_events(tenant_pods)
        if self.network.routed:
            await self._services(services)

    def _decide(self, pod: Obj, host: Obj | None, creates: list[tuple[Obj, Obj]],
                services: list[Obj]) -> Awaitable[None] | None:
        """The one step a tenant pod needs (a kubelet's decision table, in the design's order)."""
        meta = pod["metadata"]
        phase = (pod.get("status") or {}).get("phase")
        if host is not None and (host["metadata"].get("annotations") or {}).get(names.TENANT_UID) != meta["uid"]:
            if names.owned_by(host, self.uid):  # an earlier incarnation of the same tenant name
                return self._delete_host(host, None)
            if meta.get("deletionTimestamp"):
                return self._finalize(pod)  # it never had a host pod of its own
            return self._refuse(pod, "HostNameConflict", _conflict(self.namespace, host["metadata"]["name"]))
        if meta.get("deletionTimestamp"):
            if host is None:
                return self._finalize(pod)
            if not host["metadata"].get("deletionTimestamp"):
                return self._delete_host(host, meta.get("deletionGracePeriodSeconds"))
            return self._status_up(pod, host)
        if host is None:
            if phase in ("Succeeded", "Failed"):
                return None
            if translate.started(pod):
                return self._lost(pod)
            if not self._host[0]:
                return None  # no pod before the quota is accounted
            try:
                creates.append((pod, translate.host_pod(self.vc, pod, self.placement, self.network, services,
                                                        storage=bool(self.storage_classes))))
            except translate.Refused as e:
                return self._refuse(pod, e.reason, e.message)
            return None
        if host["metadata"].get("deletionTimestamp"):  # the host evicts or drains it: the tenant pod goes too
            return self._delete_tenant(pod, host["metadata"].get("deletionGracePeriodSeconds"))
        have = host["metadata"].get("annotations") or {}
        notes = {k: v for k, v in translate.downward_metadata(pod).items() if have.get(k) != v}
        generation = translate.generation(pod)
        if have.get(names.GENERATION) != generation:
            notes[names.GENERATION] = generation
            return self._down(pod, host, notes, translate.spec_changes(pod, host, self.network, services))
        if notes:
            return self._down(pod, host, notes, translate.SpecChanges())
        return self._status_up(pod, host)


    async def _create_in_order(self, creates: list[tuple[Obj, Obj]]) -> None:
        """Oldest first: once the quota refuses one, the younger ones wait behind it (they are told why)
        and start by themselves when room frees up (the quota's watch wakes a pass)."""
        refused: str | None = None

        async def one(pod: Obj, host: Obj) -> None:
            nonlocal refused
            if refused is not None:
                await self._pending(pod, "ProviderFailed", refused)
                return
            try:
                await self._copy_references(pod)
                await self._tokens(pod)
                await self.host.create(POD_PATH.format(self.namespace), host)
            except Missing as e:
                await self._pending(pod, "MissingReference", str(e), event=True)
            except HostError as e:
                if e.code == 409:  # made meanwhile: ours (the next pass compares) or someone else's
                    existing = await self.host.get(f"{POD_PATH.format(self.namespace)}/{host['metadata']['name']}")
                    if not names.owned_by(existing, self.uid):
                        await self._refuse(pod, "HostNameConflict", _conflict(self.namespace, host["metadata"]["name"]))
                    return
                if _quota_exceeded(e):
                    refused = f"the host quota of the shared slice has no room: {e.message}"
                    await self._pending(pod, "ProviderFailed", refused, event=True)
                else:
                    await self._pending(pod, "ProviderFailed", f"the host refused the pod: {e.message}", event=True)
        for start in range(0, len(creates), WRITES_IN_FLIGHT):
            batch = creates[start:start + WRITES_IN_FLIGHT]
            await asyncio.gather(*(one(p, h) for p, h in batch))

    # -- steps ---------------------------------------------------------------------------------

    async def _down(self, pod: Obj, host: Obj, notes: dict[str, str | None], changes: translate.SpecChanges) -> None:
        """What the tenant changed of a running pod, onto its host pod: labels and annotations for its downward
        API (volumes follow, and a container that restarts reads them), and what a pod may change once made
        (:class:`~reconciler.shared.translate.SpecChanges`, each through the host's own verb for it). Then its
        status up, not yet observed. What the host refuses is told on the tenant pod, once."""
        meta = host["metadata"]
        path = f"{POD_PATH.format(meta['namespace'])}/{meta['name']}"
        writes: list[tuple[str, Obj]] = []  # the generation goes last: a refusal is not tried again
        if changes.spec:
            writes.append((path, {"spec": changes.spec}))
        if changes.resize:
            writes.append((f"{path}/resize", {"spec": changes.resize}))
        if changes.ephemeral:
            writes.append((f"{path}/ephemeralcontainers", {"spec": {"ephemeralContainers": changes.ephemeral}}))
        writes.append((path, {"metadata": {"annotations": notes}}))
        for where, body in writes:
            try:
                await self.host.patch(where, body, STRATEGIC_MERGE)  # containers merge by name
            except HostError as e:
                if e.code == 404:
                    self._wake.set()  # gone meanwhile: the next pass decides again
                    return
                if e.code not in (400, 403, 422):
                    raise
                await self._tell_once(pod, "HostRefusedChange", f"the host refused the change of the pod: {e.message}")
        await self._status_up(pod, host, caught_up=False)

    async def _status_up(self, pod: Obj, host: Obj, caught_up: bool = True) -> None:
        want = translate.tenant_status(pod, host, caught_up)
        if want == (pod.get("status") or {}):
            return
        await self._write_status(pod, want)

    async def _write_status(self, pod: Obj, status: Obj) -> None:
        meta = pod["metadata"]
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": {**meta}, "spec": pod.get("spec"), "status": status}
        try:
            await self.tenant.request("PUT", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status",
                                      body=body)
        except HostError as e:
            if e.code not in (404, 409):
                raise
            self._wake.set()  # changed meanwhile: look again

    async def _pending(self, pod: Obj, reason: str, message: str, event: bool = False) -> None:
        status = translate.with_condition(pod, reason, message, now_rfc3339())
        if status is None:
            return
        await self._write_status(pod, status)
        if event:
            await self._tenant_event(pod, "Warning", reason, message)

    async def _refuse(self, pod: Obj, reason: str, message: str) -> None:
        await self._pending(pod, reason, message, event=True)

    async def _lost(self, pod: Obj) -> None:
        await self._write_status(pod, translate.lost(pod, now_rfc3339()))
        await self._tenant_event(pod, "Warning", "HostPodLost", "the pod's host counterpart disappeared "
                                                                "after it had started; the pod failed")

    async def _delete_host(self, host: Obj, grace: int | None) -> None:
        await _delete_pod(self.host, host, grace)

    async def _delete_tenant(self, pod: Obj, grace: int | None) -> None:
        await _delete_pod(self.tenant, pod, grace)

    async def _finalize(self, pod: Obj) -> None:
        """A deleting tenant pod whose host pod is gone: removed with grace 0, as its kubelet would."""
        await self._delete_tenant(pod, 0)

    # -- events, up ----------------------------------------------------------------------------

    async def _forward_events(self, tenant_pods: list[Obj]) -> None:
        """Host events about the slice's pods, told again on the tenant pods (once each)."""
        by_host = {names.host_name(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in tenant_pods}
        events = (await self.host.get(f"/api/v1/namespaces/{self.namespace}/events",
                                      fieldSelector="involvedObject.kind=Pod"))["items"]
        self._seen_events &= {e["metadata"].get("uid", "") for e in events}  # the host expires events: so do we
        for e in events:
            uid = e["metadata"].get("uid", "")
            pod = by_host.get((e.get("involvedObject") or {}).get("name", ""))
            stamp = e.get("lastTimestamp") or e.get("eventTime") or ""
            if pod is None or uid in self._seen_events or (stamp and stamp < self._started_at):
                continue
            self._seen_events.add(uid)
            message = (e.get("message") or "").replace(self.namespace, pod["metadata"]["namespace"])
            await self._tenant_event(pod, e.get("type") or "Normal", e.get("reason") or "", message)


    # -- teardown ------------------------------------------------------------------------------

    async def teardown(self, tenant_alive: bool) -> bool:
        """The node leaves the tenant and the host namespace goes with everything in it; True once gone."""
        if tenant_alive:
            with contextlib.suppress(HostError, HostUnavailable):
                await self.tenant.delete(f"/api/v1/nodes/{NODE_NAME}")
        return await remove_namespace(self.host, self.namespace)


async def remove_namespace(host: KubeClient, namespace: str) -> bool:
    """Delete the slice's host namespace; True once it no longer exists."""
    try:
        await host.delete(f"/api/v1/namespaces/{namespace}")
    except HostError as e:
        if e.code == 404:
            return True
        if e.code != 409:
            raise
    try:
        await host.get(f"/api/v1/namespaces/{namespace}")
    except HostError as e:
        if e.code == 404:
            return True
        raise
    return False


async def _delete_pod(client: KubeClient, pod: Obj, grace: int | None) -> None:
    """Delete exactly this pod (a UID precondition: never a namesake made meanwhile); gone is done."""
    meta = pod["metadata"]
    body: Obj = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": meta["uid"]}}
    if grace is not None:
        body["gracePeriodSeconds"] = grace
    try:
        await client.delete(f"{POD_PATH.format(meta['namespace'])}/{meta['name']}", body)
    except HostError as e:
        if e.code not in (404, 409):
            raise


def _conflict(namespace: str, name: str) -> str:
    return f"a host pod {namespace}/{name} that this slice did not create holds the pod's host name; it is left alone"


