"""Where users reach a ``pods`` runtime tenant's apiserver: a control-plane node's address, and a port.

The apiserver is exposed by a NodePort Service ``<vc>-apiserver`` (port 6443, nodePort =
``externalPort`` when set), or with ``hostNetwork`` on a host port (``externalPort``, else one
allocated from the runtime's range) and no Service. A NodePort answers on every node, so any node's
address works; a control-plane node's is given because it is stable and is where the tenant's pods run
(a hostNetwork apiserver prefers that very node).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import time
from dataclasses import dataclass, field

from apiserver.apis.conditions import is_true
from apiserver.kubeclient import paths
from apiserver.kubeclient.client import HostError, HostUnavailable
from reconciler.runtime.base import FIELD_MANAGER, Obj, RuntimeFailure
from reconciler.runtime.pods.host import Host
from reconciler.runtime.pods.hostobjects import (
    COMPONENT,
    CONTROL_PLANE_ROLE,
    MANAGED_BY,
    OWNER,
    HostObjects,
    Plan,
)

__all__ = ["Endpoints"]

log = logging.getLogger(__name__)

NODE_CACHE_TTL = 60.0  # seconds an endpoint node address is trusted before it is looked up again
DOUBTED_TTL = 5.0  # the same, once a tenant did not answer at it: its node may be gone


def serving_address(node: Obj) -> tuple[str, str] | None:
    """(name, InternalIP) of a control-plane node a tenant apiserver may be reached through: Ready and not
    being deleted. A stale node left by another lab mode, or a NotReady one, never counts."""
    meta, status = node.get("metadata") or {}, node.get("status") or {}
    if not is_true(status.get("conditions"), "Ready") or meta.get("deletionTimestamp"):
        return None
    for address in status.get("addresses") or []:
        if address.get("type") != "InternalIP":
            continue
        try:
            ip = ipaddress.ip_address(str(address.get("address")))
        except ValueError:
            continue
        if not (ip.is_unspecified or ip.is_link_local):
            return str(meta.get("name")), str(ip)
    return None


def serving_nodes(nodes: list[Obj]) -> list[tuple[str, str]]:
    """The control-plane nodes that may serve, routable addresses first, then by name: a loopback address
    (a kwok node's, 127.0.0.1) is used only where no node has another, since in a pod it is the pod
    itself; the order is stable, so every pass gives the same answer."""
    found = [served for served in map(serving_address, nodes) if served is not None]
    return sorted(found, key=lambda n: (ipaddress.ip_address(n[1]).is_loopback, n[0]))


@dataclass
class Endpoints:
    """The host's control-plane nodes, looked up now and then, and the host ports handed out."""

    host: Host
    host_port_range: tuple[int, int]
    _nodes: list[tuple[str, str]] | None = field(default=None, repr=False)  # (node name, InternalIP), by name
    _nodes_at: float = field(default=0.0, repr=False)
    _nodes_task: asyncio.Task[None] | None = field(default=None, repr=False)
    _host_ports: dict[tuple[str, str], int] = field(default_factory=dict, repr=False)  # allocated, not yet seen

    def address(self, vc: Obj) -> str:
        """``externalIP`` if set; else the InternalIP of the first control-plane node (:func:`serving_nodes`). The nodes
        are looked up in the background (``address`` is asked synchronously); until the first lookup
        has finished this raises a retryable failure."""
        external = (vc.get("spec") or {}).get("externalIP")
        if external:
            return str(external)
        if not self._nodes:
            self.refresh_in_background()
            if self._nodes is None:
                raise RuntimeFailure("LookingUpEndpoint", "looking up the host's control-plane nodes for the "
                                                          "tenant apiserver's address; retrying shortly")
            raise RuntimeFailure("NoControlPlaneNode", f"no host node labelled {CONTROL_PLANE_ROLE} is Ready with an "
                                                       f"InternalIP; set spec.externalIP or label a node")
        return self._nodes[0][1]

    def node(self, address: str) -> str | None:
        """The control-plane node of this address, if it is one."""
        return next((n for n, ip in self._nodes or [] if ip == address), None)

    def refresh_in_background(self) -> None:
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
        """Cache (name, InternalIP) of the host's control-plane nodes that can serve, sorted by name. A
        failure is the caller's to explain: a lookup in the background only logs it."""
        nodes = await self.host.client.get(paths.path("Node"), labelSelector=CONTROL_PLANE_ROLE)
        self._nodes, self._nodes_at = serving_nodes(nodes.get("items", [])), time.monotonic()

    def doubt(self) -> None:
        """A tenant did not answer at its endpoint: look the nodes up again within DOUBTED_TTL, so that a
        tenant whose node went away (or stopped being Ready) follows to the next one."""
        self._nodes_at = min(self._nodes_at, time.monotonic() - NODE_CACHE_TTL + DOUBTED_TTL)

    async def fresh_nodes(self) -> None:
        """The nodes looked up again once NODE_CACHE_TTL has passed; a failure only matters if none is known."""
        if self._nodes is None or time.monotonic() - self._nodes_at > NODE_CACHE_TTL:
            try:
                await self.refresh_nodes()
            except (HostError, HostUnavailable) as e:
                if self._nodes is None:
                    raise RuntimeFailure("HostUnavailable", f"listing the host's control-plane nodes: {e}") from None

    async def port(self, objects: HostObjects, plan: Plan) -> tuple[int, str | None]:
        """The port users reach and the Service's cluster IP: the Service's nodePort (the Service applied),
        or the apiserver's host port with hostNetwork and no Service (one left by a NodePort spec deleted)."""
        if not plan.host_network:
            service = await self.host.apply(objects.apiserver_service(plan))
            return int(service["spec"]["ports"][0]["nodePort"]), str(service["spec"]["clusterIP"])
        await self.host.delete("Service", plan.namespace, plan.object_name("apiserver"))
        if plan.external_port:
            return plan.external_port, None
        return await self._allocate_host_port(plan), None

    async def _allocate_host_port(self, plan: Plan) -> int:
        """Keep the port this tenant has; else the first one no other hostNetwork tenant apiserver uses."""
        key = (plan.namespace, plan.name)
        taken: set[int] = set()
        for deploy in await self.host.list("Deployment", None, f"{MANAGED_BY}={FIELD_MANAGER},{COMPONENT}=apiserver"):
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

    def forget(self, namespace: str, name: str) -> None:
        self._host_ports.pop((namespace, name), None)
