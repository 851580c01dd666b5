"""Clusters a VirtualCluster imports (``spec.import``): reached with the kubeconfig in a host Secret of
the VirtualCluster's namespace, and the credentials issued in them.

A credential issued for an imported cluster is a ServiceAccount of its own in the namespace
``kosmos-access`` of that cluster, bound to ``cluster-admin`` (as a built tenant's ``kosmos:tenant-admins``
is), and a bound token of it with the credential's lifetime (TokenRequest). Deleting the ServiceAccount
revokes every token of it at once: the imported apiserver checks that a token's ServiceAccount still
exists, with the same uid, on every request. Everything made there carries the label
``kosmos.io/virtualcluster``, so that removing the VirtualCluster removes exactly what was made for it
and nothing else of the cluster.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from apiserver.kubeclient.client import HostError, KubeClient
from apiserver.kubeclient.kubeconfig import KubeconfigError, parse_kubeconfig

__all__ = ["ACCESS_NAMESPACE", "ImportError_", "ImportedCluster", "import_ref", "reach"]

ACCESS_NAMESPACE = "kosmos-access"
ROLE = "cluster-admin"
LABEL = "kosmos.io/virtualcluster"  # value: <namespace>.<name> of the VirtualCluster on the host
SA_PATH = f"/api/v1/namespaces/{ACCESS_NAMESPACE}/serviceaccounts"
CRB_PATH = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"


class ImportError_(Exception):  # noqa: N801 (ImportError is Python's)
    """The imported cluster cannot be reached as its Secret says (the reason is for the status and the user)."""


def import_ref(obj: dict[str, Any]) -> tuple[str, str] | None:
    """(Secret name, key) of an imported VirtualCluster, None for one that builds its control plane."""
    ref = (((obj.get("spec") or {}).get("import") or {}).get("kubeconfigSecretRef")) or None
    return (str(ref["name"]), str(ref.get("key") or "kubeconfig")) if ref else None


@dataclass
class ImportedCluster:
    """One imported cluster: its address, the CA that verifies it, and a client with the Secret's credential."""

    owner: str  # <namespace>.<name> of the VirtualCluster
    server: str
    ca: bytes | None
    client: KubeClient

    def _labels(self) -> dict[str, str]:
        return {LABEL: self.owner}

    async def issue(self, credential: str, seconds: int) -> str:
        """A token for the new credential ``credential``, valid ``seconds``: its ServiceAccount and binding
        made first (idempotent: a retried issuance reuses them)."""
        await self._ensure("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                  "metadata": {"name": ACCESS_NAMESPACE}})
        await self._ensure(SA_PATH, {"apiVersion": "v1", "kind": "ServiceAccount",
                                     "metadata": {"name": credential, "labels": self._labels()}})
        await self._ensure(CRB_PATH, {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{ACCESS_NAMESPACE}:{credential}", "labels": self._labels()},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ROLE},
            "subjects": [{"kind": "ServiceAccount", "name": credential, "namespace": ACCESS_NAMESPACE}]})
        review = await self.client.create(f"{SA_PATH}/{credential}/token", {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": seconds}})
        return str(review["status"]["token"])

    async def _ensure(self, path: str, obj: dict[str, Any]) -> None:
        try:
            await self.client.create(path, obj)
        except HostError as e:
            if e.code != 409:
                raise

    async def credentials(self) -> set[str]:
        """The credentials issued in the cluster for this VirtualCluster (their ServiceAccounts' names)."""
        try:
            listed = await self.client.get(SA_PATH, labelSelector=f"{LABEL}={self.owner}")
        except HostError as e:
            if e.code == 404:
                return set()
            raise
        return {sa["metadata"]["name"] for sa in listed.get("items") or []}

    async def revoke(self, credential: str) -> None:
        """Delete the credential's ServiceAccount (its tokens stop working) and its binding."""
        for path in (f"{SA_PATH}/{credential}", f"{CRB_PATH}/{ACCESS_NAMESPACE}:{credential}"):
            try:
                await self.client.delete(path)
            except HostError as e:
                if e.code != 404:
                    raise

    async def forget(self) -> None:
        """Remove everything made in the cluster for this VirtualCluster (never anything else)."""
        for credential in await self.credentials():
            await self.revoke(credential)

    async def close(self) -> None:
        await self.client.close()


@contextlib.asynccontextmanager
async def reach(host: KubeClient, obj: dict[str, Any]) -> AsyncIterator[ImportedCluster]:
    """The cluster ``obj`` imports, for the ``async with`` block, its client closed after it; ImportError_
    when the Secret is missing or holds no usable kubeconfig (the host not answering raises as the host
    client does)."""
    cluster = await _open(host, obj)
    try:
        yield cluster
    finally:
        await cluster.close()


async def _open(host: KubeClient, obj: dict[str, Any]) -> ImportedCluster:
    ref = import_ref(obj)
    if ref is None:
        raise ValueError("not an imported VirtualCluster")
    name, key = ref
    meta = obj["metadata"]
    namespace = meta["namespace"]
    where = f"Secret {namespace}/{name} key {key!r}"
    try:
        secret = await host.get(f"/api/v1/namespaces/{namespace}/secrets/{name}")
    except HostError as e:
        if e.code == 404:
            raise ImportError_(f"{where}: the Secret does not exist") from None
        raise
    try:
        data = base64.b64decode((secret.get("data") or {})[key])
    except KeyError:
        raise ImportError_(f"{where}: the Secret has no such key") from None
    except (binascii.Error, TypeError):
        raise ImportError_(f"{where}: not base64") from None
    try:
        access, ca = parse_kubeconfig(data, where)
    except KubeconfigError as e:
        raise ImportError_(str(e)) from None
    return ImportedCluster(owner_value(namespace, meta["name"]), access.server, ca,
                           KubeClient(access, user_agent="vc-apiserver"))


def owner_value(namespace: str, name: str) -> str:
    """The LABEL value of what is made for VirtualCluster ``namespace/name`` (a label value holds 63
    characters at most: longer names are hashed)."""
    value = f"{namespace}.{name}"
    return value if len(value) <= 63 else hashlib.sha256(value.encode()).hexdigest()[:63]
