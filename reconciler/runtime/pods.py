"""The ``pods`` runtime: a tenant control plane as workloads in the host cluster (production).

Per VirtualCluster, in its own namespace on the host, every object named
``<vc>-<component>`` and server-side applied (field manager ``vc-apiserver``), so
``ensure`` converges whatever state it finds and a second call changes nothing:

- Secrets ``<vc>-etcd``, ``<vc>-apiserver``, ``<vc>-controller-manager``,
  ``<vc>-scheduler``, ``<vc>-admin``: each component mounts only what it uses. The
  cluster CA key is only in the controller-manager's (it signs CSRs); the
  front-proxy and etcd CA keys are in none.
- etcd: a StatefulSet with a headless Service ``<vc>-etcd`` for peer and client DNS.
  Its serving/peer certificates are minted here from the tenant's etcd CA, because
  the tenant PKI's etcd certificates only name loopback (right for the ``process``
  runtime, wrong for pods reached by DNS); they are kept in the Secret and reused
  until they near expiry or the CA changes.
- kube-apiserver, kube-controller-manager, kube-scheduler: Deployments with the
  flags of :mod:`.flags`, as the ``process`` runtime's; leader election is on, since a
  rolling update briefly runs two controller-managers or schedulers. The scheduler's
  stays at zero replicas until the tenant has something to schedule (:mod:`.scheduling`).
- The apiserver is exposed by a NodePort Service ``<vc>-apiserver`` (port 6443,
  nodePort = ``externalPort`` when set), or with ``hostNetwork`` on a host port
  (``externalPort``, else one allocated from ``host_port_range``) and no Service.

Every pod lands on control-plane nodes, and a change of a component's Secret rolls
its pods (a hash of the Secret is a pod-template annotation). Readiness is the
tenant apiserver's ``/readyz`` at the endpoint users get, never pod status: pods can
be Running while nothing answers.

A ready tenant is checked every few seconds; ``ensure`` applies its objects only when
what they are built from (the plan, the PKI) changed, and in full every
``reapply_after`` seconds, which undoes changes made to them on the host. In between a
pass asks the tenant's ``/readyz`` and nothing of the host.

Hibernation scales every Deployment and the etcd StatefulSet to zero; Secrets,
Services (so the NodePort) and the etcd volumes (retained on scale-down) stay, and
``ensure`` scales them back. The apiserver writes its audit log of user requests
(:mod:`.audit`) to standard output, read back through the host's pod log API.

This module holds the runtime: its host calls, the passes and their memory. The objects
themselves are built in :mod:`.hostobjects`, without a host call; what the host's pods say
while the tenant apiserver does not answer is read in :mod:`.podstatus`.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import logging
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

import aiohttp
from cryptography import x509
from cryptography.exceptions import InvalidSignature

from apiserver import IMAGE
from apiserver.kubeclient import paths
from apiserver.kubeclient.client import HostError, HostUnavailable, KubeClient
from apiserver.machinery.timefmt import rfc3339
from certs import pki as pkilib
from certs.tenant import RENEW_BEFORE, VALIDITY_DAYS, TenantPki
from reconciler.backup.etcd import RESTORE_FAILED, SNAPSHOT_FAILED
from reconciler.backup.results import decode, parse
from reconciler.backup.snapshots import Snapshot
from reconciler.runtime import audit, podbackups
from reconciler.runtime.base import FIELD_MANAGER, ControlPlaneState, Obj, RuntimeFailure
from reconciler.runtime.hostobjects import (
    COMPONENT,
    CONTROL_PLANE_ROLE,
    ETCD_CLIENT,
    ETCD_IMAGE,
    ETCD_PEER,
    KUBERNETES_VERSION,
    MANAGED_BY,
    OWNER,
    HostObjects,
    Plan,
    claim_shape,
    digest,
    url,
)
from reconciler.runtime.passmemo import PassMemo
from reconciler.runtime.podstatus import all_running, pod_problem, pods_summary
from reconciler.runtime.scheduling import Scheduling, was_ready
from reconciler.runtime.tuning import LEAN, TenantTuning
from reconciler.tenantapi import TenantClients

__all__ = ["COMPONENT", "MANAGED_BY", "OWNED_KINDS", "OWNER", "PodsRuntime"]

log = logging.getLogger(__name__)

OWNED_SELECTOR = f"{MANAGED_BY}={FIELD_MANAGER},{OWNER}"
MAX_STS_NAME = 52  # a StatefulSet's name + its revision hash must fit a 63-character label
NODE_CACHE_TTL = 60.0  # seconds an endpoint node address is trusted before it is looked up again
REAPPLY_AFTER = 60.0  # seconds a tenant's host objects, applied unchanged, are trusted before a full pass again
AUDIT_TAIL_LINES = 10000  # log lines read back (since the inactivity window began) to find the last user request

# the kinds ensure() creates, or that outlive their owners: what owned() looks for
ROOT_KINDS = ("Deployment", "StatefulSet", "Service", "Secret", "PersistentVolumeClaim")
# everything a teardown waits to see gone, workloads first (so nothing is recreated)
OWNED_KINDS = ("Deployment", "StatefulSet", "ReplicaSet", "ControllerRevision", "Pod", "Service", "Secret",
               "PersistentVolumeClaim")


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
    name: str = "pods"
    # wake -> Ready measured 43-44 s on the real-node lab (tests/e2e/test_real_lifecycle.py): pods scheduled,
    # etcd then the apiserver started and ready, images already there
    WAKE_ESTIMATE: ClassVar[int] = 45
    _nodes: list[tuple[str, str]] | None = field(default=None, repr=False)  # (node name, InternalIP), by name
    _nodes_at: float = field(default=0.0, repr=False)
    _nodes_task: asyncio.Task[None] | None = field(default=None, repr=False)
    _host_ports: dict[tuple[str, str], int] = field(default_factory=dict, repr=False)  # allocated, not yet seen
    reapply_after: float = REAPPLY_AFTER
    clients: TenantClients = field(default_factory=TenantClients, repr=False)
    scheduling: Scheduling = field(default_factory=Scheduling, repr=False)
    # by tenant: the plan and PKI digest its host objects were last applied from, and (endpoint, port) found
    _applied: PassMemo[tuple[str, int]] = field(default_factory=PassMemo, repr=False)

    def __post_init__(self) -> None:
        # endpoint_host() is synchronous and is asked before the first ensure(): look the
        # control-plane nodes up now, when constructed inside the server's event loop.
        self._refresh_in_background()

    @property
    def objects(self) -> HostObjects:
        """What builds every tenant's host objects, from this runtime's images, etcd size and tuning."""
        return HostObjects(self.registry, self.kubernetes_version, self.etcd_image, self.etcd_replicas, self.tuning)

    # -- the endpoint --------------------------------------------------------------------

    def endpoint_host(self, vc: Obj) -> str:
        """``externalIP`` if set; else the InternalIP of the first control-plane node by name.

        A NodePort answers on every node, so any node address works; a control-plane node
        is chosen because it is stable and is where the tenant's pods run (a hostNetwork
        apiserver prefers that very node). The address is cached and refreshed by
        ``ensure``; until the first lookup has finished this raises a retryable failure.
        """
        external = (vc.get("spec") or {}).get("externalIP")
        if external:
            return str(external)
        if not self._nodes:
            self._refresh_in_background()
            if self._nodes is None:
                raise RuntimeFailure("LookingUpEndpoint", "looking up the host's control-plane nodes for the "
                                                          "tenant apiserver's address; retrying shortly")
            raise RuntimeFailure("NoControlPlaneNode", f"no host node labelled {CONTROL_PLANE_ROLE} has an "
                                                       f"InternalIP; set spec.externalIP or label a node")
        return self._nodes[0][1]

    def _refresh_in_background(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if self._nodes_task is None or self._nodes_task.done():
            self._nodes_task = loop.create_task(self._refresh_quietly(), name="pods-runtime-nodes")

    async def _refresh_quietly(self) -> None:
        try:
            await self.refresh_nodes()
        except (HostError, HostUnavailable) as e:
            log.warning("looking up control-plane nodes: %s", e)

    async def refresh_nodes(self) -> None:
        """Cache (name, InternalIP) of the host's control-plane nodes, sorted by name."""
        nodes = await self.client.get("/api/v1/nodes", labelSelector=CONTROL_PLANE_ROLE)
        found = []
        for node in nodes.get("items", []):
            addresses = (node.get("status") or {}).get("addresses") or []
            ip = next((a["address"] for a in addresses if a.get("type") == "InternalIP"), None)
            if ip:
                found.append((node["metadata"]["name"], ip))
        self._nodes, self._nodes_at = sorted(found), time.monotonic()

    async def _fresh_nodes(self) -> None:
        if self._nodes is None or time.monotonic() - self._nodes_at > NODE_CACHE_TTL:
            try:
                await self.refresh_nodes()
            except (HostError, HostUnavailable) as e:
                if self._nodes is None:
                    raise RuntimeFailure("HostUnavailable", f"listing the host's control-plane nodes: {e}") from None

    # -- host calls ----------------------------------------------------------------------

    async def _call(self, what: str, method: str, path: str, *, tolerate: int | None = None, **kwargs: Any) -> Any:
        """A host request whose failure is explained to the user as a RuntimeFailure. An answer of
        ``tolerate`` is None: 404 to a read or delete of what is gone, 409 to a create of what exists."""
        try:
            return await self.client.request(method, path, **kwargs)
        except HostError as e:
            if e.code == tolerate:
                return None
            raise RuntimeFailure(e.reason or "HostRejected", f"{what}: the host answered {e.code}: {e.message}") \
                from None
        except HostUnavailable as e:
            raise RuntimeFailure("HostUnavailable", f"{what}: {e}") from None

    async def _apply(self, obj: Obj) -> Obj:
        meta = obj["metadata"]
        path = paths.path(obj["kind"], meta["namespace"], meta["name"])
        return await self._call(f"applying {obj['kind']} {meta['namespace']}/{meta['name']}", "PATCH", path,
                                body=obj, content_type="application/apply-patch+yaml",
                                params={"fieldManager": FIELD_MANAGER, "force": "true", "fieldValidation": "Strict"})

    async def _create_if_missing(self, obj: Obj) -> None:
        """For objects made once and never changed after (claims: a spec that cannot shrink): one that
        already exists, ours or a concurrent pass's, is left as it is."""
        meta = obj["metadata"]
        await self._call(f"creating {obj['kind']} {meta['namespace']}/{meta['name']}", "POST",
                         paths.path(obj["kind"], meta["namespace"]), body=obj, params={"fieldManager": FIELD_MANAGER},
                         tolerate=409)

    async def _get(self, kind: str, namespace: str, name: str) -> Obj | None:
        return await self._call(f"reading {kind} {namespace}/{name}", "GET", paths.path(kind, namespace, name),
                                tolerate=404)

    async def _list(self, kind: str, namespace: str | None, selector: str) -> list[Obj]:
        found = await self._call(f"listing {kind}", "GET", paths.path(kind, namespace), params={"labelSelector": selector})
        return list(found.get("items") or [])

    async def _delete(self, kind: str, namespace: str, name: str) -> None:
        await self._call(f"deleting {kind} {namespace}/{name}", "DELETE", paths.path(kind, namespace, name),
                         body={"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"},
                         tolerate=404)

    # -- the contract --------------------------------------------------------------------

    async def ensure(self, vc: Obj, pki: TenantPki) -> ControlPlaneState:
        await self._fresh_nodes()
        plan = self._plan(vc)
        tenant = (plan.namespace, plan.name)
        scheduling = self.scheduling.known(tenant, vc)
        asked = False  # the tenant is asked at most once a pass whether it has something to schedule
        applied = self._applied.recall(tenant, (plan, pki.digest(), scheduling), self.reapply_after)
        if applied is None:
            started = time.monotonic()
            port = await self._apiserver_port(plan)
            endpoint = url(plan.endpoint_host, port)
            # Known before it is applied, so that a new leader scales nothing down: a scheduler Deployment
            # scaled up (by this server or an earlier leader; hibernation scales it to zero) is the pods
            # runtime's pid file; else the tenant is asked, once it has been ready.
            if not scheduling and await self._scheduler_scaled_up(plan):
                self.scheduling.start(tenant)
                scheduling = True
            if not scheduling and was_ready(vc):
                asked = True
                scheduling = await self.scheduling.wanted(tenant, vc, await self.clients.get(*tenant, pki, endpoint))
            secrets = await self._secrets(plan, pki, endpoint, port)
            for secret in secrets.values():
                await self._apply(secret)
            hashes = {c: digest(s["data"]) for c, s in secrets.items()}
            await self._apply(self.objects.etcd_service(plan))
            await self._apply(await self._etcd(plan, hashes["etcd"]))
            await self._apply(self._apiserver(plan, port, hashes["apiserver"]))
            await self._apply(self.objects.controller_manager(plan, hashes["controller-manager"]))
            await self._apply(self.objects.scheduler(plan, hashes["scheduler"], scheduling))
            self._applied.remember(tenant, (plan, pki.digest(), scheduling), started, (endpoint, port))
            applied = endpoint, port
        state = await self._state(plan, pki, *applied)
        if state.ready and not scheduling and not asked and await self.scheduling.wanted(
                tenant, vc, await self.clients.get(*tenant, pki, state.endpoint)):
            return await self.ensure(vc, pki)  # the scheduler is wanted now: a full pass scales it up
        return state

    async def _scheduler_scaled_up(self, plan: Plan) -> bool:
        found = await self._get("Deployment", plan.namespace, plan.object_name("scheduler"))
        return bool(found) and ((found.get("spec") or {}).get("replicas") or 0) > 0

    async def release(self) -> None:
        self._applied.clear()
        self.scheduling.clear()
        await self.clients.close()

    async def _forget(self, namespace: str, name: str) -> None:
        """What is kept for a tenant between passes, for one that stops or goes."""
        self._host_ports.pop((namespace, name), None)
        self._applied.forget((namespace, name))
        self.scheduling.forget((namespace, name))
        await self.clients.forget(namespace, name)

    async def teardown(self, namespace: str, name: str) -> None:
        """Delete by label, workloads first (so nothing is recreated), until nothing is left or time is up."""
        selector = f"{MANAGED_BY}={FIELD_MANAGER},{OWNER}={name}"
        await self._forget(namespace, name)
        deadline = time.monotonic() + self.teardown_timeout
        while True:
            left = [(kind, obj) for kind in OWNED_KINDS for obj in await self._list(kind, namespace, selector)]
            if not left:
                return
            if time.monotonic() > deadline:
                names = ", ".join(f"{k} {o['metadata']['name']}" for k, o in left[:10])
                raise RuntimeFailure("TeardownIncomplete",
                                     f"after {self.teardown_timeout:.0f}s these still exist in {namespace}: {names}")
            for kind, obj in left:
                if not obj["metadata"].get("deletionTimestamp"):
                    await self._delete(kind, namespace, obj["metadata"]["name"])
            await asyncio.sleep(0.5)

    async def hibernate(self, vc: Obj) -> bool:
        """Scale every workload of the control plane to zero (Secrets, Services and the etcd volumes
        stay); True once none of its pods is left."""
        meta = vc["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        selector = f"{MANAGED_BY}={FIELD_MANAGER},{OWNER}={name}"
        await self._forget(namespace, name)
        for kind in ("Deployment", "StatefulSet"):
            for obj in await self._list(kind, namespace, selector):
                if (obj.get("spec") or {}).get("replicas") != 0:
                    await self._call(f"scaling {kind} {namespace}/{obj['metadata']['name']} to zero", "PATCH",
                                     paths.path(kind, namespace, obj["metadata"]["name"]), body={"spec": {"replicas": 0}},
                                     content_type="application/merge-patch+json",
                                     params={"fieldManager": FIELD_MANAGER})
        return not await self._list("Pod", namespace, selector)

    async def snapshots(self, vc: Obj) -> list[Snapshot]:
        """As the last snapshot pod reported them (the VirtualCluster's status.backups): the files are on
        the snapshot volume, which only pods reach."""
        return [Snapshot(str(b.get("name")), str(b.get("time")), int(b.get("revision") or 0),
                         int(b.get("sizeBytes") or 0), "" if b.get("verified") else "failed verification")
                for b in (vc.get("status") or {}).get("backups") or []]

    async def take_snapshot(self, vc: Obj, snapshot: str, moment: dt.datetime,
                            keep: int) -> tuple[Snapshot, list[Snapshot]]:
        plan = self._plan(vc)
        endpoint = f"https://{plan.etcd_service_dns}:{ETCD_CLIENT}"
        args = podbackups.save_args(plan.namespace, plan.name, snapshot,
                                    moment.astimezone(dt.UTC).isoformat(), keep, endpoint)
        result = await self._backup_pod(plan, "snapshot", args, [
            podbackups.etcd_client_volume(plan.object_name("apiserver"))], [
            {"name": "etcd-client", "mountPath": podbackups.CERTS, "readOnly": True}])
        return decode([result["taken"]])[0], decode(result["kept"])

    async def prune_snapshots(self, vc: Obj, keep: int) -> list[Snapshot]:
        plan = self._plan(vc)
        result = await self._backup_pod(plan, "prune", podbackups.prune_args(plan.namespace, plan.name, keep))
        return decode(result["kept"])

    async def restore(self, vc: Obj, origin: str, snapshot: str, label: str) -> bool:
        """Each etcd member's data claim, made before the StatefulSet that adopts it by name, written by a
        restore pod from the snapshot volume. Nothing once the StatefulSet exists."""
        plan = self._plan(vc)
        if await self._get("StatefulSet", plan.namespace, plan.object_name("etcd")) is not None:
            return False
        restored = False
        for i, member in enumerate(self.objects.members(plan)):
            claim = plan.data_claim()
            claim_name = f"{claim['metadata']['name']}-{member}"
            await self._create_if_missing({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                           "metadata": {**claim["metadata"], "name": claim_name,
                                                        "namespace": plan.namespace},
                                           "spec": claim["spec"]})
            args = podbackups.restore_args(plan.namespace, origin, snapshot, label, member,
                                           f"https://{plan.etcd_member(i)}:{ETCD_PEER}", self.objects.initial_cluster(plan),
                                           plan.cluster_token)
            result = await self._backup_pod(plan, f"restore-{i}", args, [
                {"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}], [
                {"name": "data", "mountPath": podbackups.DATA_MOUNT}], reason=RESTORE_FAILED, read_only=True)
            restored |= bool(result.get("restored"))
        if restored:
            log.info("restored %s into %s/%s", label, plan.namespace, plan.name)
        return restored

    async def _backup_pod(self, plan: Plan, verb: str, args: list[str], volumes: list[Obj] | None = None,
                          mounts: list[Obj] | None = None, reason: str = SNAPSHOT_FAILED,
                          read_only: bool = False) -> Obj:
        """Run one ``python -m reconciler.backup`` pod on the snapshot volume to its end and return what
        it reported. One of a kind per VirtualCluster at a time: one left by a pass cut short is removed
        first (what it left half-written is swept by the next). Raises RuntimeFailure (``reason``)."""
        name = plan.object_name("backup") + f"-{verb}"
        if not await self._snapshot_claim(plan, create=not read_only):
            raise RuntimeFailure(reason, f"this namespace has no snapshots: its snapshot volume "
                                         f"{podbackups.SNAPSHOT_CLAIM} does not exist")
        await self._delete_and_wait("Pod", plan.namespace, name)
        container = podbackups.container(self.backup_image, args, [
            {"name": "snapshots", "mountPath": podbackups.SNAPSHOT_ROOT, "readOnly": read_only}, *(mounts or [])])
        spec = {**self.objects.pod_spec(plan, "backup", container, [podbackups.snapshot_volume(read_only), *(volumes or [])]),
                "restartPolicy": "Never"}
        await self._call(f"creating pod {plan.namespace}/{name}", "POST", paths.path("Pod", plan.namespace),
                         body={"apiVersion": "v1", "kind": "Pod", "metadata": self.objects.meta(plan, "backup", f"-{verb}"),
                               "spec": spec}, params={"fieldManager": FIELD_MANAGER})
        try:
            pod = await self._wait_finished(plan.namespace, name, reason)
            log_text = await self._call(f"reading the log of pod {plan.namespace}/{name}", "GET",
                                        paths.path("Pod", plan.namespace, name) + "/log", raw=True)
        finally:
            await self._delete("Pod", plan.namespace, name)
        said = log_text.decode(errors="replace")
        result = parse(said)
        if result is None:
            last = said.strip().splitlines()[-1:] or ["no output"]
            raise RuntimeFailure(reason, f"pod {plan.namespace}/{name} ended {pod['status'].get('phase')} without a "
                                         f"result: {last[0][-300:]}")
        if "reason" in result:
            raise RuntimeFailure(str(result["reason"]), str(result.get("message")))
        return result

    async def _wait_finished(self, namespace: str, name: str, reason: str) -> Obj:
        deadline = time.monotonic() + podbackups.BACKUP_TIMEOUT
        while True:
            pod = await self._get("Pod", namespace, name)
            if pod is None:
                raise RuntimeFailure(reason, f"pod {namespace}/{name} was deleted before it finished")
            phase = (pod.get("status") or {}).get("phase")
            if phase in ("Succeeded", "Failed"):
                return pod
            problem, failing = pod_problem(pod)
            if failing or time.monotonic() > deadline:
                raise RuntimeFailure(reason, f"pod {namespace}/{name} did not finish: {problem}")
            await asyncio.sleep(podbackups.POLL)

    async def _delete_and_wait(self, kind: str, namespace: str, name: str) -> None:
        deadline = time.monotonic() + self.teardown_timeout
        while await self._get(kind, namespace, name) is not None:
            if time.monotonic() > deadline:
                raise RuntimeFailure("TeardownIncomplete", f"{kind} {namespace}/{name} is still there after "
                                                           f"{self.teardown_timeout:.0f}s")
            await self._delete(kind, namespace, name)
            await asyncio.sleep(podbackups.POLL)

    async def _snapshot_claim(self, plan: Plan, create: bool) -> bool:
        """Whether the namespace's snapshot claim exists, made when ``create``: once per namespace and
        left alone after (a claim's spec cannot shrink, and it outlives every VirtualCluster whose
        snapshots it holds)."""
        if await self._get("PersistentVolumeClaim", plan.namespace, podbackups.SNAPSHOT_CLAIM) is not None:
            return True
        if not create:
            return False
        await self._create_if_missing(podbackups.snapshot_claim(
            plan.namespace, {MANAGED_BY: FIELD_MANAGER}, self.snapshot_volume_size, self.snapshot_storage_class))
        return True

    async def last_request(self, vc: Obj, since: dt.datetime) -> dt.datetime | None:
        """The last audit event in the logs of the running apiserver pods since ``since``."""
        meta = vc["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        selector = f"{MANAGED_BY}={FIELD_MANAGER},{OWNER}={name},{COMPONENT}=apiserver"
        latest: dt.datetime | None = None
        for pod in await self._list("Pod", namespace, selector):
            if (pod.get("status") or {}).get("phase") != "Running":
                continue
            pod_name = pod["metadata"]["name"]
            containers = (pod.get("spec") or {}).get("containers") or [{}]
            if not audit.audited(containers[0].get("command") or []):
                raise audit.unknown(f"the tenant apiserver pod {pod_name} runs without an audit log (made by an "
                                    f"older vc-apiserver); it gets one when it is replaced")
            text = await self._call(f"reading the log of pod {namespace}/{pod_name}", "GET",
                                    paths.path("Pod", namespace, pod_name) + "/log", raw=True,
                                    params={"container": "kube-apiserver", "tailLines": str(AUDIT_TAIL_LINES),
                                            "sinceTime": rfc3339(since)})
            lines = text.decode(errors="replace").splitlines()
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
            for obj in await self._list(kind, None, OWNED_SELECTOR):
                found.add((obj["metadata"]["namespace"], obj["metadata"]["labels"][OWNER]))
        return sorted(found)

    # -- planning ------------------------------------------------------------------------

    def _plan(self, vc: Obj) -> Plan:
        meta, spec = vc["metadata"], vc.get("spec") or {}
        shape = spec.get("kubeInKubeConfig") or {}
        name = meta["name"]
        if len(f"{name}-etcd") > MAX_STS_NAME:
            raise RuntimeFailure("NameTooLong", f"the pods runtime names host objects <name>-etcd, which must be at "
                                                f"most {MAX_STS_NAME} characters; use a name of at most "
                                                f"{MAX_STS_NAME - 5}")
        return Plan(namespace=meta["namespace"], name=name, endpoint_host=self.endpoint_host(vc),
                     host_network=shape.get("apiServerServiceType") == "hostNetwork",
                     replicas=int(shape.get("apiServerReplicas") or 1),
                     external_port=int(shape["externalPort"]) if shape.get("externalPort") else None,
                     storage_class=shape.get("etcdStorageClass") or None,
                     storage_size=str(shape.get("etcdUnitSize") or "1Gi"))

    async def _apiserver_port(self, plan: Plan) -> int:
        """The port users reach: the Service's nodePort, or the apiserver's host port with hostNetwork."""
        if not plan.host_network:
            service = await self._apply(self.objects.apiserver_service(plan))
            return int(service["spec"]["ports"][0]["nodePort"])
        await self._delete("Service", plan.namespace, plan.object_name("apiserver"))  # left by a NodePort spec
        if plan.external_port:
            return plan.external_port
        return await self._allocate_host_port(plan)

    async def _allocate_host_port(self, plan: Plan) -> int:
        """Keep the port this tenant has; else the first one no other hostNetwork tenant apiserver uses."""
        key = (plan.namespace, plan.name)
        taken: set[int] = set()
        for deploy in await self._list("Deployment", None, f"{MANAGED_BY}={FIELD_MANAGER},{COMPONENT}=apiserver"):
            pod = deploy["spec"]["template"]["spec"]
            if not pod.get("hostNetwork"):
                continue
            port = int(pod["containers"][0]["ports"][0]["containerPort"])
            if (deploy["metadata"]["namespace"], deploy["metadata"]["labels"].get(OWNER)) == key:
                return port
            taken.add(port)
        taken |= {port for other, port in self._host_ports.items() if other != key}
        if self._host_ports.get(key, 0) not in taken | {0}:
            return self._host_ports[key]
        low, high = self.host_port_range
        for port in range(low, high + 1):
            if port not in taken:
                self._host_ports[key] = port  # no await since the list: no race
                return port
        raise RuntimeFailure("NoFreeHostPorts", f"every host port in {low}-{high} is used by a hostNetwork tenant "
                                                f"apiserver; set kubeInKubeConfig.externalPort")

    # -- secrets and workloads -----------------------------------------------------------

    async def _secrets(self, plan: Plan, pki: TenantPki, endpoint: str, port: int) -> dict[str, Obj]:
        return self.objects.secrets(plan, pki, endpoint, port, await self._etcd_certs(plan, pki))

    async def _etcd_certs(self, plan: Plan, pki: TenantPki) -> dict[str, bytes | str]:
        """etcd serving and peer certificates for its DNS names: the ones in the Secret while still good."""
        hosts = [f"*.{plan.etcd_service_dns}", f"*.{plan.etcd_service_dns}.cluster.local", plan.etcd_service_dns,
                 "localhost", "127.0.0.1"]
        existing = await self._get("Secret", plan.namespace, plan.object_name("etcd"))
        old = {k: base64.b64decode(v) for k, v in ((existing or {}).get("data") or {}).items()}
        out: dict[str, bytes | str] = {"etcd-ca.crt": pki.files["etcd-ca.crt"]}
        for stem in ("etcd-server", "etcd-peer"):
            crt, key = old.get(f"{stem}.crt"), old.get(f"{stem}.key")
            if crt is None or key is None or not _still_good(crt, pki.cert("etcd-ca"), hosts):
                pair = await asyncio.to_thread(pkilib.new_leaf, pki.pair("etcd-ca"), stem, hosts=hosts,
                                               usages=(pkilib.SERVER_AUTH, pkilib.CLIENT_AUTH), days=VALIDITY_DAYS)
                crt, key = pair.cert_pem, pair.key_pem
            out[f"{stem}.crt"], out[f"{stem}.key"] = crt, key
        return out

    async def _etcd(self, plan: Plan, pki_hash: str) -> Obj:
        claim = plan.data_claim()
        existing = await self._get("StatefulSet", plan.namespace, plan.object_name("etcd"))
        claims = [claim]
        if existing is not None and existing["spec"].get("volumeClaimTemplates"):
            # claim templates are immutable: a changed etcdStorageClass/etcdUnitSize cannot reach a running etcd
            claims = existing["spec"]["volumeClaimTemplates"]
            if claim_shape(claims[0]) != claim_shape(claim):
                log.warning("%s/%s: etcd volumes keep %s; the spec's %s applies to new clusters only",
                            plan.namespace, plan.name, claim_shape(claims[0]), claim_shape(claim))
        return self.objects.etcd(plan, pki_hash, claims)

    def _apiserver(self, plan: Plan, host_port: int, pki_hash: str) -> Obj:
        node = next((n for n, ip in self._nodes or [] if ip == plan.endpoint_host), None)
        return self.objects.apiserver(plan, host_port, pki_hash, node)

    # -- readiness -----------------------------------------------------------------------

    async def _state(self, plan: Plan, pki: TenantPki, endpoint: str, port: int) -> ControlPlaneState:
        """Ready only when the tenant apiserver says so at the endpoint; otherwise say what is known."""
        client = await self.clients.get(plan.namespace, plan.name, pki, endpoint)
        try:
            await client.request("GET", "/readyz", timeout=3)
            return ControlPlaneState(True, "ControlPlaneRunning", f"tenant apiserver ready at {endpoint}",
                                     endpoint, port)
        except HostError as e:
            answer = f"the tenant apiserver at {endpoint} is not ready yet ({e.code}: {e.message[:200]})"
        except HostUnavailable as e:
            answer = f"the tenant apiserver did not answer at {endpoint} ({_cause(e)})"
        pods = await self._list("Pod", plan.namespace, plan.selector)
        reason, summary = pods_summary(pods)
        return ControlPlaneState(False, reason, f"{answer}; {summary}", endpoint, port,
                                 unanswered=all_running(pods))


def _still_good(crt: bytes, ca: x509.Certificate, hosts: list[str]) -> bool:
    """Issued by this CA, naming these hosts, and not about to expire."""
    try:
        cert = pkilib.load_cert(crt)
        cert.verify_directly_issued_by(ca)
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, TypeError, x509.ExtensionNotFound, InvalidSignature):
        return False
    named = {str(n) for n in sans.get_values_for_type(x509.DNSName)} | {
        str(ip) for ip in sans.get_values_for_type(x509.IPAddress)}
    return set(hosts) <= named and cert.not_valid_after_utc - dt.datetime.now(dt.UTC) > RENEW_BEFORE


def _cause(e: HostUnavailable) -> str:
    """The short why of a failed connection: refused, timed out, no route, TLS."""
    cause = e.__cause__
    if isinstance(cause, TimeoutError):
        return "no answer in time"
    if isinstance(cause, aiohttp.ClientConnectorError):
        return f"{type(cause.os_error).__name__}: {cause.os_error.strerror or cause.os_error}"
    return f"{type(cause).__name__}: {cause}" if cause is not None else str(e)


