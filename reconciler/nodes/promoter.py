"""Node promotion: host nodes move into a tenant by claim, cordon, drain and join, and always come back.

The claim lives on the host Node itself (label + annotations, written with a
resourceVersion precondition, so two VirtualClusters or two replicas can never
claim one node); nothing else needs to be consulted after a crash. Release undoes
every step: drain and remove the node in the tenant, then untaint, uncordon (only
if we cordoned it) and unlabel it in the host.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from apiserver.apis.virtualcluster import VirtualCluster
from apiserver.kubeclient.client import HostError, HostUnavailable, KubeClient
from apiserver.kubeclient.events import EventRecorder
from apiserver.machinery import errors
from apiserver.machinery.jsonutil import Obj
from apiserver.machinery.selectors import LabelSelector, parse_label_selector
from apiserver.machinery.timefmt import now_rfc3339
from reconciler.nodes import selection
from reconciler.nodes.selection import (
    CLAIM_ANNOTATION,
    CLAIM_LABEL,
    CLAIMED_AT,
    WAS_UNSCHEDULABLE,
    claim_of,
    node_name,
)

log = logging.getLogger(__name__)

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
PARALLEL = 16  # node operations in flight per VirtualCluster
EVENT_NAMES = 10  # node names an event of several claims or releases spells out
CLAIM_ATTEMPTS = 5  # writes of one claim while the node keeps changing under it (heartbeats); then the next pass


class NodeJoiner(Protocol):
    """How a claimed host node becomes a node of the tenant."""

    async def join(self, vc: Obj, tenant: KubeClient, host_node: Obj, current: Obj | None) -> bool:
        """Make the node part of the tenant (``current``: its tenant Node, if any); True once Ready there."""

    async def leave(self, vc: Obj, tenant: KubeClient | None, name: str, pods: list[Obj] | None = None) -> None:
        """Take the node out of the tenant (its pods go with it; ``pods``: the node's tenant pods when the
        caller listed them for several leaving nodes at once)."""

    async def stop(self, vc: Obj) -> None:
        """The tenant is going away: stop whatever keeps its nodes alive."""


@dataclass
class NodeReport:
    nodes: list[dict[str, str]] = field(default_factory=list)
    shortages: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)  # claimed nodes held up (drain, PDB, joining)

    @property
    def ready(self) -> int:
        return sum(1 for n in self.nodes if n["phase"] == "Ready")

    @property
    def complete(self) -> bool:
        return not self.shortages and not self.waiting and self.ready == len(self.nodes)


def _owner(vc: Obj) -> str:
    return VirtualCluster(vc).meta.key


def _taint(value: str) -> dict[str, str]:
    return {"key": CLAIM_LABEL, "value": value, "effect": "NoSchedule"}


def nodes_message(verb: str, names: list[str]) -> str:
    """An event's message for several nodes: how many, and the first :data:`EVENT_NAMES` by name."""
    shown = ", ".join(sorted(names)[:EVENT_NAMES])
    more = f" and {len(names) - EVENT_NAMES} more" if len(names) > EVENT_NAMES else ""
    return f"{verb} {len(names)} host node(s): {shown}{more}"


def _raise_first(results: list[Any]) -> None:
    """Steps gathered with ``return_exceptions``: the first failure is the pass's."""
    for result in results:
        if isinstance(result, BaseException):
            raise result


async def pods_by_node(client: KubeClient, names: set[str]) -> dict[str, list[Obj]]:
    """The pods of each named node (an entry for every name, [] for none) from one list, not one list per
    node: an apiserver without a watch cache (a lean tenant's) reads every pod from etcd for each list,
    whatever its field selector."""
    if not names:
        return {}
    if len(names) == 1:
        pods = await client.get("/api/v1/pods", fieldSelector=f"spec.nodeName={next(iter(names))}")
    else:
        pods = await client.get("/api/v1/pods")
    grouped: dict[str, list[Obj]] = {name: [] for name in names}
    for pod in pods.get("items") or []:
        node = (pod.get("spec") or {}).get("nodeName", "")
        if node in grouped:
            grouped[node].append(pod)
    return grouped


async def _tenant_pods_by_node(tenant: KubeClient | None, names: set[str]) -> dict[str, list[Obj]]:
    """The leaving nodes' tenant pods; none known when the tenant does not answer (each node's own
    removal then lists and reports for itself)."""
    if tenant is None:
        return {}
    try:
        return await pods_by_node(tenant, names)
    except (HostError, HostUnavailable) as e:
        log.warning("could not list the tenant's pods of %d leaving nodes: %s", len(names), e)
        return {}


