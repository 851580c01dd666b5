"""REST paths of the built-in kinds the server writes to host and tenant apiservers (no discovery:
these are fixed by Kubernetes)."""

from __future__ import annotations

KINDS: dict[str, tuple[str, str, bool]] = {  # kind → (group-version prefix, plural, namespaced)
    "Deployment": ("/apis/apps/v1", "deployments", True),
    "StatefulSet": ("/apis/apps/v1", "statefulsets", True),
    "DaemonSet": ("/apis/apps/v1", "daemonsets", True),
    "ReplicaSet": ("/apis/apps/v1", "replicasets", True),
    "ControllerRevision": ("/apis/apps/v1", "controllerrevisions", True),
    "Pod": ("/api/v1", "pods", True),
    "Service": ("/api/v1", "services", True),
    "Endpoints": ("/api/v1", "endpoints", True),
    "Secret": ("/api/v1", "secrets", True),
    "ConfigMap": ("/api/v1", "configmaps", True),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "PersistentVolumeClaim": ("/api/v1", "persistentvolumeclaims", True),
    "Node": ("/api/v1", "nodes", False),
    "EndpointSlice": ("/apis/discovery.k8s.io/v1", "endpointslices", True),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
}


def path(kind: str, namespace: str | None = None, name: str = "") -> str:
    """The collection path of ``kind`` (in ``namespace`` when namespaced), or one object's with ``name``."""
    prefix, plural, namespaced = KINDS[kind]
    scope = f"/namespaces/{namespace}" if namespaced and namespace else ""
    return f"{prefix}{scope}/{plural}" + (f"/{name}" if name else "")


def object_path(obj: dict) -> str:  # type: ignore[type-arg]
    meta = obj["metadata"]
    return path(obj["kind"], meta.get("namespace"), meta["name"])
