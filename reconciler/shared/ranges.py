"""Services ranges of their own for tenants on a shared slice.

A slice's pods run in the host, so the host's proxies carry its tenant's Services. For that the tenant's
ClusterIPs must be host ClusterIPs too: each such tenant gets a block of a pool (``--slice-service-cidrs``)
that the host serves as a ``networking.k8s.io/v1`` ServiceCIDR, and its apiserver allocates from exactly that
block. The tenant's ``kubectl get svc``, its env vars, its DNS and every controller reading ``clusterIP`` are
right from the first moment, and two tenants never collide.

The ServiceCIDR is the claim: it is named after its block, so two tenants can never hold the same one (the
host answers the second create with 409), and it carries the owner's uid, so a restart finds it. The block
is also kept in the tenant's PKI (:attr:`certs.tenant.TenantPki.service_cidr`), which outlives a ServiceCIDR
deleted behind our back (the slice makes it again). The pool should sort after the host's own range: the
host allocates from its ranges in address order, so its Services stay in its own range until it is full.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
from dataclasses import dataclass

from apiserver.apis.virtualcluster import VirtualCluster
from apiserver.kubeclient.client import HostError, KubeClient
from apiserver.machinery.jsonutil import Obj
from reconciler.shared import names

log = logging.getLogger(__name__)

PATH = "/apis/networking.k8s.io/v1/servicecidrs"
DEFAULT_POOL = "10.112.0.0/12"
DEFAULT_PREFIX = 22  # 1,022 Services a tenant, 1,024 tenants in the default pool


class NoRange(Exception):
    """The pool has no free block (the message says how full it is)."""


def first_address(cidr: str) -> str:
    """The ``kubernetes`` Service's address: the first of the range."""
    return str(ipaddress.ip_network(cidr, strict=False).network_address + 1)


def dns_address(cidr: str) -> str:
    """``kube-dns``'s address: the tenth of the range, as kubeadm chooses it."""
    return str(ipaddress.ip_network(cidr, strict=False).network_address + 10)


def object_name(cidr: str) -> str:
    return "vc-" + cidr.replace(".", "-").replace("/", "-").replace(":", "-")


def service_cidr(vc: Obj, cidr: str) -> Obj:
    """The host's ServiceCIDR that holds ``cidr`` for ``vc``."""
    meta = VirtualCluster(vc).meta
    return {"apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR",
            "metadata": {"name": object_name(cidr), "labels": names.markers(vc),
                         "annotations": {names.TENANT_NAMESPACE: meta.namespace, names.TENANT_NAME: meta.name}},
            "spec": {"cidrs": [cidr]}}


def owner(obj: Obj) -> str:
    return ((obj.get("metadata") or {}).get("labels") or {}).get(names.VC_UID, "")


@dataclass(frozen=True)
class Pool:
    """The blocks tenants' ranges are cut from; pure."""

    cidr: str = DEFAULT_POOL
    prefix: int = DEFAULT_PREFIX

    def __post_init__(self) -> None:
        network = ipaddress.ip_network(self.cidr)
        if not network.prefixlen <= self.prefix <= network.max_prefixlen - 2:
            raise ValueError(f"a block of /{self.prefix} does not fit the pool {self.cidr}")

    @property
    def size(self) -> int:
        network = ipaddress.ip_network(self.cidr)
        return 1 << (self.prefix - network.prefixlen)

    def block(self, index: int) -> str:
        network = ipaddress.ip_network(self.cidr)
        step = 1 << (network.max_prefixlen - self.prefix)
        return f"{network.network_address + index * step}/{self.prefix}"

    def candidates(self, uid: str) -> list[str]:
        """Every block, starting at one derived from ``uid``: tenants made at once rarely try the same one."""
        start = int(hashlib.sha256(uid.encode()).hexdigest(), 16) % self.size
        return [self.block((start + i) % self.size) for i in range(self.size)]


class ServiceRanges:
    """Claims and releases tenants' blocks on the host."""

    def __init__(self, host: KubeClient, pool: Pool | None = None) -> None:
        self.host = host
        self.pool = pool or Pool()

    async def claim(self, vc: Obj) -> str:
        """The tenant's block: the one it holds already, or the first free one (claimed by creating its
        ServiceCIDR). Blocks overlapping a range someone else serves are passed over."""
        uid = VirtualCluster(vc).meta.uid
        existing = (await self.host.get(PATH))["items"]
        for obj in existing:
            if owner(obj) == uid:
                return str(obj["spec"]["cidrs"][0])
        taken = [ipaddress.ip_network(c) for obj in existing for c in obj["spec"].get("cidrs") or []]
        for cidr in self.pool.candidates(uid):
            if any(ipaddress.ip_network(cidr).overlaps(t) for t in taken):
                continue
            try:
                await self.host.create(PATH, service_cidr(vc, cidr))
            except HostError as e:
                if e.code == 409:  # claimed meanwhile
                    continue
                raise
            log.info("Services range %s claimed for %s", cidr, VirtualCluster(vc).meta.key)
            return cidr
        raise NoRange(f"every block of /{self.pool.prefix} in the pool {self.pool.cidr} is taken "
                      f"({self.pool.size} tenants)")

    async def ensure(self, vc: Obj, cidr: str) -> None:
        """The claim stands (made again when deleted behind our back); a foreign one is an error."""
        try:
            have = await self.host.get(f"{PATH}/{object_name(cidr)}")
        except HostError as e:
            if e.code != 404:
                raise
            await self.host.create(PATH, service_cidr(vc, cidr))
            return
        if owner(have) != VirtualCluster(vc).meta.uid:
            raise HostError(409, {"reason": "Conflict", "message": f"the host's ServiceCIDR {object_name(cidr)} "
                                                                   f"holding {cidr} belongs to someone else"})

    async def release(self, vc: Obj) -> None:
        """Every block ``vc`` holds goes back to the pool (the host keeps a ServiceCIDR until its last
        address is free)."""
        uid = VirtualCluster(vc).meta.uid
        for obj in (await self.host.get(PATH, labelSelector=f"{names.VC_UID}={uid}"))["items"]:
            try:
                await self.host.delete(f"{PATH}/{obj['metadata']['name']}")
            except HostError as e:
                if e.code != 404:
                    raise
