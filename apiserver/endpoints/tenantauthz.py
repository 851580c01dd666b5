"""The authorization webhook tenant apiservers ask about requests made with an issued credential.

A tenant apiserver's authorizers are Node, this webhook, then RBAC (its structured authorization
configuration, :mod:`reconciler.runtime.authz`). It calls the webhook only for users in a
``kosmos:credential:<name>`` group (a CEL match condition), so its own components and this server's
break-glass credential never depend on it. The answer is never "allow", only "deny" or "no opinion"
(RBAC decides then):

- **deny** when the credential's object is gone (``kubectl delete virtualclustercredential`` revoked it),
  was issued for another VirtualCluster, or when its host user may no longer ``get
  virtualclusters/kubeconfig`` of the cluster (the host's SubjectAccessReview, cached 10 s);
- **no opinion** otherwise, and whenever this server cannot tell (the host does not answer): an outage
  falls back to RBAC and locks no one out. The tenant apiserver fails open too when this server is down
  (``failurePolicy: NoOpinion``), and caches every answer for ``unauthorizedTTL``: the revocation delay.

The caller is the tenant apiserver, not a host user: it proves itself with a bearer token derived from
its tenant CA's key (:meth:`certs.tenant.TenantPki.webhook_token`), checked against the path's cluster.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hmac
import logging
import time
from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web

from apiserver.auth.authn import Authorizer
from apiserver.machinery import errors
from apiserver.machinery.jsonutil import Obj
from apiserver.machinery.timefmt import parse_rfc3339, rfc3339
from apiserver.registry.credential.access import access_lost
from apiserver.registry.rest import WriteOptions
from apiserver.registry.store import Registry
from apiserver.registry.virtualcluster.kubeconfig import KubeconfigREST
from certs.tenant import credential_of

__all__ = ["PATH_PREFIX", "TenantAuthorization", "webhook_path"]

log = logging.getLogger(__name__)

PATH_PREFIX = "/tenant-authorization/"
ROUTE = PATH_PREFIX + "namespaces/{namespace}/virtualclusters/{name}"
LAST_USED_EVERY = 60.0  # seconds: how often a credential's lastUsedTime is written at most
FIELD_MANAGER = "vc-apiserver"


def webhook_path(namespace: str, name: str) -> str:
    """The path a tenant's apiserver posts its SubjectAccessReviews to."""
    return f"{PATH_PREFIX}namespaces/{namespace}/virtualclusters/{name}"


def _review(status: dict[str, Any]) -> web.Response:
    body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "status": status}
    return web.Response(body=orjson.dumps(body), content_type="application/json")


def no_opinion(reason: str = "") -> web.Response:
    return _review({"allowed": False, **({"reason": reason} if reason else {})})


def deny(reason: str) -> web.Response:
    return _review({"allowed": False, "denied": True, "reason": reason})


class TenantAuthorization:
    """The webhook's handler; ``clock`` is wall time in seconds (lastUsedTime)."""

    def __init__(self, clusters: KubeconfigREST, credentials: Registry, authorizer: Authorizer,
                 clock: Callable[[], float] = time.time) -> None:
        self.clusters = clusters
        self.credentials = credentials
        self.authorizer = authorizer
        self.clock = clock
        self._tokens: dict[str, str] = {}  # VirtualCluster uid → the webhook token of its tenant PKI
        self._last_written: dict[str, float] = {}  # credential uid → when its lastUsedTime was last written
        self._writes: set[asyncio.Task[None]] = set()

    async def _token(self, obj: Obj) -> str | None:
        uid = obj["metadata"].get("uid", "")
        token = self._tokens.get(uid)
        if token is None:
            tenant = await self.clusters.tenant_pki(obj)
            if tenant is None:
                return None
            token = self._tokens[uid] = tenant.webhook_token()
        return token

    async def _authenticate(self, request: web.Request, namespace: str, name: str) -> None:
        """The caller is the apiserver of this very tenant, or the request is refused (401)."""
        scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not presented:
            raise errors.unauthorized()
        try:
            obj = await self.clusters.registry.get(namespace, name)
        except errors.ApiError as e:
            if e.code == 404:
                raise errors.unauthorized() from None
            raise
        token = await self._token(obj)
        if token is None or not hmac.compare_digest(token.encode(), presented.strip().encode()):
            raise errors.unauthorized()

    async def handle(self, request: web.Request) -> web.Response:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        await self._authenticate(request, namespace, name)
        try:
            review = orjson.loads(await request.read())
            spec = review["spec"]
            groups = [g for g in spec.get("groups") or [] if isinstance(g, str)]
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
            raise errors.bad_request("the body is not a SubjectAccessReview") from None
        credential = credential_of(groups)
        if credential is None:
            return no_opinion()
        try:
            obj = await self.credentials.get(namespace, credential)
        except errors.ApiError as e:
            if e.code == 404:
                return deny(f"the credential {credential} was revoked")
            log.warning("cannot read credential %s/%s: %s", namespace, credential, e.message)
            return no_opinion()
        cred = obj.get("spec") or {}
        if cred.get("virtualCluster") != name:
            return deny(f"the credential {credential} was not issued for this cluster")
        if obj["metadata"].get("deletionTimestamp"):
            return deny(f"the credential {credential} was revoked")
        if reason := await access_lost(self.authorizer, namespace, name, cred):
            return deny(reason)
        self._record_use(namespace, obj)
        return no_opinion()

    def _record_use(self, namespace: str, obj: Obj) -> None:
        """Write ``status.lastUsedTime`` at most every LAST_USED_EVERY seconds, off the answer's path."""
        meta = obj["metadata"]
        uid, now = meta.get("uid", ""), self.clock()
        written = self._last_written.get(uid)
        if written is None:
            last = (obj.get("status") or {}).get("lastUsedTime")
            try:
                written = parse_rfc3339(last).timestamp() if last else 0.0
            except ValueError:
                written = 0.0
        if now - written < LAST_USED_EVERY:
            return
        self._last_written[uid] = now
        stamp = rfc3339(dt.datetime.fromtimestamp(now, dt.UTC))

        async def used(current: Obj) -> Obj:
            current.setdefault("status", {})["lastUsedTime"] = stamp
            return current

        async def write() -> None:
            try:
                await self.credentials.update_with(namespace, meta["name"], used,
                                                   WriteOptions(field_manager=FIELD_MANAGER), subresource="status")
            except errors.ApiError as e:
                if e.code != 404:
                    log.warning("cannot record the use of credential %s/%s: %s", namespace, meta["name"], e.message)

        task = asyncio.create_task(write())
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    def routes(self) -> list[web.RouteDef]:
        return [web.post(ROUTE, self.handle)]
