"""Admission: aggregated resources get no host admission, so we do it (namespace lifecycle), and the
authorization a create needs beyond its verb (restoring another VirtualCluster's snapshot)."""

from __future__ import annotations

import time
from typing import Any, Protocol

from apiserver.apis.resource import ResourceInfo
from apiserver.auth.authn import Attributes, Authorizer, UserInfo, forbidden_message
from apiserver.kubeclient.client import HostError, HostUnavailable, KubeClient
from apiserver.machinery import errors

ACTIVE_TTL = 5.0


class Admission(Protocol):
    async def admit_create(self, info: ResourceInfo, obj: dict[str, Any], user: UserInfo | None) -> None: ...


class NamespaceLifecycle:
    """Creating in a missing namespace is 404, in a terminating one 403, as kube answers."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self._active: dict[str, float] = {}

    async def admit_create(self, info: ResourceInfo, obj: dict[str, Any], user: UserInfo | None) -> None:
        meta = obj["metadata"]
        namespace = meta["namespace"]
        if self._active.get(namespace, 0.0) > time.monotonic():
            return
        try:
            ns = await self.client.get(f"/api/v1/namespaces/{namespace}")
        except HostError as e:
            if e.code == 404:
                raise errors.ApiError(404, "NotFound", f'namespaces "{namespace}" not found', name=namespace,
                                      kind="namespaces") from None
            raise errors.internal(f"checking namespace {namespace}: {e.message}") from None
        except HostUnavailable:
            raise errors.service_unavailable(f"cannot check namespace {namespace} on the host right now") from None
        if ns.get("metadata", {}).get("deletionTimestamp") or ns.get("status", {}).get("phase") == "Terminating":
            message = f"unable to create new content in namespace {namespace} because it is being terminated"
            raise errors.ApiError(
                403, "Forbidden", f'{info.qualified} "{meta.get("name", "")}" is forbidden: {message}',
                name=meta.get("name", ""), group=info.group, kind=info.resource,
                causes=[errors.Cause("NamespaceTerminating", message, "metadata.namespace")])
        self._active[namespace] = time.monotonic() + ACTIVE_TTL


SNAPSHOTS = "snapshots"  # the subresource restoring is authorized as (not served: like kube's signers, a name for RBAC)


def snapshot_attributes(info: ResourceInfo, namespace: str, source: str) -> Attributes:
    """``get`` on ``virtualclusters/snapshots`` of ``source``: what reading its snapshots takes."""
    return Attributes(verb="get", path=f"/apis/{info.group_version}/namespaces/{namespace}/{info.resource}/{source}/"
                                       f"{SNAPSHOTS}", resource_request=True, namespace=namespace, group=info.group,
                      version=info.version, resource=info.resource, subresource=SNAPSHOTS, name=source)


class RestoreAuthorization:
    """A VirtualCluster created with ``spec.restoreFrom`` starts with the tenant data of another one: its
    creator must be allowed ``get`` on that one's ``virtualclusters/snapshots``, asked of the server's
    authorizer (delegated: a SubjectAccessReview against the host, as every request is). Denied: 403, as
    kube words a denial, naming the object being created. Writes of the server itself (no user) pass."""

    def __init__(self, authorizer: Authorizer) -> None:
        self.authorizer = authorizer

    async def admit_create(self, info: ResourceInfo, obj: dict[str, Any], user: UserInfo | None) -> None:
        source = (obj.get("spec") or {}).get("restoreFrom") if isinstance(obj.get("spec"), dict) else None
        if user is None or not isinstance(source, dict) or not isinstance(source.get("virtualCluster"), str):
            return
        meta = obj["metadata"]
        attrs = snapshot_attributes(info, meta["namespace"], source["virtualCluster"])
        allowed, reason = await self.authorizer.authorize(user, attrs)
        if allowed:
            return
        name = meta.get("name", "")
        raise errors.ApiError(403, "Forbidden",
                              f'{info.qualified} "{name}" is forbidden: {forbidden_message(user, attrs, reason)}',
                              name=name, group=info.group, kind=info.resource)
