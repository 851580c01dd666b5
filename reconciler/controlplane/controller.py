"""The control-plane controller: each VirtualCluster gets a tenant control plane, and loses it on delete.

A pass takes one of three roads: teardown (deleted), hibernation (:mod:`.inactivity` decides), or the
build (PKI, runtime, nodes, slice, add-ons, snapshots). It acts, gathers what it saw, and writes the
status that leads to once: the status itself is computed from the object and that observation by
:mod:`.status`, with no I/O. The finalizer's removal at the end of a deletion is a separate write, of
metadata. Failures are reported in conditions and retried with back-off; no phase is a dead end.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

from apiserver.apis import hibernation as sleep
from apiserver.apis.credential import CLUSTER_LABEL, ISSUER_LABEL
from apiserver.apis.kubeversion import Offered
from apiserver.apis.resource import CONTROL_PLANE_READY, FINALIZER, NODES_READY
from apiserver.apis.virtualcluster import VirtualCluster
from apiserver.kubeclient.client import HostError, HostUnavailable, KubeClient
from apiserver.kubeclient.events import EventRecorder
from apiserver.kubeclient.imported import ImportError_, import_ref, reach
from apiserver.machinery import errors
from apiserver.machinery.jsonutil import Obj, merge_patch
from apiserver.machinery.selectors import parse_label_selector
from apiserver.machinery.timefmt import now_rfc3339, parse_rfc3339
from apiserver.registry.rest import DeleteOptions, ListOptions, WriteOptions
from apiserver.registry.store import Registry
from apiserver.storage.secrets import PKI_KIND, SecretStore, load_pki
from certs import tenant as tenantpki
from certs.tenant import TenantPki
from reconciler.controlplane import backups, status, upgrades
from reconciler.controlplane.addons import AddonInstaller
from reconciler.controlplane.inactivity import Hibernation, InactivityClock
from reconciler.controlplane.rotation import Rotating, Rotations
from reconciler.controlplane.status import Observed, Outcome, Stopping
from reconciler.controlplane.tenant import bootstrap_tenant
from reconciler.nodes.promoter import NodePromoter, NodeReport
from reconciler.runtime.base import (
    FIELD_MANAGER,
    ControlPlaneRuntime,
    ControlPlaneState,
    RuntimeFailure,
    UpgradeOutcome,
)
from reconciler.shared.ranges import NoRange, ServiceRanges, first_address
from reconciler.shared.slices import SharedSlices
from reconciler.shared.syncer import SliceReport
from reconciler.tenantapi import admin_client
from reconciler.versions import KUBERNETES_VERSIONS

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


class ControlPlaneController:
    def __init__(self, registry: Registry, runtime: ControlPlaneRuntime | None, secrets: SecretStore | None,
                 events: EventRecorder, nodes: NodePromoter | None = None,
                 slices: SharedSlices | None = None, host: KubeClient | None = None,
                 credentials: Registry | None = None, rotations: Rotations | None = None,
                 ranges: ServiceRanges | None = None, versions: Offered | None = None,
                 upgrade_timeout: float = upgrades.TIMEOUT) -> None:
        self.registry = registry
        self.credentials = credentials  # the issued credentials (a client CA rotation's end deletes the dead)
        self.rotations = rotations or Rotations()
        self.host = host  # where imported clusters' Secrets are read
        self.slices = slices
        self.nodes = nodes
        self.runtime = runtime
        self.secrets = secrets
        self.events = events
        self.ranges = ranges  # Services ranges of their own, for tenants made with a shared slice
        self.versions = versions or Offered.of(KUBERNETES_VERSIONS)  # what tenants may run
        self.upgrade_timeout = upgrade_timeout  # seconds each component has to come up at a new version
        self.addons = AddonInstaller()
        self.inactivity = InactivityClock()
        self._unanswered: dict[str, int] = {}  # by uid: consecutive unanswered checks of a ready control plane

    async def reconcile(self, namespace: str, name: str) -> None:
        try:
            obj = await self.registry.get(namespace, name)
        except errors.ApiError as e:
            if e.code == 404:
                return
            raise
        vc = VirtualCluster(obj)
        if vc.meta.deletion_timestamp:
            await self._delete(vc)
        elif import_ref(vc.raw) is not None:
            await self._finish(vc, await self._check_import(vc))
        elif self.runtime is None or self.secrets is None:
            await self._finish(vc, status.no_runtime(vc.raw, now_rfc3339()))
        elif not vc.status.phase:  # accepted: Pending is a pass of its own
            await self._finish(vc, status.accepted(vc.raw, now_rfc3339()))
        else:
            why = await self.inactivity.hibernation(vc, self.runtime)
            if why is not None:
                await self._hibernate(vc, self.runtime, why)
            elif vc.status.phase == status.UPGRADING:
                await self._upgrade(vc, self.runtime, self.secrets)
            else:
                await self._build(vc, self.runtime, self.secrets)

    # -- build -----------------------------------------------------------------------

    async def _build(self, vc: VirtualCluster, runtime: ControlPlaneRuntime, secrets: SecretStore) -> None:
        move = upgrades.wanted(vc, self.versions) if vc.status.is_true(CONTROL_PLANE_READY) else None
        if move is not None:
            await self._finish(vc, status.upgrading(vc.raw, *move, now_rfc3339()))
            return
        version = upgrades.running_version(vc, self.versions)
        seen = await self._observe(vc, runtime, secrets, version)
        if seen.state is not None and seen.state.ready:
            seen = replace(seen, backups=await backups.take_due(vc, runtime, self.events))
        await self._finish(vc, status.built(vc.raw, seen, runtime.name, now_rfc3339(), version))

    async def _upgrade(self, vc: VirtualCluster, runtime: ControlPlaneRuntime, secrets: SecretStore) -> None:
        """One pass of an upgrade (phase Upgrading): the snapshot, recorded; then the components, each moved or
        the whole rolled back. Nothing else of the cluster changes meanwhile."""
        upgrade = vc.status.raw.get("upgrade") or {}
        started = parse_rfc3339(str(upgrade.get("startTime") or now_rfc3339()))
        snapshot = upgrade.get("snapshot")
        pki = await load_pki(secrets, vc.raw)
        outcome = UpgradeOutcome(False, message="the tenant's PKI is missing")
        if pki is not None:
            try:
                if not snapshot:
                    name, kept = await upgrades.snapshot(vc, runtime, dt.datetime.now(dt.UTC))
                    await self._finish(vc, status.upgrade_snapshot_taken(vc.raw, name, kept, now_rfc3339()))
                    return
                outcome = await runtime.upgrade(vc.raw, pki, str(upgrade.get("toVersion")), self.upgrade_timeout)
            except RuntimeFailure as e:
                outcome = UpgradeOutcome(False, message=f"{e.reason}: {e.message}")
        why, restored = outcome.message, None
        if not outcome.ok and pki is not None:
            try:
                restored = await runtime.roll_back(vc.raw, pki, snapshot if outcome.served else None)
            except RuntimeFailure as e:
                why += f"; the rollback failed too ({e.reason}: {e.message})"
                restored = False
            if not outcome.served:
                restored = None  # the new apiserver never served: there was nothing to put back
        seconds = (dt.datetime.now(dt.UTC) - started).total_seconds()
        vc = VirtualCluster(await self.registry.get(vc.meta.namespace, vc.meta.name))  # what changed meanwhile
        if outcome.ok:
            await self._finish(vc, status.upgraded(vc.raw, seconds, now_rfc3339()))
        else:
            await self._finish(vc, status.upgrade_failed(vc.raw, why, restored, seconds, now_rfc3339()))

    async def _pki(self, vc: VirtualCluster, runtime: ControlPlaneRuntime, secrets: SecretStore) -> TenantPki:
        """The tenant's PKI, made or renewed when it nears expiry or no longer names every address. A tenant
        made with a shared slice gets a Services range of its own with it (:mod:`reconciler.shared.ranges`)."""
        meta = vc.meta
        current = await load_pki(secrets, vc.raw)
        cidr = current.service_cidr if current is not None else await self._service_range(vc)
        sans = tenantpki.apiserver_sans(runtime.endpoint_host(vc.raw), vc.spec.external_ips,
                                        first_address(cidr or tenantpki.SHARED_SERVICE_CIDR))
        if current is not None:
            if not current.needs_renewal() and set(sans) <= current.sans():
                return current
            log.info("renewing the PKI of %s/%s", meta.namespace, meta.name)
        fresh = await asyncio.to_thread(tenantpki.generate, sans, current, cidr)
        await secrets.put(PKI_KIND, meta.namespace, meta.name, {**fresh.files, "uid": meta.uid.encode()})
        return fresh

    async def _service_range(self, vc: VirtualCluster) -> str | None:
        """A block of the slice pool for a tenant made with a shared slice; None for any other (it keeps the
        range promoted nodes' kubelets expect)."""
        if vc.spec.slice is None or self.ranges is None:
            return None
        try:
            return await self.ranges.claim(vc.raw)
        except NoRange as e:
            raise RuntimeFailure("NoServiceRange", str(e)) from None
        except (HostError, HostUnavailable) as e:
            raise RuntimeFailure("ServiceRangeUnclaimed", f"the host's ServiceCIDRs could not be read or "
                                                          f"written: {e}") from None

    async def _observe(self, vc: VirtualCluster, runtime: ControlPlaneRuntime, secrets: SecretStore,
                       version: str) -> Observed:
        """Build, adopt or repair the control plane at Kubernetes ``version``, then its nodes; what was found,
        for the status."""
        was_ready = vc.status.is_true(CONTROL_PLANE_READY)
        try:
            await backups.restore(vc, runtime, self.registry, self.events)
            pki = await self._pki(vc, runtime, secrets)
            state = self._tolerate_a_missed_check(vc, await runtime.ensure(vc.raw, pki, version), was_ready)
            if not state.ready:
                return Observed(state=state)
            # the tenant's admin client, kept between passes: one TLS context and handshake per tenant
            tenant = await runtime.clients.get(vc.meta.namespace, vc.meta.name, pki, state.endpoint)
            if not was_ready:
                await bootstrap_tenant(tenant)
            rotating = await self._rotate(vc, runtime, secrets, pki, state.endpoint)
        except RuntimeFailure as e:
            return Observed(failure=e)
        wants_nodes, slice_ = vc.spec.requests_nodes, vc.spec.slice
        report = None
        try:  # nodes follow the spec (scaled to zero: every node goes back)
            if self.nodes is not None and (wants_nodes or vc.status.promoted_nodes):
                report = await self.nodes.reconcile(vc.raw, tenant, version)
            shared = await self._slice(vc, slice_, pki, tenant, state.endpoint, runtime, version)
            if (report is not None and report.ready) or (shared is not None and shared.ready):
                await self.addons.ensure(vc, tenant, state.endpoint, pki.service_cidr)
        except (HostUnavailable, HostError) as e:
            _raise_unless_unreachable(e)
            return Observed(state=state, unreachable=str(e), rotation=rotating)
        if shared is not None:
            report = report or NodeReport()
            if not shared.room:
                report.shortages.append(f"shared slice: {shared.message}")
            else:
                report.nodes.append(shared.node())
                if not shared.ready:
                    report.waiting.append(f"shared slice: {shared.reason}: {shared.message}")
        if not wants_nodes and slice_ is None:
            return Observed(state=state, rotation=rotating)
        return Observed(state=state, nodes=report, shared=shared.status() if shared is not None and shared.room else None,
                        rotation=rotating)

    async def _rotate(self, vc: VirtualCluster, runtime: ControlPlaneRuntime, secrets: SecretStore, pki: TenantPki,
                      endpoint: str) -> Rotating | None:
        """The next step of the rotations the VirtualCluster asks for (:mod:`.rotation`), stored with the PKI
        before anything acts on it; where each stands, for the status."""
        if not self.rotations.asked(vc, pki):
            return None
        if not self.rotations.pending(vc, pki):
            return self.rotations.progress(pki)
        step = await self.rotations.advance(vc, pki, endpoint, await runtime.rolled_out(vc.raw, pki),
                                            runtime.REPLACES_IN_PLACE)
        if step is not None:
            meta = vc.meta
            await secrets.put(PKI_KIND, meta.namespace, meta.name, {**step.files, "uid": meta.uid.encode()})
            pki = TenantPki(step.files)
            await self.events.record(vc.raw, "Normal", step.reason, step.message)
            if step.finished_client_ca:
                await self._delete_credentials_of_old_cas(vc, pki)
        return self.rotations.progress(pki)

    async def _delete_credentials_of_old_cas(self, vc: VirtualCluster, pki: TenantPki) -> None:
        """A client CA rotation ended: the credentials another CA signed go, so that what is listed is what
        works, and so that the tenant's authorization webhook refuses those it still trusts (issued before
        there was a client CA, by the cluster CA)."""
        if self.credentials is None:
            return
        selector = f"{CLUSTER_LABEL}={vc.meta.name},{ISSUER_LABEL}!={pki.issuer()}"
        for entry in (await self.credentials.list(vc.meta.namespace,
                                                  ListOptions(label_selector=parse_label_selector(selector)))).entries:
            with contextlib.suppress(errors.ApiError):
                await self.credentials.delete(entry.namespace, entry.name, DeleteOptions(),
                                              WriteOptions(field_manager=FIELD_MANAGER))

    async def _slice(self, vc: VirtualCluster, slice_: dict[str, str] | None, pki: TenantPki, tenant: KubeClient,
                     endpoint: str, runtime: ControlPlaneRuntime, version: str) -> SliceReport | None:
        """The shared slice's syncer runs while the spec asks for one; without one any slice left goes."""
        if self.slices is None:
            return None
        if slice_ is not None:
            return await self.slices.ensure(vc.raw, slice_, pki, endpoint, await runtime.pod_addresses(vc.raw), version)
        if self.slices.may_hold(vc.raw):
            await self.slices.remove(vc.raw, tenant)
        return None

    def _tolerate_a_missed_check(self, vc: VirtualCluster, state: ControlPlaneState,
                                 was_ready: bool) -> ControlPlaneState:
        """A ready control plane whose components all run stays ready until its apiserver misses
        ``READINESS_FAILURES`` checks in a row, and is then reported as not answering until it does;
        a crashed component is reported at once."""
        uid = vc.meta.uid
        misses = self._unanswered.get(uid)
        if state.ready or not state.unanswered or (misses is None and not was_ready):
            self._unanswered.pop(uid, None)
            return state
        misses = self._unanswered[uid] = (misses or 0) + 1
        if misses < READINESS_FAILURES:
            log.info("tenant apiserver of %s/%s did not answer its readiness check (%d of %d)",
                     vc.meta.namespace, vc.meta.name, misses, READINESS_FAILURES)
            raise Requeue(READINESS_RECHECK)
        return replace(state, reason="ApiserverUnreachable",
                       message=f"the tenant apiserver at {state.endpoint} stopped answering its readiness checks "
                               f"({READINESS_FAILURES} missed in a row); its components are running")

    # -- hibernation -----------------------------------------------------------------

    async def _hibernate(self, vc: VirtualCluster, runtime: ControlPlaneRuntime, why: Hibernation) -> None:
        """Nodes back to the host as on delete (the tenant still answers, so they leave it cleanly),
        then the control plane stopped with its data kept. The phase says Hibernating first. Once
        Hibernated no node can have been claimed for it (claims are made only while it is awake),
        so a resync of a sleeping cluster asks the host nothing: it only makes sure nothing runs."""
        phase = vc.status.phase
        if phase not in sleep.HIBERNATION_PHASES:
            await self._finish(vc, status.hibernating(vc.raw, why, now_rfc3339()))
            return
        self._unanswered.pop(vc.meta.uid, None)
        seen = Stopping()
        if phase != "Hibernated":
            unreachable = await self._return_compute(vc)
            if unreachable:
                seen = Stopping(unreachable=unreachable)
        if not seen.unreachable:
            try:
                seen = Stopping(stopped=await runtime.hibernate(vc.raw))
            except RuntimeFailure as e:
                seen = Stopping(failure=e)
        await self._finish(vc, status.hibernated(vc.raw, why, seen, now_rfc3339()))

    # -- imported clusters -----------------------------------------------------------

    async def _check_import(self, vc: VirtualCluster) -> Outcome:
        """Nothing is built: the cluster is reached with its Secret's kubeconfig, and what it answers is
        its status (its version and nodes)."""
        now = now_rfc3339()
        if self.host is None:
            return status.import_failed(vc.raw, "importing a cluster needs a host cluster (its Secret is read "
                                                "there)", now)
        try:
            async with reach(self.host, vc.raw) as cluster:
                version = await cluster.client.get("/version")
                listed = await cluster.client.get("/api/v1/nodes")
        except ImportError_ as e:
            return status.import_failed(vc.raw, str(e), now)
        except (HostError, HostUnavailable) as e:
            return status.import_failed(vc.raw, f"the imported cluster did not answer: {e}", now)
        nodes = [(n["metadata"]["name"], any(c.get("type") == "Ready" and c.get("status") == "True"
                                             for c in (n.get("status") or {}).get("conditions") or []))
                 for n in listed.get("items") or []]
        return status.imported(vc.raw, cluster.server, str(version.get("gitVersion", "")), sorted(nodes), now)

    async def _forget_import(self, vc: VirtualCluster) -> None:
        """Remove what was made in an imported cluster for this VirtualCluster (the credentials' accounts),
        and nothing else there. A cluster that cannot be reached any more keeps them: an Event says so, and
        the deletion goes on (their tokens expire with the credentials)."""
        if self.host is None:
            return
        try:
            async with reach(self.host, vc.raw) as cluster:
                await cluster.forget()
        except (ImportError_, HostError, HostUnavailable) as e:
            await self.events.record(vc.raw, "Warning", "ImportCleanupSkipped", f"could not remove the issued "
                                     f"credentials' accounts from the imported cluster: {e}")

    # -- delete ----------------------------------------------------------------------

    async def _delete(self, vc: VirtualCluster) -> None:
        meta = vc.meta
        self._unanswered.pop(meta.uid, None)
        self.addons.forget(meta.uid)
        self.inactivity.forget(meta.uid)
        if FINALIZER not in meta.finalizers:
            return
        if vc.status.phase != "Deleting":  # the phase says so before the teardown
            await self._finish(vc, status.deleting(vc.raw, now_rfc3339()))
            return
        if import_ref(vc.raw) is not None:
            await self._forget_import(vc)
        unreachable = await self._return_compute(vc)
        if unreachable:
            await self._finish(vc, status.unreachable(vc.raw, NODES_READY, unreachable, now_rfc3339()))
            return
        if self.runtime is not None:
            await self.runtime.teardown(meta.namespace, meta.name)
        if self.secrets is not None:
            await self.secrets.delete(PKI_KIND, meta.namespace, meta.name)
        if self.ranges is not None:
            try:
                await self.ranges.release(vc.raw)
            except (HostUnavailable, HostError) as e:
                _raise_unless_unreachable(e)
                await self._finish(vc, status.unreachable(vc.raw, NODES_READY, str(e), now_rfc3339()))
                return
        remaining = [f for f in meta.finalizers if f != FINALIZER]
        await self._patch(vc, {"metadata": {"finalizers": remaining or None}})
        log.info("deleted %s/%s: control plane removed, finalizer released", meta.namespace, meta.name)

    async def _return_compute(self, vc: VirtualCluster) -> str:
        """Every promoted node and the shared slice go back to the host before the control plane stops
        (the tenant, while it answers, drains them first). '' once all is back; what did not answer
        otherwise. Requeue while the slice's host namespace terminates."""
        try:
            async with self._tenant_admin(vc) as tenant:
                if self.nodes is not None:
                    released = await self.nodes.release_all(vc.raw, tenant)
                    if released:
                        log.info("returned %d node(s) of %s/%s to the host", released, vc.meta.namespace,
                                 vc.meta.name)
                if (self.slices is not None and self.slices.may_hold(vc.raw)
                        and not await self.slices.remove(vc.raw, tenant)):
                    raise Requeue(SLICE_POLL)  # the host namespace is still terminating
        except (HostUnavailable, HostError) as e:
            _raise_unless_unreachable(e)
            return str(e)
        return ""

    @contextlib.asynccontextmanager
    async def _tenant_admin(self, vc: VirtualCluster) -> AsyncIterator[KubeClient | None]:
        """A one-off admin client of the tenant while it has an endpoint and a PKI (None otherwise)."""
        pki = await load_pki(self.secrets, vc.raw) if self.secrets else None
        endpoint = vc.status.endpoint
        tenant = admin_client(pki, endpoint) if endpoint and pki is not None else None
        try:
            yield tenant
        finally:
            if tenant is not None:
                await tenant.close()

    # -- writing ---------------------------------------------------------------------

    async def _finish(self, vc: VirtualCluster, outcome: Outcome) -> None:
        """The pass's one status write (none when nothing but updateTime would change), the event telling
        of a new reason, then what comes next."""
        if _comparable(outcome.status) != _comparable(vc.status.raw):
            new = VirtualCluster(await self._patch(vc, {"status": outcome.status}, "status"))
            if outcome.event is not None and new.status.reason != vc.status.reason:
                await self.events.record(new.raw, *outcome.event)
        if outcome.backoff:
            raise Backoff(outcome.backoff)
        if outcome.requeue_after is not None:
            raise Requeue(outcome.requeue_after)

    async def _patch(self, vc: VirtualCluster, body: Obj, subresource: str = "") -> Obj:
        return await patch_object(self.registry, vc.raw, body, subresource)


async def patch_object(registry: Registry, obj: Obj, body: Obj, subresource: str = "") -> Obj:
    """A merge patch guarded by the object's resourceVersion (a stale view is a 409, retried by the queue)."""
    meta = obj["metadata"]
    body.setdefault("metadata", {})["resourceVersion"] = meta["resourceVersion"]

    async def patched(current: Obj) -> Obj:
        new = merge_patch(current, body)
        unknown = registry.strategy.prune(new)
        if unknown:  # the reconciler writes only what the schema knows: anything else is a bug here
            raise errors.internal(f"the reconciler wrote fields the schema does not know: {', '.join(unknown)}")
        return new
    result = await registry.update_with(meta["namespace"], meta["name"], patched,
                                        WriteOptions(field_manager=FIELD_MANAGER), subresource)
    return result.obj


def _comparable(status: Obj) -> Obj:
    return {k: v for k, v in status.items() if k != "updateTime"}


def _raise_unless_unreachable(e: HostUnavailable | HostError) -> None:
    """A host that did not answer (or answered 5xx/429) is waited for; any other answer is an error."""
    if isinstance(e, HostError) and e.code < 500 and e.code != 429:
        raise e
