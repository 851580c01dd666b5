"""Talking to a tenant's own apiserver, for every part of the loop: its admin client (one-off, or
kept between passes), and a node leaving it."""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from apiserver.kubeclient.client import HostError, HostUnavailable, KubeClient, access_from_pem
from certs.tenant import TenantPki

__all__ = ["TenantClients", "admin_client", "remove_node"]

log = logging.getLogger(__name__)


def admin_client(pki: TenantPki, endpoint: str) -> KubeClient:
    return KubeClient(access_from_pem(endpoint, pki.files["ca.crt"], pki.files["admin.crt"], pki.files["admin.key"]))


class TenantClients:
    """Each tenant's admin client, kept from one pass to the next. A ready tenant is checked every few
    seconds; a client made afresh each time costs a TLS context and a handshake on both sides, which
    adds up with the tenants. A new endpoint or PKI gets a new client; ``forget`` closes one whose
    control plane stopped."""

    def __init__(self) -> None:
        self._held: dict[tuple[str, str], tuple[tuple[str, bytes, bytes], KubeClient]] = {}

    async def get(self, namespace: str, name: str, pki: TenantPki, endpoint: str) -> KubeClient:
        identity = (endpoint, pki.files["ca.crt"], pki.files["admin.crt"])
        held = self._held.get((namespace, name))
        if held is not None and held[0] == identity:
            return held[1]
        client = admin_client(pki, endpoint)
        self._held[(namespace, name)] = (identity, client)
        if held is not None:
            await held[1].close()
        return client

    async def forget(self, namespace: str, name: str) -> None:
        held = self._held.pop((namespace, name), None)
        if held is not None:
            await held[1].close()

    async def close(self) -> None:
        held, self._held = list(self._held.values()), {}
        for _, client in held:
            await client.close()


async def remove_node(tenant: KubeClient, name: str, pods: list[dict[str, Any]] | None = None) -> None:
    """A node leaves the tenant: its pods (``pods``, or listed here) are deleted at once, then the Node."""
    try:
        if pods is None:
            pods = (await tenant.get("/api/v1/pods", fieldSelector=f"spec.nodeName={name}")).get("items") or []
        for pod in pods:
            meta = pod["metadata"]
            with contextlib.suppress(HostError):
                await tenant.delete(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                                    {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0})
        await tenant.delete(f"/api/v1/nodes/{name}")
    except HostError as e:
        if e.code != 404:
            raise
    except HostUnavailable as e:
        log.warning("tenant unreachable while removing node %s: %s", name, e)
