"""The ``kubeconfig`` subresource: a credential for the tenant cluster, minted for the caller.

The client certificate's CN is the requesting user and its O is
``kosmos:tenant-admins`` (cluster-admin inside the tenant) and ``kosmos:credential:<id>``. It
expires after ``expirationSeconds`` (default one hour, at least 10 minutes, at most the server's
limit and the cluster's ``spec.credentials.maxExpirationSeconds``). Each issuance is a VirtualClusterCredential named ``<id>`` (created before the certificate
is minted, so every certificate handed out can be listed and revoked) and an Event on the
VirtualCluster; the key is never logged.

A cluster that is not ready answers 409 Conflict saying why. One hibernated for inactivity with
``spec.hibernation.wakeOnAccess`` (the default) is woken by the fetch: the server records the wake
request (the annotation ``kosmos.io/wake-requested``, which the reconciler acts on) and the 409
says it is waking and about how long that takes, with ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from collections.abc import Callable
from typing import Any

from aiohttp import web

from apiserver.apis import hibernation
from apiserver.apis.credential import new_credential
from apiserver.apis.resource import CONTROL_PLANE_READY
from apiserver.apis.virtualcluster import VirtualCluster
from apiserver.auth.authn import UserInfo
from apiserver.endpoints import negotiation as wire
from apiserver.kubeclient.client import HostError, HostUnavailable, KubeClient
from apiserver.kubeclient.events import EventRecorder
from apiserver.kubeclient.imported import ImportError_, import_ref, reach
from apiserver.machinery import errors
from apiserver.machinery.timefmt import now_rfc3339, rfc3339
from apiserver.registry.rest import DeleteOptions, WriteOptions
from apiserver.registry.store import Registry
from apiserver.registry.virtualcluster.kubeconfig import KubeconfigREST
from certs import pki
from certs.tenant import TENANT_ADMINS, credential_group

DEFAULT_EXPIRATION = 3600
MIN_EXPIRATION = 600
FIELD_MANAGER = "vc-apiserver"  # the manager of the wake request it writes (the server's own name)


def _ready(vc: VirtualCluster) -> bool:
    return vc.status.is_true(CONTROL_PLANE_READY) and bool(vc.status.endpoint)


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
    def __init__(self, rest: KubeconfigREST, credentials: Registry, events: EventRecorder, max_expiration: int,
                 wake_estimate: int = 30, issued: Callable[[str, str], None] = lambda _ns, _name: None,
                 host: KubeClient | None = None) -> None:
        self.rest = rest
        self.host = host  # where an imported cluster's Secret is read
        self.credentials = credentials
        self.issued = issued  # told of each credential issued (namespace, name): metering
        self.events = events
        self.max_expiration = max_expiration
        self.wake_estimate = wake_estimate  # seconds a hibernated control plane usually takes to be ready

    def _conflict(self, name: str, message: str, retry_after: int | None = None) -> errors.ApiError:
        info = self.rest.registry.info
        return errors.ApiError(409, "Conflict", f'{info.qualified} "{name}" {message}', name=name, group=info.group,
                               kind=info.resource, retry_after=retry_after,
                               headers={"Retry-After": str(retry_after)} if retry_after else {})

    def _not_ready(self, name: str, phase: str, detail: str = "") -> errors.ApiError:
        return self._conflict(name, f"is not ready: phase is {phase or 'Pending'}" + (f"; {detail}" if detail else ""))

    def _waking(self, name: str) -> errors.ApiError:
        return self._conflict(name, f"is waking up from hibernation: its control plane is usually ready in about "
                                    f"{self.wake_estimate}s (its nodes follow); retry then, or wait with kubectl wait "
                                    f"--for=condition=Ready", retry_after=self.wake_estimate)

    async def _hibernated(self, obj: dict[str, Any]) -> errors.ApiError | None:
        """The answer for a hibernated or waking cluster (None for any other); a fetch wakes a cluster
        hibernated for inactivity when its spec allows it."""
        vc = VirtualCluster(obj)
        name = vc.meta.name
        why = vc.asleep
        if why == hibernation.SPEC:
            return self._conflict(name, "is hibernated: spec.hibernation.hibernated is true; set it to false to "
                                        "wake it")
        if why == hibernation.INACTIVE:
            if not vc.spec.hibernation.wake_on_access:
                return self._conflict(name, f"is hibernated after inactivity and spec.hibernation.wakeOnAccess is "
                                            f"false: to wake it, set the annotation {hibernation.WAKE_ANNOTATION} to "
                                            f"the current time (RFC 3339)")
            if not vc.wake_pending:
                await self._request_wake(obj)
            return self._waking(name)
        if vc.status.phase == "Waking":
            return self._waking(name)
        return None

    async def _request_wake(self, obj: dict[str, Any]) -> None:
        meta = VirtualCluster(obj).meta

        async def annotated(current: dict[str, Any]) -> dict[str, Any]:
            notes = current["metadata"].setdefault("annotations", {})
            notes[hibernation.WAKE_ANNOTATION] = now_rfc3339()
            return current
        await self.rest.registry.update_with(meta.namespace, meta.name, annotated,
                                             WriteOptions(field_manager=FIELD_MANAGER))
        await self.events.record(obj, "Normal", "WakeRequested", "kubeconfig fetched: waking the virtual cluster")

    async def _imported_kubeconfig(self, obj: dict[str, Any], credential_id: str, user: UserInfo, seconds: int,
                                   context: str) -> dict[str, Any]:
        """A token of the credential's own ServiceAccount in the imported cluster. If the cluster cannot
        make one, the credential's object goes too (nothing half-issued), and the caller gets a 503."""
        namespace = obj["metadata"]["namespace"]
        try:
            if self.host is None:
                raise ImportError_("importing a cluster needs a host cluster")
            async with reach(self.host, obj) as cluster:
                token = await cluster.issue(credential_id, seconds)
        except (ImportError_, HostError, HostUnavailable) as e:
            with contextlib.suppress(errors.ApiError):
                await self.credentials.delete(namespace, credential_id, DeleteOptions(), WriteOptions())
            raise errors.service_unavailable(f"the imported cluster cannot issue a credential now: {e}") from None
        config = pki.kubeconfig(cluster.server, cluster.ca or b"", user.name, token=token, cluster=context,
                                context=context)
        if cluster.ca is None:  # verified with the system's roots, as the Secret's kubeconfig is
            del config["clusters"][0]["cluster"]["certificate-authority-data"]
        return config

    async def handle(self, request: web.Request) -> web.Response:
        target = wire.negotiate(request.headers.get("Accept"), allow_as=False)
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        seconds = expiration(request.rel_url.query, self.max_expiration)
        obj = await self.rest.registry.get(namespace, name)
        vc = VirtualCluster(obj)
        if policy := ((obj.get("spec") or {}).get("credentials") or {}).get("maxExpirationSeconds"):
            seconds = min(seconds, int(policy))  # the cluster's own limit (at least MIN_EXPIRATION, by its schema)
        phase = vc.status.phase
        if vc.meta.deletion_timestamp:
            raise self._not_ready(name, "Deleting")
        imported = import_ref(obj) is not None
        if not imported and not self.rest.keeps_credentials:
            raise self._not_ready(name, phase, "no control-plane runtime is configured")
        asleep = None if imported else await self._hibernated(obj)
        if asleep is not None:
            raise asleep
        if not _ready(vc):
            raise self._not_ready(name, phase)
        tenant = None if imported else await self.rest.tenant_pki(obj)
        if not imported and tenant is None:
            raise self._not_ready(name, phase, "its credentials are being prepared")
        user: UserInfo = request["user"]
        not_after = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds)
        record = new_credential(namespace, name, user.name, user.uid, list(user.groups),
                                {k: list(v) for k, v in user.extra.items()}, rfc3339(not_after),
                                tenant.issuer() if tenant is not None else "")
        created = await self.credentials.create(namespace, record, WriteOptions(field_manager=FIELD_MANAGER))
        credential_id = created.obj["metadata"]["name"]
        cluster = f"{namespace}-{name}"
        if tenant is None:
            config = await self._imported_kubeconfig(obj, credential_id, user, seconds, cluster)
        else:
            credential = await asyncio.to_thread(tenant.mint_user, user.name,
                                                 (TENANT_ADMINS, credential_group(credential_id)), not_after)
            config = pki.kubeconfig(vc.status.endpoint, tenant.files["ca.crt"], user.name,
                                    credential.cert_pem, credential.key_pem, cluster=cluster,
                                    context=f"{cluster}")
        self.issued(namespace, name)
        await self.events.record(obj, "Normal", "KubeconfigIssued",
                                 f"kubeconfig issued to {user.name}, valid until {rfc3339(not_after)}: "
                                 f"credential {credential_id}")
        return wire.render(config, target)
