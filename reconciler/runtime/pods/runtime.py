"""The ``pods`` runtime: a tenant control plane as workloads in the host cluster (production).

Per VirtualCluster, in its own namespace on the host, every object named ``<vc>-<component>`` and
server-side applied (field manager ``vc-apiserver``), so ``ensure`` converges whatever state it finds
and a second call changes nothing:

- Secrets ``<vc>-etcd``, ``<vc>-apiserver``, ``<vc>-controller-manager``, ``<vc>-scheduler``,
  ``<vc>-admin``: each component mounts only what it uses. The cluster CA key is only in the
  controller-manager's (it signs CSRs); the front-proxy and etcd CA keys are in none.
- etcd: a StatefulSet with a headless Service ``<vc>-etcd`` for its members' names, and a Service
  ``<vc>-etcd-client`` whose cluster IP the apiserver dials, with certificates for both (:mod:`.apply`).
- kube-apiserver, kube-controller-manager, kube-scheduler: Deployments with the flags of
  :mod:`reconciler.runtime.flags`, as the ``process`` runtime's; leader election is on, since a rolling
  update briefly runs two controller-managers or schedulers. The scheduler's stays at zero replicas
  until the tenant has something to schedule (:mod:`reconciler.runtime.scheduling`).
- They start in order, so none crashes into the kubelet's back-off: the apiserver once etcd is ready,
  the others once it answers (:mod:`.startorder`).
- The apiserver is reached through a NodePort Service or on a host port (:mod:`.endpoint`).

Every pod lands on control-plane nodes, and a change of a component's Secret rolls its pods (a hash of
the Secret is a pod-template annotation). Readiness is the tenant apiserver's ``/readyz`` at the
endpoint users get (:mod:`.supervisor`).

A ready tenant is checked every few seconds; ``ensure`` applies its objects only when what they are
built from (the plan, the PKI) changed, and in full every ``reapply_after`` seconds, which undoes
changes made to them on the host. In between a pass asks the tenant's ``/readyz`` and nothing of the host.

Hibernation scales every Deployment and the etcd StatefulSet to zero; Secrets, Services (so the
NodePort) and the etcd volumes (retained on scale-down) stay, and ``ensure`` scales them back. The
apiserver writes its audit log of user requests (:mod:`reconciler.runtime.audit`) to standard output,
read back through the host's pod log API. Snapshots are pods too (:mod:`.backups`).

This module holds the runtime's contract and the memory kept between passes; it builds nothing and
calls the host only through :class:`.host.Host`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from dataclasses import dataclass, field, replace
from typing import ClassVar

from apiserver import IMAGE
from apiserver.kubeclient.client import HostError, HostUnavailable, KubeClient
from apiserver.machinery.timefmt import rfc3339
from certs.tenant import TenantPki
from reconciler.backup.snapshots import Snapshot
from reconciler.runtime import audit
from reconciler.runtime.authz import TenantAuthorizationWebhook
from reconciler.runtime.base import FIELD_MANAGER, ControlPlaneState, Obj, UpgradeOutcome
from reconciler.runtime.passmemo import PassMemo
from reconciler.runtime.pods import supervisor
from reconciler.runtime.pods.apply import apply_all
from reconciler.runtime.pods.backups import Backups, reported
from reconciler.runtime.pods.endpoint import Endpoints
from reconciler.runtime.pods.host import Host
from reconciler.runtime.pods.hostobjects import (
    ETCD_IMAGE,
    KUBERNETES_VERSION,
    MANAGED_BY,
    OWNER,
    HostObjects,
    Plan,
    selector,
    url,
)
from reconciler.runtime.pods.startorder import Stage, StartOrder
from reconciler.runtime.scheduling import Scheduling, was_ready
from reconciler.runtime.tuning import LEAN, TenantTuning
from reconciler.tenantapi import TenantClients

__all__ = ["PodsRuntime"]

REAPPLY_AFTER = 60.0  # seconds a tenant's host objects, applied unchanged, are trusted before a full pass again
AUDIT_TAIL_LINES = 10000  # log lines read back (since the inactivity window began) to find the last user request
# the kinds ensure() creates, or that outlive their owners: what owned() looks for
ROOT_KINDS = ("Deployment", "StatefulSet", "Service", "Secret", "PersistentVolumeClaim")


@dataclass
class PodsRuntime:
    """Tenant control planes as host Deployments/StatefulSets/Services/Secrets, through ``client``."""

    client: KubeClient
    kubernetes_version: str = KUBERNETES_VERSION
    registry: str = "registry.k8s.io"
    etcd_image: str = ETCD_IMAGE
    etcd_replicas: int = 1
    host_port_range: tuple[int, int] = (40000, 49999)
    teardown_timeout: float = 120.0
    backup_image: str = IMAGE  # runs the snapshot and restore pods (it carries etcdutl)
    snapshot_volume_size: str = "10Gi"
    snapshot_storage_class: str | None = None
    tuning: TenantTuning = LEAN
    webhook: TenantAuthorizationWebhook | None = None  # vc-apiserver's credential webhook, as tenant pods reach it
    name: str = "pods"
    # wake -> Ready measured 7 s on the real-node lab (make bench, tests/e2e/test_real_lifecycle.py): pods
    # scheduled, etcd then the apiserver started in order and ready, images already there; twice that, for a
    # busier host
    REPLACES_IN_PLACE: ClassVar[bool] = False  # a Deployment's new pod is ready before the old one leaves
    WAKE_ESTIMATE: ClassVar[int] = 15
    reapply_after: float = REAPPLY_AFTER
    clients: TenantClients = field(default_factory=TenantClients, repr=False)
    scheduling: Scheduling = field(default_factory=Scheduling, repr=False)
    start_order: StartOrder = field(default_factory=StartOrder, repr=False)
    # by tenant: the plan and PKI digest its host objects were last applied from, and (endpoint, port) found
    _applied: PassMemo[tuple[str, int]] = field(default_factory=PassMemo, repr=False)
    host: Host = field(init=False, repr=False)
    endpoints: Endpoints = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.host = Host(self.client)
        self.endpoints = Endpoints(self.host, self.host_port_range)
        # endpoint_host() is synchronous and is asked before the first ensure(): look the
        # control-plane nodes up now, when constructed inside the server's event loop.
        self.endpoints.refresh_in_background()

    @property
    def objects(self) -> HostObjects:
        """What builds every tenant's host objects, from this runtime's images, etcd size and tuning."""
        return HostObjects(self.registry, self.kubernetes_version, self.etcd_image, self.etcd_replicas, self.tuning,
                           self.webhook)

    @property
    def backups(self) -> Backups:
        return Backups(self.host, self.objects, self.backup_image, self.snapshot_volume_size,
                       self.snapshot_storage_class, self.teardown_timeout)

    def endpoint_host(self, vc: Obj) -> str:
        return self.endpoints.address(vc)

    async def refresh_nodes(self) -> None:
        await self.endpoints.refresh_nodes()

    def objects_at(self, version: str, apiserver_version: str = "") -> HostObjects:
        """What builds a tenant's host objects with its Kubernetes components at ``version`` (the apiserver at
        ``apiserver_version`` while an upgrade has moved it first)."""
        return replace(self.objects, kubernetes_version=version or self.kubernetes_version,
                       apiserver_version=apiserver_version)

    async def ensure(self, vc: Obj, pki: TenantPki, version: str = "") -> ControlPlaneState:
        return await self._ensure(vc, pki, self.objects_at(version))

    async def upgrade(self, vc: Obj, pki: TenantPki, version: str, timeout: float) -> UpgradeOutcome:
        """The apiserver's Deployment first (its new pod ready before the old one leaves, as a rollout of it
        always is), then the controller-manager's and the scheduler's."""
        running = str((vc.get("status") or {}).get("kubernetesVersion") or self.kubernetes_version)
        served = False
        for component, objects in (("kube-apiserver", self.objects_at(running, version)),
                                   ("kube-controller-manager", self.objects_at(version))):
            deadline = time.monotonic() + timeout
            while True:
                state = await self._ensure(vc, pki, objects)
                if state.ready and await supervisor.rolled_out(self.host, Plan.of(vc, self.endpoint_host(vc))):
                    answered = await self._version(vc, pki, state.endpoint)
                    served = served or answered == version
                    if answered == version:
                        break
                if time.monotonic() > deadline:
                    return UpgradeOutcome(False, component, f"{component} {version} was not rolled out and ready "
                                                            f"within {timeout:.0f} s: {state.message}", served)
                await asyncio.sleep(1.0)
        return UpgradeOutcome(True, served=True)

    async def roll_back(self, vc: Obj, pki: TenantPki, snapshot: str | None) -> bool:
        """The Deployments back at the version the cluster ran (status.kubernetesVersion): a rollout like any.
        The etcd data of a tenant in pods is restored only into a new cluster (spec.restoreFrom), never in place:
        False."""
        running = str((vc.get("status") or {}).get("kubernetesVersion") or self.kubernetes_version)
        await self._ensure(vc, pki, self.objects_at(running))
        return False

    async def _version(self, vc: Obj, pki: TenantPki, endpoint: str) -> str:
        meta = vc["metadata"]
        try:
            client = await self.clients.get(meta["namespace"], meta["name"], pki, endpoint)
            return str((await client.request("GET", "/version", timeout=2)).get("gitVersion") or "")
        except (HostError, HostUnavailable):
            return ""

    async def _ensure(self, vc: Obj, pki: TenantPki, objects: HostObjects) -> ControlPlaneState:
        await self.endpoints.fresh_nodes()
        plan = Plan.of(vc, self.endpoint_host(vc))
        tenant = (plan.namespace, plan.name)
        scheduling = self.scheduling.known(tenant, vc)
        stage = await self.start_order.stage(self.host, plan, self.etcd_replicas)
        asked = False  # the tenant is asked at most once a pass whether it has something to schedule
        applied = self._applied.recall(tenant, (plan, pki.digest(), scheduling, stage, objects), self.reapply_after)
        if applied is None:
            started = time.monotonic()
            port, service_ip = await self.endpoints.port(self.objects, plan)
            endpoint = url(plan.endpoint_host, port)
            # Known before it is applied, so that a new leader scales nothing down: a scheduler Deployment
            # scaled up (by this server or an earlier leader; hibernation scales it to zero) is the pods
            # runtime's pid file; else the tenant is asked, once it has been ready.
            if not scheduling and await supervisor.scheduler_scaled_up(self.host, plan):
                self.scheduling.start(tenant)
                scheduling = True
            if not scheduling and was_ready(vc):
                asked = True
                scheduling = await self.scheduling.wanted(tenant, vc, await self.clients.get(*tenant, pki, endpoint))
            await apply_all(self.host, objects, plan, pki, endpoint, port, service_ip,
                            self.endpoints.node(plan.endpoint_host), stage, scheduling)
            self._applied.remember(tenant, (plan, pki.digest(), scheduling, stage, objects), started, (endpoint, port))
            applied = endpoint, port
        state = await supervisor.state(self.host, self.clients, plan, pki, *applied)
        if not state.ready:
            self.endpoints.doubt()  # its node may be gone: the next passes may send it to another
        if state.ready and stage < Stage.ALL:
            self.start_order.answered(plan)
            return await self._ensure(vc, pki, objects)  # the apiserver answers: a full pass starts the rest
        if state.ready and not scheduling and not asked and await self.scheduling.wanted(
                tenant, vc, await self.clients.get(*tenant, pki, state.endpoint)):
            return await self._ensure(vc, pki, objects)  # the scheduler is wanted now: a full pass scales it up
        return state

    async def pod_addresses(self, vc: Obj) -> list[tuple[str, int]]:
        plan = Plan.of(vc, self.endpoint_host(vc))
        pods = await self.host.list("Pod", plan.namespace, selector(plan.name, "apiserver"))
        return sorted((p["status"]["podIP"], int(p["spec"]["containers"][0]["ports"][0]["containerPort"]))
                      for p in pods if not p["metadata"].get("deletionTimestamp") and (p.get("status") or {}).get("podIP")
                      and any(c.get("type") == "Ready" and c.get("status") == "True"
                              for c in p["status"].get("conditions") or []))

    async def rolled_out(self, vc: Obj, pki: TenantPki) -> bool:
        return await supervisor.rolled_out(self.host, Plan.of(vc, self.endpoint_host(vc)))

    async def hibernate(self, vc: Obj) -> bool:
        """Scale every workload of the control plane to zero (Secrets, Services and the etcd volumes
        stay); True once none of its pods is left."""
        meta = vc["metadata"]
        await self._forget(meta["namespace"], meta["name"])
        return await supervisor.scale_to_zero(self.host, meta["namespace"], meta["name"])

    async def teardown(self, namespace: str, name: str) -> None:
        """Delete by label, workloads first (so nothing is recreated), until nothing is left or time is up."""
        await self._forget(namespace, name)
        await supervisor.remove_all(self.host, namespace, name, self.teardown_timeout)

    async def snapshots(self, vc: Obj) -> list[Snapshot]:
        """As the last snapshot pod reported them: the files are on the snapshot volume, which only pods reach."""
        return reported(vc)

    async def take_snapshot(self, vc: Obj, snapshot: str, moment: dt.datetime,
                            keep: int) -> tuple[Snapshot, list[Snapshot]]:
        return await self.backups.take(Plan.of(vc, self.endpoint_host(vc)), snapshot, moment, keep)

    async def prune_snapshots(self, vc: Obj, keep: int) -> list[Snapshot]:
        return await self.backups.prune(Plan.of(vc, self.endpoint_host(vc)), keep)

    async def restore(self, vc: Obj, origin: str, snapshot: str, label: str) -> bool:
        return await self.backups.restore(Plan.of(vc, self.endpoint_host(vc)), origin, snapshot, label)

    async def last_request(self, vc: Obj, since: dt.datetime) -> dt.datetime | None:
        """The last audit event in the logs of the running apiserver pods since ``since``."""
        meta = vc["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        latest: dt.datetime | None = None
        for pod in await self.host.list("Pod", namespace, selector(name, "apiserver")):
            if (pod.get("status") or {}).get("phase") != "Running":
                continue
            pod_name = pod["metadata"]["name"]
            containers = (pod.get("spec") or {}).get("containers") or [{}]
            if not audit.audited(containers[0].get("command") or []):
                raise audit.unknown(f"the tenant apiserver pod {pod_name} runs without an audit log (made by an "
                                    f"older vc-apiserver); it gets one when it is replaced")
            lines = (await self.host.log(namespace, pod_name, container="kube-apiserver",
                                         tailLines=str(AUDIT_TAIL_LINES), sinceTime=rfc3339(since))).splitlines()
            found = audit.latest(lines)
            if found is None and len(lines) >= AUDIT_TAIL_LINES:
                raise audit.unknown(f"the log of {pod_name} holds more than {AUDIT_TAIL_LINES} lines since "
                                    f"{rfc3339(since)} and none of the last is a user request")
            if found is not None and (latest is None or found > latest):
                latest = found
        return latest

    async def owned(self) -> list[tuple[str, str]]:
        found: set[tuple[str, str]] = set()
        for kind in ROOT_KINDS:
            for obj in await self.host.list(kind, None, f"{MANAGED_BY}={FIELD_MANAGER},{OWNER}"):
                found.add((obj["metadata"]["namespace"], obj["metadata"]["labels"][OWNER]))
        return sorted(found)

    def usage(self, namespace: str, name: str) -> tuple[float, int] | None:
        return None  # the host's metrics API is not assumed; its pods' usage is the host's to meter

    async def release(self) -> None:
        self._applied.clear()
        self.scheduling.clear()
        self.start_order.clear()
        await self.clients.close()

    async def _forget(self, namespace: str, name: str) -> None:
        """What is kept for a tenant between passes, for one that stops or goes."""
        self.endpoints.forget(namespace, name)
        self._applied.forget((namespace, name))
        self.scheduling.forget((namespace, name))
        self.start_order.forget((namespace, name))
        await self.clients.forget(namespace, name)