class NodePromoter:
    def __init__(self, host: KubeClient, joiner: NodeJoiner, events: EventRecorder) -> None:
        self.host = host
        self.joiner = joiner
        self.events = events

    async def host_nodes(self) -> list[Obj]:
        return list((await self.host.get("/api/v1/nodes")).get("items") or [])

    async def promotable(self, namespace: str) -> tuple[LabelSelector | None, str]:
        """The host nodes VirtualClusters of ``namespace`` may take (its Namespace's
        :data:`~reconciler.nodes.selection.PROMOTABLE_NODES`; None: any), and why none when the
        annotation is no selector (then nothing new is taken: a typo must not open every node)."""
        ns = await self.host.get(f"/api/v1/namespaces/{namespace}")
        text = ((ns.get("metadata") or {}).get("annotations") or {}).get(selection.PROMOTABLE_NODES)
        if text is None:
            return None, ""
        try:
            return parse_label_selector(text), ""
        except errors.ApiError as e:
            return None, f"namespace {namespace}'s {selection.PROMOTABLE_NODES} is not a label selector ({e.message}): " \
                         f"no node is taken until it is"
    # -- the reconcile step ------------------------------------------------------------

    async def reconcile(self, vc: Obj, tenant: KubeClient, version: str | None = None) -> NodeReport:
        """Nodes follow the spec; none with a kubelet newer than ``version`` (the tenant's, this pass) is taken."""
        owner, spec = _owner(vc), VirtualCluster(vc).spec
        nodes = await self.host_nodes()
        allowed, refusal = await self.promotable(VirtualCluster(vc).meta.namespace)
        plan = selection.plan(spec.raw, nodes, owner, allowed,
                              version or VirtualCluster(vc).status.raw.get("kubernetesVersion"))
        if refusal:
            plan.shortages.append(refusal)
            plan.claim = []
        report = NodeReport(shortages=list(plan.shortages))
        by_name = {node_name(n): n for n in nodes}
        await self._release_together(vc, tenant, [by_name[name] for name in plan.release])
        force = spec.force_destroy
        joined = {node_name(n): n for n in (await tenant.get("/api/v1/nodes")).get("items") or []}
        # Only nodes not yet in the tenant still need their host pods drained.
        pods = await pods_by_node(self.host, set() if force else {n for n in plan.wanted if n not in joined})
        claimed_now: list[str] = []

        async def promote(name: str) -> dict[str, str] | None:
            node = by_name[name]
            if claim_of(node) != owner:
                claimed = await self.claim(vc, node)
                if claimed is None:
                    report.shortages.append(f"node {name} was claimed by someone else, or stopped being free, meanwhile")
                    return None
                node = claimed
                claimed_now.append(name)
            draining = None if force or name in joined else pods.get(name, [])
            return {"name": name, "phase": await self._promote(vc, tenant, node, joined.get(name), draining, report)}
        limit = asyncio.Semaphore(PARALLEL)

        async def bounded(step: Awaitable[Any]) -> Any:
            async with limit:
                return await step
        results = await asyncio.gather(*(bounded(promote(name)) for name in plan.wanted), return_exceptions=True)
        await self._record(vc, "NodeClaimed", "claimed", claimed_now)  # every claim made, whatever failed after
        _raise_first(results)
        report.nodes = [r for r in results if r is not None]
        return report

    async def _release_together(self, vc: Obj, tenant: KubeClient | None, nodes: list[Obj]) -> None:
        """Release nodes together (a scale-down, a delete, a hibernation): their tenant pods from one list,
        ``PARALLEL`` at a time, then one event for those returned, even when another failed (then raised)."""
        leaving = await _tenant_pods_by_node(tenant, {node_name(n) for n in nodes})
        limit = asyncio.Semaphore(PARALLEL)

        async def bounded(node: Obj) -> None:
            async with limit:
                await self.release(vc, tenant, node, leaving.get(node_name(node)))
        results = await asyncio.gather(*(bounded(n) for n in nodes), return_exceptions=True)
        await self._record(vc, "NodeReleased", "returned",
                           [node_name(n) for n, r in zip(nodes, results, strict=True) if not isinstance(r, BaseException)])
        _raise_first(results)

    async def _record(self, vc: Obj, reason: str, verb: str, names: list[str]) -> None:
        """One event for the nodes a pass claimed or returned together, not one per node: a promotion of
        hundreds would otherwise write as many events to the host as it claims nodes."""
        if names:
            await self.events.record(vc, "Normal", reason, nodes_message(verb, names))

    async def _promote(self, vc: Obj, tenant: KubeClient, node: Obj, joined: Obj | None,
                       draining: list[Obj] | None, report: NodeReport) -> str:
        """Drain (unless forced or already joined), then join; the node's phase for the status."""
        name = node_name(node)
        if draining is not None:
            blocked = await self.drain_host(draining)
            if blocked:
                report.waiting.append(f"node {name}: draining host pods ({blocked})")
                return "Claimed"
        if await self.joiner.join(vc, tenant, node, joined):
            return "Ready"
        report.waiting.append(f"node {name}: joining the tenant")
        return "Joining"

    # -- host side ---------------------------------------------------------------------

    async def claim(self, vc: Obj, node: Obj) -> Obj | None:
        """Claim, cordon and taint in one write, guarded by the node's resourceVersion. A node that
        changed since the plan saw it (a heartbeat, a label added elsewhere) is read again and claimed
        if the plan would still choose it (:func:`selection.still_chosen`)."""
        meta = VirtualCluster(vc).meta
        value = selection.claim_value(meta.namespace, meta.name)
        name = node_name(node)
        seen = node
        for _ in range(CLAIM_ATTEMPTS):
            spec = node.get("spec") or {}
            taints = [t for t in spec.get("taints") or [] if t.get("key") != CLAIM_LABEL] + [_taint(value)]
            body = {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"],
                                 "labels": {CLAIM_LABEL: value},
                                 "annotations": {CLAIM_ANNOTATION: _owner(vc), CLAIMED_AT: now_rfc3339(),
                                                 WAS_UNSCHEDULABLE: "true" if spec.get("unschedulable") else "false"}},
                    "spec": {"unschedulable": True, "taints": taints}}
            try:
                claimed = await self.host.patch(f"/api/v1/nodes/{name}", body)
            except HostError as e:
                if e.code == 409:
                    fresh = await self._reread(name)
                    if fresh is not None and claim_of(fresh) == _owner(vc):
                        return fresh  # ours already: a claim whose answer was lost, or another replica's
                    if fresh is not None and selection.still_chosen(VirtualCluster(vc).spec.raw, seen, fresh):
                        node = fresh
                        continue
                if e.code in (404, 409):
                    return None
                raise
            return claimed
        return None

    async def _reread(self, name: str) -> Obj | None:
        try:
            return dict(await self.host.get(f"/api/v1/nodes/{name}"))
        except HostError as e:
            if e.code == 404:
                return None
            raise

    async def drain_host(self, pods: list[Obj]) -> str:
        """Evict the host's pods from a claimed node; '' once none is left, else why not yet."""
        blocked = []
        for pod in pods:
            meta = pod["metadata"]
            if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
                continue
            if any(ref.get("kind") == "DaemonSet" for ref in meta.get("ownerReferences") or []):
                continue
            if meta.get("deletionTimestamp"):
                blocked.append(f"{meta['namespace']}/{meta['name']} terminating")
                continue
            eviction = {"apiVersion": "policy/v1", "kind": "Eviction",
                        "metadata": {"name": meta["name"], "namespace": meta["namespace"]}}
            try:
                await self.host.create(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/eviction",
                                       eviction)
                blocked.append(f"{meta['namespace']}/{meta['name']} evicted")
            except HostError as e:
                if e.code == 404:
                    continue
                if e.code == 429:
                    blocked.append(f"{meta['namespace']}/{meta['name']} held by a PodDisruptionBudget: {e.message}")
                else:
                    raise
        return "; ".join(blocked)

    async def release(self, vc: Obj | None, tenant: KubeClient | None, node: Obj,
                      pods: list[Obj] | None = None) -> None:
        """Out of the tenant, then back to the host's scheduler: no label, taint or cordon of ours left."""
        if vc is not None:
            await self.joiner.leave(vc, tenant, node_name(node), pods)
        await self.unclaim(node)

    async def unclaim(self, node: Obj) -> None:
        name = node_name(node)
        for _ in range(5):
            spec = node.get("spec") or {}
            notes = node["metadata"].get("annotations") or {}
            body: Obj = {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"],
                                      "labels": {CLAIM_LABEL: None},
                                      "annotations": {CLAIM_ANNOTATION: None, CLAIMED_AT: None,
                                                      WAS_UNSCHEDULABLE: None}},
                         "spec": {"taints": [t for t in spec.get("taints") or [] if t.get("key") != CLAIM_LABEL]
                                  or None}}
            if notes.get(WAS_UNSCHEDULABLE) != "true":
                body["spec"]["unschedulable"] = None
            try:
                await self.host.patch(f"/api/v1/nodes/{name}", body)
                return
            except HostError as e:
                if e.code == 404:
                    return
                if e.code != 409:
                    raise
            fresh = await self._reread(name)
            if fresh is None:
                return
            node = fresh
        raise HostUnavailable(f"node {name} kept changing while being released")

    async def release_all(self, vc: Obj, tenant: KubeClient | None) -> int:
        owner = _owner(vc)
        mine = [n for n in await self.host_nodes() if claim_of(n) == owner]
        await self._release_together(vc, tenant, mine)
        await self.joiner.stop(vc)
        return len(mine)

    async def release_orphans(self, exists: Callable[[str, str], Awaitable[bool]]) -> list[str]:
        """Claims whose VirtualCluster is gone (a crash between release and deletion) go back to the host."""
        returned = []
        for node in await self.host_nodes():
            owner = claim_of(node)
            if not owner:
                continue
            namespace, _, name = owner.partition("/")
            if not await exists(namespace, name):
                await self.unclaim(node)
                returned.append(node_name(node))
        return returned

