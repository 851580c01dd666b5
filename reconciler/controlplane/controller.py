"""The control-plane controller: each VirtualCluster gets a tenant control plane, and loses it on delete.

Phases as API.md says: ``Pending`` (accepted) → ``Preparing`` (PKI and components
being built) → ``Initialized`` (control plane ready, nodes joining) → ``Completed``;
``Deleting`` during teardown, after which the finalizer is removed. Failures are
reported in conditions and retried with back-off; no phase is a dead end.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from typing import Any

from apiserver.apis.resource import FINALIZER
from apiserver.kubeclient.client import HostError, HostUnavailable
from apiserver.kubeclient.events import EventRecorder
from apiserver.machinery import errors
from apiserver.registry.store import Registry
from apiserver.storage.secrets import PKI_KIND, SecretStore, load_pki
from certs import tenant as tenantpki
from certs.tenant import TenantPki
from reconciler.controlplane.status import StatusWriter, get_condition, patch_object
from reconciler.controlplane.tenant import admin_client, bootstrap_tenant
from reconciler.nodes.promoter import NodePromoter
from reconciler.nodes.selection import requests_nodes
from reconciler.runtime.base import ControlPlaneRuntime, ControlPlaneState, RuntimeFailure
from reconciler.runtime.process import SERVICE_CIDR

log = logging.getLogger(__name__)

Obj = dict[str, Any]

NO_RUNTIME_REASON = "NoControlPlaneRuntime"
NO_RUNTIME_MESSAGE = "no control-plane runtime is configured (--control-plane-runtime); the control plane will not be built"
NO_PROMOTION_REASON = "NodePromotionUnavailable"
POLL = 0.25  # seconds between readiness checks while a control plane starts
HEALTH_CHECK = 5.0  # seconds between checks of a ready control plane
NODE_POLL = 1.0  # seconds between passes while nodes join
READINESS_FAILURES = 3  # consecutive unanswered checks before a ready control plane is reported unready
READINESS_RECHECK = 1.0  # seconds until the next check after an unanswered one


@dataclass
class Requeue(Exception):
    """Not an error: look again after ``after`` seconds."""

    after: float


class Backoff(Exception):
    """Something outside the server (the host, a tenant apiserver) did not answer; the status already
    says so, and the work queue retries with exponential back-off."""


UNREACHABLE_REASON = "HostUnreachable"


def service_ip(cidr: str = SERVICE_CIDR) -> str:
    base, _ = cidr.split("/")
    parts = base.split(".")
    return ".".join([*parts[:3], str(int(parts[3]) + 1)])


class ControlPlaneController:
    def __init__(self, registry: Registry, runtime: ControlPlaneRuntime | None, secrets: SecretStore | None,
                 events: EventRecorder, nodes: NodePromoter | None = None) -> None:
        self.registry = registry
        self.nodes = nodes
        self.runtime = runtime
        self.secrets = secrets
        self.events = events
        self._unanswered: dict[str, int] = {}  # by uid: consecutive unanswered checks of a ready control plane

    async def reconcile(self, namespace: str, name: str) -> None:
        try:
            obj = await self.registry.get(namespace, name)
        except errors.ApiError as e:
            if e.code == 404:
                return
            raise
        if obj["metadata"].get("deletionTimestamp"):
            await self._delete(obj)
        elif self.runtime is None or self.secrets is None:
            await self._no_runtime(obj)
        else:
            await self._build(obj, self.runtime, self.secrets)

    # -- build -----------------------------------------------------------------------

    async def _pki(self, obj: Obj, runtime: ControlPlaneRuntime, secrets: SecretStore) -> TenantPki:
        meta = obj["metadata"]
        spec = obj.get("spec") or {}
        external = [spec["externalIP"]] if spec.get("externalIP") else []
        sans = tenantpki.apiserver_sans(runtime.endpoint_host(obj), [*external, *(spec.get("externalIps") or [])],
                                        service_ip())
        current = await load_pki(secrets, obj)
        if current is not None:
            if not current.needs_renewal() and set(sans) <= current.sans():
                return current
            log.info("renewing the PKI of %s/%s", meta["namespace"], meta["name"])
        fresh = await asyncio.to_thread(tenantpki.generate, sans, current)
        await secrets.put(PKI_KIND, meta["namespace"], meta["name"],
                          {**fresh.files, "uid": meta.get("uid", "").encode()})
        return fresh

    async def _build(self, obj: Obj, runtime: ControlPlaneRuntime, secrets: SecretStore) -> None:
        status = obj.get("status") or {}
        cp_ready = get_condition(obj, "ControlPlaneReady")
        if not status.get("phase"):
            writer = StatusWriter(self.registry, obj)
            writer.phase("Pending", "Accepted", "the virtual cluster was accepted; its control plane will be built")
            for type_ in ("ControlPlaneReady", "NodesReady", "Ready"):
                writer.condition(type_, False, "Pending", "the control plane has not been built yet")
            obj = await writer.write()
            await self.events.record(obj, "Normal", "Accepted", "virtual cluster accepted")
        writer = StatusWriter(self.registry, obj)
        if cp_ready is None or cp_ready.get("status") != "True":
            writer.phase("Preparing", "BuildingControlPlane", f"building the control plane ({runtime.name} runtime)")
        try:
            pki = await self._pki(obj, runtime, secrets)
            state = await runtime.ensure(obj, pki)
            state = self._tolerate_a_missed_check(obj, state, cp_ready)
            if state.ready and (cp_ready is None or cp_ready.get("status") != "True"):
                await bootstrap_tenant(pki, state.endpoint)
        except RuntimeFailure as e:
            writer.phase("Preparing", e.reason, e.message)
            writer.condition("ControlPlaneReady", False, e.reason, e.message)
            writer.condition("Ready", False, e.reason, e.message)
            await self._write_and_report(obj, writer, "Warning", e.reason, e.message)
            raise Requeue(10.0) from None
        writer.set(controlPlaneEndpoint=state.endpoint, port=state.port)
        if not state.ready:
            writer.condition("ControlPlaneReady", False, state.reason, state.message)
            writer.condition("Ready", False, state.reason, state.message)
            if state.reason != "Starting":
                writer.phase("Preparing", state.reason, state.message)
            await self._write_and_report(obj, writer, "Warning" if state.reason != "Starting" else "Normal",
                                         state.reason, state.message)
            raise Requeue(POLL)
        writer.condition("ControlPlaneReady", True, state.reason, state.message)
        wants_nodes = requests_nodes(obj.get("spec") or {})
        if self.nodes is not None and wants_nodes:
            await self._promote_or_back_off(obj, writer, pki, state.endpoint, self.nodes)
        elif not wants_nodes:
            if self.nodes is not None and (obj.get("status") or {}).get("nodes"):
                await self._promote_or_back_off(obj, writer, pki, state.endpoint, self.nodes)  # scaled to zero
            writer.set(nodes=[])
            writer.condition("NodesReady", True, "NoNodesRequested", "the spec asks for no nodes")
            writer.condition("Ready", True, "Ready", f"control plane ready at {state.endpoint}")
            writer.phase("Completed", "Ready", f"control plane ready at {state.endpoint}")
        else:
            message = (f"the spec asks for nodes but no node joiner is configured (a host cluster, and the "
                       f"process runtime or --node-joiner=agent); the control plane is ready at {state.endpoint}")
            writer.condition("NodesReady", False, NO_PROMOTION_REASON, message)
            writer.condition("Ready", False, NO_PROMOTION_REASON, message)
            writer.phase("Initialized", NO_PROMOTION_REASON, message)
        await self._write_and_report(obj, writer, "Normal", writer.status.get("reason", "ControlPlaneReady"),
                                     writer.status.get("message", state.message))
        if writer.status.get("phase") == "Completed":
            raise Requeue(HEALTH_CHECK)  # a ready control plane is still watched: crashed components come back
        raise Requeue(NODE_POLL)  # nodes are still joining, draining or awaited

    def _tolerate_a_missed_check(self, obj: Obj, state: ControlPlaneState, cp_ready: Obj | None) -> ControlPlaneState:
        """A ready control plane whose components all run stays ready until its apiserver misses
        ``READINESS_FAILURES`` checks in a row, and is then reported as not answering until it does;
        a crashed component is reported at once."""
        uid = obj["metadata"].get("uid", "")
        misses = self._unanswered.get(uid)
        was_ready = cp_ready is not None and cp_ready.get("status") == "True"
        if state.ready or not state.unanswered or (misses is None and not was_ready):
            self._unanswered.pop(uid, None)
            return state
        misses = self._unanswered[uid] = (misses or 0) + 1
        if misses < READINESS_FAILURES:
            meta = obj["metadata"]
            log.info("tenant apiserver of %s/%s did not answer its readiness check (%d of %d)",
                     meta["namespace"], meta["name"], misses, READINESS_FAILURES)
            raise Requeue(READINESS_RECHECK)
        return replace(state, reason="ApiserverUnreachable",
                       message=f"the tenant apiserver at {state.endpoint} stopped answering its readiness checks "
                               f"({READINESS_FAILURES} missed in a row); its components are running")

    async def _promote_or_back_off(self, obj: Obj, writer: StatusWriter, pki: TenantPki, endpoint: str,
                                   nodes: NodePromoter) -> None:
        try:
            await self._promote(obj, writer, pki, endpoint, nodes)
        except (HostUnavailable, HostError) as e:
            if isinstance(e, HostError) and e.code < 500 and e.code != 429:
                raise
            await self._unreachable(obj, writer, "NodesReady", e)

    async def _unreachable(self, obj: Obj, writer: StatusWriter, condition: str, e: Exception) -> None:
        """Say in the status that the host (or the tenant) is not answering, then back off."""
        message = f"waiting for the host or tenant apiserver to answer: {e}"
        writer.condition(condition, False, UNREACHABLE_REASON, message)
        writer.condition("Ready", False, UNREACHABLE_REASON, message)
        writer.phase((obj.get("status") or {}).get("phase") or "Pending", UNREACHABLE_REASON, message)
        await self._write_and_report(obj, writer, "Warning", UNREACHABLE_REASON, message)
        raise Backoff(message) from None

    async def _promote(self, obj: Obj, writer: StatusWriter, pki: TenantPki, endpoint: str,
                       nodes: NodePromoter) -> None:
        """Nodes follow the spec; the phase says where that stands."""
        tenant = admin_client(pki, endpoint)
        try:
            report = await nodes.reconcile(obj, tenant)
        finally:
            await tenant.close()
        writer.set(nodes=report.nodes)
        previous = (obj.get("status") or {}).get("phase")
        counts = f"{report.ready}/{len(report.nodes)} promoted nodes ready"
        if report.complete:
            if report.nodes:
                writer.condition("NodesReady", True, "NodesReady", counts)
            else:
                writer.condition("NodesReady", True, "NoNodesRequested", "the spec asks for no nodes")
            writer.condition("Ready", True, "Ready", f"control plane ready at {endpoint}; {counts}")
            writer.phase("Completed", "Ready", f"control plane ready at {endpoint}; {counts}")
            return
        problems = "; ".join(report.shortages + report.waiting)
        reason = "InsufficientNodes" if report.shortages else "NodesJoining"
        writer.condition("NodesReady", False, reason, f"{counts}: {problems}")
        writer.condition("Ready", False, reason, f"{counts}: {problems}")
        if report.shortages and not report.nodes:
            writer.phase("Pending", reason, f"waiting for nodes: {problems}")
        elif previous in ("Completed", "Updating"):
            writer.phase("Updating", reason, f"{counts}: {problems}")
        else:
            writer.phase("Initialized", reason, f"{counts}: {problems}")

    async def _write_and_report(self, obj: Obj, writer: StatusWriter, type_: str, reason: str, message: str) -> None:
        before = (obj.get("status") or {}).get("reason")
        new = await writer.write()
        if (new.get("status") or {}).get("reason") != before:
            await self.events.record(new, type_, reason, message)

    async def _no_runtime(self, obj: Obj) -> None:
        writer = StatusWriter(self.registry, obj)
        writer.phase("Pending", NO_RUNTIME_REASON, NO_RUNTIME_MESSAGE)
        for type_ in ("ControlPlaneReady", "NodesReady", "Ready"):
            writer.condition(type_, False, NO_RUNTIME_REASON, NO_RUNTIME_MESSAGE)
        await writer.write()

    # -- delete ----------------------------------------------------------------------

    async def _release_nodes(self, obj: Obj, nodes: NodePromoter) -> None:
        """Every node goes back before the control plane goes away (the tenant drains them first)."""
        meta = obj["metadata"]
        tenant = None
        endpoint = (obj.get("status") or {}).get("controlPlaneEndpoint")
        pki = await load_pki(self.secrets, obj) if self.secrets else None
        if endpoint and pki is not None:
            tenant = admin_client(pki, endpoint)
        try:
            released = await nodes.release_all(obj, tenant)
        finally:
            if tenant is not None:
                await tenant.close()
        if released:
            log.info("returned %d node(s) of %s/%s to the host", released, meta["namespace"], meta["name"])

    async def _delete(self, obj: Obj) -> None:
        meta = obj["metadata"]
        self._unanswered.pop(meta.get("uid", ""), None)
        if FINALIZER not in (meta.get("finalizers") or []):
            return
        if (obj.get("status") or {}).get("phase") != "Deleting":
            writer = StatusWriter(self.registry, obj)
            writer.phase("Deleting", "TearingDown", "removing the control plane")
            obj = await writer.write()
            await self.events.record(obj, "Normal", "Deleting", "removing the control plane")
        if self.nodes is not None:
            try:
                await self._release_nodes(obj, self.nodes)
            except (HostUnavailable, HostError) as e:
                if isinstance(e, HostError) and e.code < 500 and e.code != 429:
                    raise
                await self._unreachable(obj, StatusWriter(self.registry, obj), "NodesReady", e)
        if self.runtime is not None:
            await self.runtime.teardown(meta["namespace"], meta["name"])
        if self.secrets is not None:
            await self.secrets.delete(PKI_KIND, meta["namespace"], meta["name"])
        remaining = [f for f in meta.get("finalizers") or [] if f != FINALIZER]
        await patch_object(self.registry, obj, {"metadata": {"finalizers": remaining or None}})
        log.info("deleted %s/%s: control plane removed, finalizer released", meta["namespace"], meta["name"])
