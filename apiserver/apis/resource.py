"""What the server serves: group, version, resource names, in one place."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ResourceInfo:
    group: str
    version: str
    resource: str
    kind: str
    list_kind: str
    singular: str
    short_names: tuple[str, ...]
    categories: tuple[str, ...]
    verbs: tuple[str, ...]
    subresources: dict[str, tuple[str, ...]]
    namespaced: bool = True

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def qualified(self) -> str:
        return f"{self.resource}.{self.group}"


VIRTUALCLUSTERS = ResourceInfo(
    group="kosmos.io",
    version="v1alpha1",
    resource="virtualclusters",
    kind="VirtualCluster",
    list_kind="VirtualClusterList",
    singular="virtualcluster",
    short_names=("vc",),
    categories=("kosmos",),
    verbs=("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"),
    subresources={"status": ("get", "patch", "update"), "kubeconfig": ("get",), "credentials": ("get",)},
)

# The credentials the ``kubeconfig`` subresource issues, one object each: listed, and revoked by deleting it.
# They are never written by clients (the subresource creates them; expiry and deletion remove them).
VIRTUALCLUSTERCREDENTIALS = ResourceInfo(
    group="kosmos.io",
    version="v1alpha1",
    resource="virtualclustercredentials",
    kind="VirtualClusterCredential",
    list_kind="VirtualClusterCredentialList",
    singular="virtualclustercredential",
    short_names=("vccred",),
    categories=("kosmos",),
    verbs=("delete", "deletecollection", "get", "list", "watch"),
    subresources={},
)

# Every resource served, by its plural name (how a route names the resource it serves).
RESOURCES = {r.resource: r for r in (VIRTUALCLUSTERS, VIRTUALCLUSTERCREDENTIALS)}

FINALIZER = "kosmos.io/virtualcluster"

# The types of a VirtualCluster's status conditions (the fourth, Hibernated, is apis.hibernation.CONDITION).
CONTROL_PLANE_READY = "ControlPlaneReady"
NODES_READY = "NodesReady"
READY = "Ready"
