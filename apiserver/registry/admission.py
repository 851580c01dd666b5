"""Admission checks that need the host: aggregated resources get no host admission, so we do it."""

from __future__ import annotations

import time
from typing import Any, Protocol

from apiserver.apis.resource import ResourceInfo
from apiserver.kubeclient.client import HostError, HostUnavailable, KubeClient
from apiserver.machinery import errors

ACTIVE_TTL = 5.0


class Admission(Protocol):
    async def admit_create(self, info: ResourceInfo, obj: dict[str, Any]) -> None: ...


class NamespaceLifecycle:
    """Creating in a missing namespace is 404, in a terminating one 403, as kube answers."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self._active: dict[str, float] = {}

    async def admit_create(self, info: ResourceInfo, obj: dict[str, Any]) -> None:
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
