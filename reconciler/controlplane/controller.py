"""The control-plane controller: each VirtualCluster gets a tenant control plane, and loses it on delete.

A pass acts (PKI, runtime, nodes, hibernation, teardown), then writes the status it leads to once:
the status itself is computed from the object and what the pass observed by :mod:`.status`, with no
I/O. Whether the cluster should be hibernated is decided there too, from the spec, the status and
the last user request the runtime has seen (read only once ``afterInactivity`` could have passed).
The finalizer's removal at the end of a deletion is a separate write, of metadata. Failures are
reported in conditions and retried with back-off; no phase is a dead end.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from dataclasses import dataclass, replace

from apiserver.apis import hibernation as sleep
from apiserver.apis.resource import CONTROL_PLANE_READY, FINALIZER, NODES_READY
from apiserver.apis.virtualcluster import VirtualCluster
from apiserver.kubeclient.client import HostError, HostUnavailable, KubeClient
from apiserver.kubeclient.events import EventRecorder
from apiserver.machinery import errors
from apiserver.machinery.jsonutil import Obj
from apiserver.machinery.timefmt import now_rfc3339, parse_rfc3339
from apiserver.registry.store import Registry
from apiserver.storage.secrets import PKI_KIND, SecretStore, load_pki
from certs import tenant as tenantpki
from certs.tenant import TenantPki
from reconciler.backup import schedule
from reconciler.backup.snapshots import retained, snapshot_name
from reconciler.controlplane import addons, status
from reconciler.controlplane.status import (
    Backups,
    Hibernation,
    Observed,
    Outcome,
    Stopping,
    patch_object,
    write_status,
)
from reconciler.controlplane.tenant import bootstrap_tenant
from reconciler.nodes.promoter import NodePromoter, NodeReport
from reconciler.runtime.base import ControlPlaneRuntime, ControlPlaneState, RuntimeFailure
from reconciler.runtime.flags import SERVICE_CIDR
from reconciler.shared.slices import SharedSlices
from reconciler.shared.syncer import SliceReport
from reconciler.tenantapi import admin_client

log = logging.getLogger(__name__)

READINESS_FAILURES = 3  # consecutive unanswered checks before a ready control plane is reported unready
READINESS_RECHECK = 1.0  # seconds until the next check after an unanswered one
SLICE_POLL = 2.0  # seconds between looks at a slice's host namespace while it terminates


@dataclass
class Requeue(Exception):
    """Not an error: look again after ``after`` seconds."""

    after: float


class Backoff(Exception):
    """Something outside the server (the host, a tenant apiserver) did not answer; the status already
    says so, and the work queue retries with exponential back-off."""


def service_ip(cidr: str = SERVICE_CIDR) -> str:
    base, _ = cidr.split("/")
    parts = base.split(".")
    return ".".join([*parts[:3], str(int(parts[3]) + 1)])


class ControlPlaneController:
    def __init__(self, registry: Registry, runtime: ControlPlaneRuntime | None, secrets: SecretStore | None,
                 events: EventRecorder, nodes: NodePromoter | None = None,
                 slices: SharedSlices | None = None) -> None:
        self.registry = registry
        self.slices = slices
        self.nodes = nodes
        self.runtime = runtime
        self.secrets = secrets
        self.events = events
        self._unanswered: dict[str, int] = {}  # by uid: consecutive unanswered checks of a ready control plane
        self._addons_applied: dict[str, str] = {}  # by uid: digest of the add-ons last applied
        self._last_request: dict[str, dt.datetime] = {}  # by uid: the latest user request seen in the audit log

    async def reconcile(self, namespace: str, name: str) -> None:
        try:
            obj = await self.registry.get(namespace, name)
        except errors.ApiError as e:
            if e.code == 404:
                return
            raise
        if VirtualCluster(obj).meta.deletion_timestamp:
            await self._delete(obj)
        elif self.runtime is None or self.secrets is None:
            await self._no_runtime(obj)
        else:
            await self._build(obj, self.runtime, self.secrets)

    # -- build -----------------------------------------------------------------------

    async def _pki(self, obj: Obj, runtime: ControlPlaneRuntime, secrets: SecretStore) -> TenantPki:
        vc = VirtualCluster(obj)
        meta = vc.meta
        sans = tenantpki.apiserver_sans(runtime.endpoint_host(obj), vc.spec.external_ips, service_ip())
        current = await load_pki(secrets, obj)
        if current is not None:
            if not current.needs_renewal() and set(sans) <= current.sans():
                return current
            log.info("renewing the PKI of %s/%s", meta.namespace, meta.name)
        fresh = await asyncio.to_thread(tenantpki.generate, sans, current)
        await secrets.put(PKI_KIND, meta.namespace, meta.name, {**fresh.files, "uid": meta.uid.encode()})
        return fresh

    async def _build(self, obj: Obj, runtime: ControlPlaneRuntime, secrets: SecretStore) -> None:
        if not VirtualCluster(obj).status.phase:  # accepted: Pending is a pass of its own
            await self._finish(obj, status.accepted(obj, now_rfc3339()))
            return
        why = await self._hibernation(obj, runtime)
        if why is not None:
            await self._hibernate(obj, runtime, why)
            return
        seen = await self._observe(obj, runtime, secrets)
        if seen.state is not None and seen.state.ready:
            seen = replace(seen, backups=await self._backup(obj, runtime))
        await self._finish(obj, status.built(obj, seen, runtime.name, now_rfc3339()))

    # -- backups ---------------------------------------------------------------------

    async def _backup(self, obj: Obj, runtime: ControlPlaneRuntime) -> Backups | None:
        """Take the snapshot that is due (spec.backup's schedule, or the annotation asking for one), verify
        it, keep the newest spec.backup.keep; the snapshots kept, and when to look again. A snapshot that
        fails is an Event, and is tried again shortly."""
        spec = schedule.spec_of(obj)
        if spec is None:
            return None
        now = dt.datetime.now(dt.UTC)
        try:
            kept = await runtime.snapshots(obj)
            last = parse_rfc3339(kept[-1].time) if kept else None
            due, next_at = schedule.due(obj, now, last)
            if not due and retained(kept, spec.keep) != kept:  # one recorded, not yet pruned (or keep lowered)
                kept = await runtime.prune_snapshots(obj, spec.keep)
            if not due:
                return Backups([s.status() for s in kept], (next_at - now).total_seconds() if next_at else None)
            snapshot = snapshot_name(VirtualCluster(obj).meta.name, now)
            taken, kept = await runtime.take_snapshot(obj, snapshot, now, spec.keep)
        except RuntimeFailure as e:
            await self.events.record(obj, "Warning", e.reason, e.message)
            return Backups(list(VirtualCluster(obj).status.backups), status.RUNTIME_RETRY)
        if taken.problem:
            await self.events.record(obj, "Warning", "SnapshotInvalid",
                                     f"snapshot {snapshot} failed verification and was removed: {taken.problem}")
            return Backups([s.status() for s in kept], status.RUNTIME_RETRY)
        await self.events.record(obj, "Normal", "SnapshotTaken", f"snapshot {snapshot} of the tenant's etcd at "
                                                                 f"revision {taken.revision}, {taken.size} bytes, "
                                                                 f"verified")
        return Backups([s.status() for s in kept], (next_at - now).total_seconds() if next_at else None)

    # -- restore ---------------------------------------------------------------------

    async def _restore(self, obj: Obj, runtime: ControlPlaneRuntime) -> None:
        """spec.restoreFrom: the control plane's data is that snapshot's before it first starts (the
        runtime does nothing once its data exists). The PKI and credentials are this VirtualCluster's
        own, fresh: the snapshot holds the tenant's objects only. A clone when the source still exists,
        a restore when it does not; either is an Event. Raises RuntimeFailure (RestoreFailed)."""
        vc = VirtualCluster(obj)
        source = vc.spec.restore_from
        if source is None:
            return
        namespace, origin, snapshot = vc.meta.namespace, str(source.get("virtualCluster")), str(source.get("snapshot"))
        label = f'snapshot "{snapshot}" of virtualcluster "{origin}"'
        if not await runtime.restore(obj, origin, snapshot, label):
            return
        try:
            await self.registry.get(namespace, origin)
            clone = origin != vc.meta.name
        except errors.ApiError as e:
            if e.code != 404:
                raise
            clone = False
        what = f"a clone of {origin}, which still exists" if clone else f"a restore: {origin} no longer exists"
        await self.events.record(obj, "Normal", "Restored", f"the control plane starts from {label} ({what}), with "
                                                            f"a fresh PKI and fresh credentials")

    # -- hibernation -----------------------------------------------------------------

    async def _hibernation(self, obj: Obj, runtime: ControlPlaneRuntime) -> Hibernation | None:
        """Whether the cluster should be hibernated (:func:`.status.hibernation`). The runtime's audit
        log is read only once afterInactivity has passed since the last request already seen; a
        runtime that cannot tell leaves the cluster running."""
        vc = VirtualCluster(obj)
        uid = vc.meta.uid
        now = dt.datetime.now(dt.UTC)
        known = self._last_request.get(uid)
        after = vc.spec.hibernation.after_inactivity
        if after is not None and status.inactivity_due(obj, now, known):
            try:
                found = await runtime.last_request(obj, now - after)
            except RuntimeFailure as e:
                log.warning("%s/%s stays awake: %s", vc.meta.namespace, vc.meta.name, e.message)
                return None
            if found is not None and (known is None or found > known):
                known = self._last_request[uid] = found
        return status.hibernation(obj, now, known)

    async def _hibernate(self, obj: Obj, runtime: ControlPlaneRuntime, why: Hibernation) -> None:
        """Nodes back to the host as on delete (the tenant still answers, so they leave it cleanly),
        then the control plane stopped with its data kept. The phase says Hibernating first. Once
        Hibernated no node can have been claimed for it (claims are made only while it is awake),
        so a resync of a sleeping cluster asks the host nothing: it only makes sure nothing runs."""
        vc = VirtualCluster(obj)
        phase = vc.status.phase
        if phase not in sleep.HIBERNATION_PHASES:
            await self._finish(obj, status.hibernating(obj, why, now_rfc3339()))
            return
        self._unanswered.pop(vc.meta.uid, None)
        if phase != "Hibernated":
            try:
                if self.nodes is not None:
                    await self._release_nodes(obj, self.nodes)
                if not await self._remove_slice(obj):
                    raise Requeue(SLICE_POLL)
            except (HostUnavailable, HostError) as e:
                _raise_unless_unreachable(e)
                await self._finish(obj, status.hibernated(obj, why, Stopping(unreachable=str(e)), now_rfc3339()))
                return
        try:
            seen = Stopping(stopped=await runtime.hibernate(obj))
        except RuntimeFailure as e:
            seen = Stopping(failure=e)
        await self._finish(obj, status.hibernated(obj, why, seen, now_rfc3339()))

    async def _observe(self, obj: Obj, runtime: ControlPlaneRuntime, secrets: SecretStore) -> Observed:
        """Build, adopt or repair the control plane, then its nodes; what was found, for the status."""
        vc = VirtualCluster(obj)
        was_ready = vc.status.is_true(CONTROL_PLANE_READY)
        try:
            await self._restore(obj, runtime)
            pki = await self._pki(obj, runtime, secrets)
            state = await runtime.ensure(obj, pki)
            state = self._tolerate_a_missed_check(obj, state, was_ready)
            if state.ready and not was_ready:
                await bootstrap_tenant(pki, state.endpoint)
        except RuntimeFailure as e:
            return Observed(failure=e)
        if not state.ready:
            return Observed(state=state)
        wants_nodes = vc.spec.requests_nodes
        slice_ = vc.spec.slice
        report = None
        try:  # nodes follow the spec (scaled to zero: every node goes back)
            if self.nodes is not None and (wants_nodes or vc.status.promoted_nodes):
                tenant = await runtime.clients.get(vc.meta.namespace, vc.meta.name, pki, state.endpoint)
                report = await self._promote(obj, tenant, state.endpoint, self.nodes)
            shared = await self._slice(obj, slice_, pki, state.endpoint)
        except (HostUnavailable, HostError) as e:
            _raise_unless_unreachable(e)
            return Observed(state=state, unreachable=str(e))
        if shared is not None:
            report = report or NodeReport()
            report.nodes.append(shared.node())
            if not shared.ready:
                report.waiting.append(f"shared slice: {shared.reason}: {shared.message}")
        if not wants_nodes and slice_ is None:
            return Observed(state=state)
        return Observed(state=state, nodes=report, shared=shared.status() if shared is not None else None)

    async def _slice(self, obj: Obj, slice_: dict[str, str] | None, pki: TenantPki, endpoint: str) -> SliceReport | None:
        """The shared slice's syncer runs while the spec asks for one; without one any slice left goes."""
        if self.slices is None:
            return None
        if slice_ is not None:
            return await self.slices.ensure(obj, slice_, pki, endpoint)
        await self._remove_slice(obj)
        return None

    def _tolerate_a_missed_check(self, obj: Obj, state: ControlPlaneState, was_ready: bool) -> ControlPlaneState:
        """A ready control plane whose components all run stays ready until its apiserver misses
        ``READINESS_FAILURES`` checks in a row, and is then reported as not answering until it does;
        a crashed component is reported at once."""
        meta = VirtualCluster(obj).meta
        uid = meta.uid
        misses = self._unanswered.get(uid)
        if state.ready or not state.unanswered or (misses is None and not was_ready):
            self._unanswered.pop(uid, None)
            return state
        misses = self._unanswered[uid] = (misses or 0) + 1
        if misses < READINESS_FAILURES:
            log.info("tenant apiserver of %s/%s did not answer its readiness check (%d of %d)",
                     meta.namespace, meta.name, misses, READINESS_FAILURES)
            raise Requeue(READINESS_RECHECK)
        return replace(state, reason="ApiserverUnreachable",
                       message=f"the tenant apiserver at {state.endpoint} stopped answering its readiness checks "
                               f"({READINESS_FAILURES} missed in a row); its components are running")

    async def _promote(self, obj: Obj, tenant: KubeClient, endpoint: str, nodes: NodePromoter) -> NodeReport:
        report = await nodes.reconcile(obj, tenant)
        if report.ready:
            await self._addons(obj, tenant, endpoint)
        return report

    async def _addons(self, obj: Obj, tenant: KubeClient, endpoint: str) -> None:
        """kube-proxy, CoreDNS and the kubernetes Service's endpoints, once the tenant has a node; applied
        again only when they change (or after a restart). A tenant that refuses them is retried on the
        next pass: the nodes and the control plane are fine meanwhile."""
        meta = VirtualCluster(obj).meta
        objs = addons.manifests(endpoint, SERVICE_CIDR)
        key, digest = meta.uid, addons.digest(objs)
        if self._addons_applied.get(key) == digest:
            return
        try:
            await addons.ensure(tenant, objs)
        except (HostUnavailable, HostError) as e:
            log.warning("installing the add-ons of %s/%s: %s", meta.namespace, meta.name, e)
            return
        self._addons_applied[key] = digest
        log.info("add-ons of %s/%s applied (kube-proxy, CoreDNS, kubernetes endpoints at %s)",
                 meta.namespace, meta.name, endpoint)

    async def _finish(self, obj: Obj, outcome: Outcome) -> None:
        """The pass's one status write, the event telling of a new reason, then what comes next."""
        before = VirtualCluster(obj).status.reason
        new = await write_status(self.registry, obj, outcome.status)
        if outcome.event is not None and VirtualCluster(new).status.reason != before:
            await self.events.record(new, *outcome.event)
        if outcome.backoff:
            raise Backoff(outcome.backoff)
        if outcome.requeue_after is not None:
            raise Requeue(outcome.requeue_after)

    async def _no_runtime(self, obj: Obj) -> None:
        await self._finish(obj, status.no_runtime(obj, now_rfc3339()))

    # -- delete ----------------------------------------------------------------------

    async def _release_nodes(self, obj: Obj, nodes: NodePromoter) -> None:
        """Every node goes back before the control plane goes away (the tenant drains them first)."""
        vc = VirtualCluster(obj)
        tenant = None
        endpoint = vc.status.endpoint
        pki = await load_pki(self.secrets, obj) if self.secrets else None
        if endpoint and pki is not None:
            tenant = admin_client(pki, endpoint)
        try:
            released = await nodes.release_all(obj, tenant)
        finally:
            if tenant is not None:
                await tenant.close()
        if released:
            log.info("returned %d node(s) of %s/%s to the host", released, vc.meta.namespace, vc.meta.name)

    async def _remove_slice(self, obj: Obj) -> bool:
        """The shared slice (if any) goes: its node leaves the tenant, the host namespace is deleted with
        every pod and copy in it; True once the namespace is gone."""
        vc = VirtualCluster(obj)
        if self.slices is None or not (self.slices.running(obj) or vc.spec.slice or vc.status.shared_resources):
            return True
        endpoint = vc.status.endpoint
        pki = await load_pki(self.secrets, obj) if self.secrets else None
        tenant = admin_client(pki, endpoint) if endpoint and pki is not None else None
        try:
            return await self.slices.remove(obj, tenant)
        finally:
            if tenant is not None:
                await tenant.close()

    async def _delete(self, obj: Obj) -> None:
        vc = VirtualCluster(obj)
        meta = vc.meta
        self._unanswered.pop(meta.uid, None)
        self._addons_applied.pop(meta.uid, None)
        self._last_request.pop(meta.uid, None)
        if FINALIZER not in meta.finalizers:
            return
        if vc.status.phase != "Deleting":  # the phase says so before the teardown
            await self._finish(obj, status.deleting(obj, now_rfc3339()))
            return
        if self.nodes is not None:
            try:
                await self._release_nodes(obj, self.nodes)
            except (HostUnavailable, HostError) as e:
                _raise_unless_unreachable(e)
                await self._finish(obj, status.unreachable(obj, NODES_READY, str(e), now_rfc3339()))
                return
        try:
            if not await self._remove_slice(obj):
                raise Requeue(SLICE_POLL)  # the host namespace is still terminating
        except (HostUnavailable, HostError) as e:
            _raise_unless_unreachable(e)
            await self._finish(obj, status.unreachable(obj, NODES_READY, str(e), now_rfc3339()))
            return
        if self.runtime is not None:
            await self.runtime.teardown(meta.namespace, meta.name)
        if self.secrets is not None:
            await self.secrets.delete(PKI_KIND, meta.namespace, meta.name)
        remaining = [f for f in meta.finalizers if f != FINALIZER]
        await patch_object(self.registry, obj, {"metadata": {"finalizers": remaining or None}})
        log.info("deleted %s/%s: control plane removed, finalizer released", meta.namespace, meta.name)


def _raise_unless_unreachable(e: HostUnavailable | HostError) -> None:
    """A host that did not answer (or answered 5xx/429) is waited for; any other answer is an error."""
    if isinstance(e, HostError) and e.code < 500 and e.code != 429:
        raise e
