"""Where a slice's virtual node says it is: the address its tenant dials for the node's NodePorts and its
kubelet API.

Without more, the node reports where vc-apiserver serves the shared kubelet API (``--slice-kubelet-address``
and ``--slice-kubelet-port``). No host proxy listens there, so the tenant's NodePort Services, which the
host's proxies open on every host node, do not answer at the node's address, as users and Kubernetes'
conformance tests expect them to.

With ``--slice-kubelet-service NAMESPACE/NAME`` the leader publishes its kubelet API as that host Service of
type NodePort: selectorless, its one EndpointSlice naming the leader's address, so a new leader takes it over
by writing its own. Every host node then answers both, and each virtual node reports a slice-pool node's
InternalIP (Ready, in the pool; the first by name, kept while it stays there) with the Service's node port
as its kubelet port. Both are looked up at most every ``ttl`` seconds, for all slices together.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from apiserver.kubeclient.client import HostError, HostUnavailable, KubeClient
from apiserver.machinery.jsonutil import Obj
from reconciler.shared import names
from reconciler.shared.capacity import in_pool
from reconciler.shared.placement import Placement

log = logging.getLogger(__name__)

PORT_NAME = "kubelet"
MANAGER = f"{names.MANAGER}.{names.DOMAIN}"
TTL = 30.0  # seconds a looked-up address is reused


@dataclass(frozen=True)
class Published:
    """The host Service the kubelet API is published as, and where this server serves that API."""

    namespace: str
    name: str
    address: str
    port: int


def kubelet_service(p: Published) -> Obj:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": p.name, "namespace": p.namespace, "labels": {names.MANAGED_BY: names.MANAGER}},
            "spec": {"type": "NodePort", "ports": [{"name": PORT_NAME, "port": p.port, "targetPort": p.port,
                                                    "protocol": "TCP"}]}}


def kubelet_endpointslice(p: Published) -> Obj:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": p.name, "namespace": p.namespace,
                         "labels": {names.MANAGED_BY: names.MANAGER, "kubernetes.io/service-name": p.name,
                                    "endpointslice.kubernetes.io/managed-by": MANAGER}},
            "addressType": "IPv4", "endpoints": [{"addresses": [p.address], "conditions": {"ready": True}}],
            "ports": [{"name": PORT_NAME, "port": p.port, "protocol": "TCP"}]}


def pool_address(nodes: list[Obj], placement: Placement, keep: str = "") -> str:
    """The InternalIP a virtual node reports: ``keep`` while a pool node still has it, else the first pool
    node's by name ('' when the pool is empty)."""
    found = []
    for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        if not in_pool(node, placement):
            continue
        found += [a["address"] for a in (node.get("status") or {}).get("addresses") or []
                  if a.get("type") == "InternalIP" and a.get("address")]
    if keep in found:
        return keep
    return found[0] if found else ""


class NodeAddresses:
    """The (address, kubelet port) every slice's virtual node reports."""

    def __init__(self, host: KubeClient, placement: Placement, address: str, port: Callable[[], int],
                 service: tuple[str, str] | None = None, ttl: float = TTL) -> None:
        self.host = host
        self.placement = placement
        self.address = address  # where this server serves the kubelet API...
        self.port = port  # ...and on which port (known once it listens)
        self.service = service  # (namespace, name) of the host Service it is published as
        self.ttl = ttl
        self._value: tuple[str, int] | None = None
        self._at = 0.0
        self._lock = asyncio.Lock()

    async def current(self) -> tuple[str, int] | None:
        """Where the tenant reaches the node; None while the host has no pool node or no node port yet (the
        node reports no address until then)."""
        if self.service is None:
            return self.address, self.port()
        loop = asyncio.get_running_loop()
        async with self._lock:
            if self._at and loop.time() - self._at < self.ttl:  # found, or found wanting: looked at again later
                return self._value
            self._at = loop.time()
            selector = self.placement.selector.to_string()  # only the pool's nodes: a host may have thousands
            try:
                port = await self._publish(Published(*self.service, self.address, self.port()))
                listed = await self.host.get("/api/v1/nodes", **({"labelSelector": selector} if selector else {}))
            except (HostError, HostUnavailable) as e:  # the node keeps what it reports, and says Ready by itself
                log.warning("publishing the shared nodes' kubelet API as host Service %s: %s", "/".join(self.service), e)
                return self._value
            address = pool_address(listed.get("items") or [], self.placement, self._value[0] if self._value else "")
            self._value = (address, port) if address and port else None
            return self._value

    async def _publish(self, p: Published) -> int:
        """The Service and its EndpointSlice say what they should (made or corrected); its node port."""
        base = f"/api/v1/namespaces/{p.namespace}/services"
        want = kubelet_service(p)
        try:
            have = await self.host.get(f"{base}/{p.name}")
        except HostError as e:
            if e.code != 404:
                raise
            have = await self.host.create(base, want)
            log.info("the shared nodes' kubelet API is published as host Service %s/%s", p.namespace, p.name)
        spec = have.get("spec") or {}
        ports = spec.get("ports") or []
        if spec.get("type") != "NodePort" or [(q.get("name"), q.get("port")) for q in ports] != [(PORT_NAME, p.port)]:
            have = await self.host.request("PUT", f"{base}/{p.name}", body={
                **want, "metadata": {**want["metadata"], "resourceVersion": have["metadata"]["resourceVersion"]},
                "spec": {**spec, **want["spec"]}})
        slices = f"/apis/discovery.k8s.io/v1/namespaces/{p.namespace}/endpointslices"
        es = kubelet_endpointslice(p)
        try:
            current = await self.host.get(f"{slices}/{p.name}")
            if (current.get("endpoints"), current.get("ports")) != (es["endpoints"], es["ports"]):
                es["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                await self.host.request("PUT", f"{slices}/{p.name}", body=es)
        except HostError as e:
            if e.code != 404:
                raise
            await self.host.create(slices, es)
        return int(((have.get("spec") or {}).get("ports") or [{}])[0].get("nodePort") or 0)
