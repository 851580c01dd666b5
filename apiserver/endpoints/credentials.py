"""What serving VirtualClusterCredentials adds to the generic handlers.

- Every revocation is an Event on the VirtualCluster, naming whose credential it was and who revoked
  it (the host's audit log has the request itself, as it has each issuance's).
- The ``credentials`` subresource of a VirtualCluster lists the caller's own credentials for it. The
  host authorizes every request before its aggregator proxies it here, so "a user sees their own" can
  only be a permission of its own: ``get virtualclusters/credentials``, granted beside
  ``virtualclusters/kubeconfig``, while listing everyone's (``virtualclustercredentials``) stays an
  admin's."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from apiserver.apis.credential import CLUSTER_LABEL, OWNER_LABEL, owner_label_value
from apiserver.auth.authn import UserInfo
from apiserver.endpoints import negotiation
from apiserver.kubeclient.client import HostError, HostUnavailable, KubeClient
from apiserver.kubeclient.events import EventRecorder
from apiserver.kubeclient.imported import ImportError_, import_ref, reach
from apiserver.machinery import errors
from apiserver.machinery.jsonutil import Obj
from apiserver.machinery.selectors import parse_label_selector
from apiserver.registry.rest import ListOptions
from apiserver.registry.store import Registry

__all__ = ["OwnCredentials", "revocation_events"]

log = logging.getLogger(__name__)


def revocation_events(clusters: Registry, events: EventRecorder,
                      host: KubeClient | None = None) -> Callable[[web.Request, list[Obj]], Awaitable[None]]:
    """The ``on_deleted`` hook of the credentials' handlers: the Event, and for an imported cluster the
    credential's ServiceAccount deleted there at once (the sweep retries what fails here)."""

    async def revoked(request: web.Request, objs: list[Obj]) -> None:
        by: UserInfo | None = request.get("user")
        for obj in objs:
            meta, spec = obj["metadata"], obj.get("spec") or {}
            try:
                cluster = await clusters.get(meta["namespace"], str(spec.get("virtualCluster", "")))
            except errors.ApiError:
                continue  # its cluster is gone: nothing to tell the story on
            if host is not None and import_ref(cluster) is not None:
                await _revoke_imported(host, cluster, meta["name"])
            await events.record(cluster, "Normal", "CredentialRevoked",
                                f"credential {meta['name']} issued to {spec.get('user')} revoked by "
                                f"{by.name if by else 'the server'}")
    return revoked


class OwnCredentials:
    """``GET .../virtualclusters/{name}/credentials``: the caller's credentials for the cluster, a
    VirtualClusterCredentialList."""

    def __init__(self, credentials: Registry, clusters: Registry) -> None:
        self.credentials = credentials
        self.clusters = clusters

    async def handle(self, request: web.Request) -> web.Response:
        target = negotiation.negotiate(request.headers.get("Accept"), allow_as=False)
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        await self.clusters.get_entry(namespace, name)  # 404 for a cluster that does not exist
        user: UserInfo = request["user"]
        selector = parse_label_selector(f"{CLUSTER_LABEL}={name},{OWNER_LABEL}={owner_label_value(user.name)}")
        listed = await self.credentials.list(namespace, ListOptions(label_selector=selector))
        info = self.credentials.info
        items = [e.obj for e in listed.entries if (e.obj.get("spec") or {}).get("user") == user.name]
        return negotiation.render({"apiVersion": info.group_version, "kind": info.list_kind,
                                   "metadata": listed.list_meta(), "items": items}, target)


async def _revoke_imported(host: KubeClient, cluster: Obj, credential: str) -> None:
    try:
        async with reach(host, cluster) as imported:
            await imported.revoke(credential)
    except (ImportError_, HostError, HostUnavailable) as e:
        log.warning("cannot revoke credential %s in the imported cluster now (the sweep retries): %s", credential, e)
