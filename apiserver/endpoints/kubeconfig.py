"""The ``kubeconfig`` subresource: a credential for the tenant cluster, minted for the caller.

The client certificate's CN is the requesting user and its O is
``kosmos:tenant-admins`` (cluster-admin inside the tenant). It expires after
``expirationSeconds`` (default one day, at least 10 minutes, at most the server's
limit). Each issuance is an Event on the VirtualCluster; the key is never logged.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

from aiohttp import web

from apiserver.apis.conditions import find_condition
from apiserver.auth.authn import UserInfo
from apiserver.endpoints import negotiation as wire
from apiserver.kubeclient.events import EventRecorder
from apiserver.machinery import errors
from apiserver.registry.store import Registry
from apiserver.storage.secrets import SecretStore, load_pki
from certs import pki
from certs.tenant import TENANT_ADMINS

DEFAULT_EXPIRATION = 86400
MIN_EXPIRATION = 600


def _ready(obj: dict[str, Any]) -> bool:
    status = obj.get("status") or {}
    cond = find_condition(status.get("conditions"), "ControlPlaneReady")
    return bool(cond and cond.get("status") == "True" and status.get("controlPlaneEndpoint"))


def expiration(query: Any, maximum: int) -> int:
    raw = query.get("expirationSeconds")
    if raw is None or raw == "":
        return min(DEFAULT_EXPIRATION, maximum)
    try:
        seconds = int(raw)
    except ValueError:
        raise errors.bad_request(f'expirationSeconds must be an integer, got "{raw}"') from None
    return max(MIN_EXPIRATION, min(seconds, maximum))


class KubeconfigIssuer:
    def __init__(self, registry: Registry, secrets: SecretStore | None, events: EventRecorder,
                 max_expiration: int) -> None:
        self.registry = registry
        self.secrets = secrets
        self.events = events
        self.max_expiration = max_expiration

    def _not_ready(self, name: str, phase: str, detail: str = "") -> errors.ApiError:
        info = self.registry.info
        message = f'{info.qualified} "{name}" is not ready: phase is {phase or "Pending"}'
        return errors.ApiError(409, "Conflict", message + (f"; {detail}" if detail else ""),
                               name=name, group=info.group, kind=info.resource)

    async def handle(self, request: web.Request) -> web.Response:
        target = wire.negotiate(request.headers.get("Accept"), allow_as=False)
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        seconds = expiration(request.rel_url.query, self.max_expiration)
        obj = await self.registry.get(namespace, name)
        phase = (obj.get("status") or {}).get("phase", "")
        if obj["metadata"].get("deletionTimestamp"):
            raise self._not_ready(name, "Deleting")
        if self.secrets is None:
            raise self._not_ready(name, phase, "no control-plane runtime is configured")
        if not _ready(obj):
            raise self._not_ready(name, phase)
        tenant = await load_pki(self.secrets, obj)
        if tenant is None:
            raise self._not_ready(name, phase, "its credentials are being prepared")
        user: UserInfo = request["user"]
        not_after = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds)
        credential = await asyncio.to_thread(tenant.mint_client, user.name, (TENANT_ADMINS,), not_after)
        cluster = f"{namespace}-{name}"
        config = pki.kubeconfig(obj["status"]["controlPlaneEndpoint"], tenant.files["ca.crt"], user.name,
                                credential.cert_pem, credential.key_pem, cluster=cluster,
                                context=f"{cluster}")
        await self.events.record(obj, "Normal", "KubeconfigIssued",
                                 f"kubeconfig issued to {user.name}, valid until "
                                 f"{not_after.strftime('%Y-%m-%dT%H:%M:%SZ')}")
        return wire.render(config, target)
