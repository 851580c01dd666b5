"""Talking to a tenant's own apiserver: bootstrap objects every tenant gets, nodes that leave it."""

from __future__ import annotations

import contextlib
import logging

from apiserver.kubeclient.client import HostError, HostUnavailable, KubeClient, access_from_pem
from certs.tenant import TENANT_ADMINS, TenantPki
from reconciler.runtime.base import RuntimeFailure

log = logging.getLogger(__name__)

ADMIN_BINDING = {
    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
    "metadata": {"name": "kosmos:tenant-admins", "labels": {"kosmos.io/managed-by": "vc-apiserver"}},
    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": TENANT_ADMINS}],
}


def admin_client(pki: TenantPki, endpoint: str) -> KubeClient:
    return KubeClient(access_from_pem(endpoint, pki.files["ca.crt"], pki.files["admin.crt"], pki.files["admin.key"]))


async def bootstrap_tenant(pki: TenantPki, endpoint: str) -> None:
    """Group kosmos:tenant-admins is cluster-admin in the tenant (kubeconfigs handed out carry it)."""
    client = admin_client(pki, endpoint)
    try:
        await client.create("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", ADMIN_BINDING)
    except HostError as e:
        if e.code != 409:
            raise RuntimeFailure("BootstrapFailed", f"creating the tenant-admins binding: {e.message}") from None
    except HostUnavailable as e:
        raise RuntimeFailure("BootstrapFailed", f"the tenant apiserver did not answer: {e}") from None
    finally:
        await client.close()


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
