"""Talking to a tenant's own apiserver, for every part of the loop: its admin client, and a node
leaving it."""

from __future__ import annotations

import contextlib
import logging

from apiserver.kubeclient.client import HostError, HostUnavailable, KubeClient, access_from_pem
from certs.tenant import TenantPki

__all__ = ["admin_client", "remove_node"]

log = logging.getLogger(__name__)


def admin_client(pki: TenantPki, endpoint: str) -> KubeClient:
    return KubeClient(access_from_pem(endpoint, pki.files["ca.crt"], pki.files["admin.crt"], pki.files["admin.key"]))


async def remove_node(tenant: KubeClient, name: str) -> None:
    """A node leaves the tenant: its pods are deleted at once, then the Node itself."""
    try:
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
