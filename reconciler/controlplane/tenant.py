"""The bootstrap objects every tenant gets in its own apiserver."""

from __future__ import annotations

import logging

from apiserver.kubeclient.client import HostError, HostUnavailable, KubeClient
from certs.tenant import TENANT_ADMINS
from reconciler.runtime.base import RuntimeFailure

log = logging.getLogger(__name__)

ADMIN_BINDING = {
    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
    "metadata": {"name": "kosmos:tenant-admins", "labels": {"kosmos.io/managed-by": "vc-apiserver"}},
    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": TENANT_ADMINS}],
}


async def bootstrap_tenant(tenant: KubeClient) -> None:
    """Group kosmos:tenant-admins is cluster-admin in the tenant (kubeconfigs handed out carry it);
    ``tenant`` is the tenant's admin client."""
    try:
        await tenant.create("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", ADMIN_BINDING)
    except HostError as e:
        if e.code != 409:
            raise RuntimeFailure("BootstrapFailed", f"creating the tenant-admins binding: {e.message}") from None
    except HostUnavailable as e:
        raise RuntimeFailure("BootstrapFailed", f"the tenant apiserver did not answer: {e}") from None
