"""The built server (:class:`Server`): its aiohttp application (routes, filter chain, start and
stop) and what the application serves with, made by :func:`apiserver.server.new.new_server`;
and how it runs until told to stop."""

from __future__ import annotations

import asyncio
import gc
import logging
import platform
import signal
import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiohttp import web

from apiserver import __version__
from apiserver.apis.resource import VIRTUALCLUSTERCREDENTIALS, VIRTUALCLUSTERS
from apiserver.auth.authn import Authenticator, Authorizer
from apiserver.auth.delegated import AuthenticationSource
from apiserver.endpoints import discovery, openapi
from apiserver.endpoints import negotiation as wire
from apiserver.endpoints.credentials import OwnCredentials, revocation_events
from apiserver.endpoints.handlers import ResourceHandlers
from apiserver.endpoints.kubeconfig import KubeconfigIssuer
from apiserver.endpoints.tenantauthz import TenantAuthorization
from apiserver.etcd.client import EtcdClient, EtcdError
from apiserver.kubeclient.client import KubeClient
from apiserver.kubeclient.events import EventRecorder
from apiserver.registry.credential import CredentialSweeper
from apiserver.registry.store import Registry
from apiserver.registry.virtualcluster import VirtualClusterStorage
from apiserver.server.filters import (
    MAX_BODY,
    Handler,
    auth_middleware,
    error_middleware,
    inflight_middleware,
    metrics_middleware,
)
from apiserver.server.healthz import Check, health_routes
from apiserver.server.metrics import Metrics
from apiserver.server.tenantmetrics import TenantMetrics
from apiserver.storage.cacher import WatchCache
from apiserver.storage.secrets import SecretStore
from apiserver.transport.http2 import AlpnSite

if TYPE_CHECKING:
    from apiserver.server.config import CompletedConfig, KubeconfigConfig, LimitsConfig

__all__ = ["SHUTDOWN_TIMEOUT", "Lifecycle", "Server", "build_app", "version_info"]

log = logging.getLogger("vc-apiserver")

GV_PATH = f"/apis/{VIRTUALCLUSTERS.group_version}"
SHUTDOWN_TIMEOUT = 60.0  # seconds requests in flight get to finish once the listener is closed (kube's)


@dataclass
class Lifecycle:
    """The one part of a built server that changes while it runs: where it is in its life. It stays
    mutable because ``/readyz`` must fail from the moment SIGTERM arrives while every request is still
    served (kube's ShutdownDelayDuration), and the health checks read it on every probe."""

    shutting_down: bool = False


@dataclass(frozen=True)
class Server:
    """A server as :func:`~apiserver.server.new.new_server` builds it: what it was built from,
    the app, and the runtime parts the composition root hands to the reconciler (the registry, the watch
    cache, etcd, the host client, Events and the tenant secret store). Nothing is replaced once built;
    only :attr:`lifecycle` changes."""

    config: CompletedConfig
    serving_context: ssl.SSLContext
    app: web.Application
    lifecycle: Lifecycle
    authentication: AuthenticationSource
    etcd: EtcdClient
    cache: WatchCache
    registry: Registry
    credentials: Registry  # the issued credentials, which a client CA rotation's end deletes
    secrets: SecretStore | None
    host: KubeClient | None
    events: EventRecorder
    tenant_metrics: TenantMetrics  # metering; the composition root hands it the runtime's usage

    async def run(self) -> None:
        """Serve until SIGTERM or SIGINT, then shut down as kube-apiserver does."""
        serving = self.config.serving
        await self.authentication.start()
        # Go's servers read up to 1 MiB of request line and headers; aiohttp's 8 KiB defaults would
        # refuse long label selectors and bearer tokens with a plain-text 400 instead of a Status.
        # TCP keep-alive is set by AlpnSite on every accepted connection, whichever protocol it speaks.
        runner = web.AppRunner(self.app, access_log=None, handle_signals=False, max_line_size=1 << 20,
                               max_field_size=64 << 10, shutdown_timeout=SHUTDOWN_TIMEOUT,
                               keepalive_timeout=serving.idle_timeout, tcp_keepalive=False)
        await runner.setup()
        site = AlpnSite(runner, serving.bind_address, serving.secure_port, ssl_context=self.serving_context,
                        idle_timeout=serving.idle_timeout, backlog=1024,
                        max_streams=serving.max_streams_per_connection)
        await site.start()
        log.info("serving on https://%s:%d", serving.bind_address, serving.secure_port)
        # What exists once the server is up (modules, schemas, the OpenAPI document, the app) lives as long
        # as the process: out of the cycle collector's way, which would walk all of it in every full collection.
        gc.collect()
        gc.freeze()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        # As kube-apiserver terminates: /readyz fails at once, everything is served for the delay, then
        # the listener closes, every watch ends cleanly (its client re-watches elsewhere), and requests
        # in flight get SHUTDOWN_TIMEOUT to finish.
        self.lifecycle.shutting_down = True
        log.info("shutting down: /readyz fails from now on; serving for %gs more (--shutdown-delay-duration)",
                 serving.shutdown_delay)
        await asyncio.sleep(serving.shutdown_delay)
        await runner.cleanup()
        log.info("shut down")


# -- the application -------------------------------------------------------------------

def build_app(*, etcd: EtcdClient, cache: WatchCache, virtualclusters: VirtualClusterStorage, credentials: Registry,
              credentials_cache: WatchCache, host: KubeClient | None, events: EventRecorder,
              metrics: Metrics, authenticator: Authenticator, authorizer: Authorizer, limits: LimitsConfig,
              kubeconfig: KubeconfigConfig, version: dict[str, str], lifecycle: Lifecycle,
              tenant_metrics: TenantMetrics) -> web.Application:
    """The routes and the filter chain over what the server serves with; the app starts etcd and the
    watch cache, and stops them last."""
    app = web.Application(
        client_max_size=MAX_BODY,
        middlewares=[metrics_middleware(metrics), error_middleware,
                     inflight_middleware(limits.max_requests_inflight, limits.max_mutating_requests_inflight),
                     auth_middleware(authenticator, authorizer)],
    )
    handlers = ResourceHandlers(virtualclusters.registry,
                                on_watch_change=lambda d: metrics.watchers.labels(VIRTUALCLUSTERS.resource).inc(d))

    async def etcd_check() -> None:
        try:
            await etcd.status()
        except EtcdError as e:
            raise RuntimeError(f"etcd: {e.message}") from e

    async def cache_check() -> None:
        if not cache.ready:
            raise RuntimeError("watch cache not initialized")

    readiness_checks: dict[str, Check] = {"etcd": etcd_check, "watch-cache": cache_check}
    issuer = KubeconfigIssuer(virtualclusters.kubeconfig, credentials, events, kubeconfig.max_expiration,
                              kubeconfig.wake_estimate, issued=tenant_metrics.issued, host=host)
    own_credentials = OwnCredentials(credentials, virtualclusters.registry)
    webhook = TenantAuthorization(virtualclusters.kubeconfig, credentials, authorizer)
    sweeper = CredentialSweeper(credentials, virtualclusters.registry, host=host, authorizer=authorizer)

    async def version_handler(request: web.Request) -> web.Response:
        return wire.render(version)

    async def metrics_handler(request: web.Request) -> web.Response:
        metrics.objects.labels(VIRTUALCLUSTERS.resource).set(len(cache))
        body, content_type = metrics.exposition()
        resp = web.Response(body=body)
        resp.headers["Content-Type"] = content_type
        return resp

    ns_collection = GV_PATH + "/namespaces/{namespace}/virtualclusters"
    item = ns_collection + "/{name}"
    vc = "resource:virtualclusters"
    # One resource per path, the object itself first: aiohttp tries the resources under a common
    # prefix in registration order, one regular expression each, and a get by name is most requests.
    # The verbs are kube-apiserver's for a CRD: a POST to an object's path creates from the body, PUT
    # and PATCH of the collection lack a name, the status subresource refuses create and delete, an
    # unknown subresource is the object not found, and the cluster-wide path serves list and watch only.
    routes: list[tuple[str, str, dict[str, Handler]]] = [
        (item, f"{vc}.item", {"GET": handlers.get, "PUT": handlers.update, "PATCH": handlers.patch,
                              "DELETE": handlers.delete, "POST": handlers.create}),
        (ns_collection, f"{vc}.collection", {"GET": handlers.list_or_watch, "POST": handlers.create,
                                             "DELETE": handlers.delete_collection, "PUT": handlers.nameless,
                                             "PATCH": handlers.nameless}),
        (item + "/{subresource:status}", f"{vc}.subresource", {"GET": handlers.get, "PUT": handlers.update,
                                                               "PATCH": handlers.patch,
                                                               "POST": handlers.not_supported,
                                                               "DELETE": handlers.not_supported}),
        (item + "/{subresource:kubeconfig}", f"{vc}.subresource.kubeconfig", {"GET": issuer.handle}),
        (item + "/{subresource:credentials}", f"{vc}.subresource.credentials", {"GET": own_credentials.handle}),
        (item + "/{subresource}", f"{vc}.subresource.unknown", {method: handlers.unknown_subresource for method in
                                                               ("GET", "PUT", "PATCH", "POST", "DELETE")}),
        (GV_PATH + "/virtualclusters", f"{vc}.all", {"GET": handlers.list_or_watch, "POST": handlers.not_served,
                                                     "PUT": handlers.not_served, "PATCH": handlers.not_served,
                                                     "DELETE": handlers.not_served}),
    ]
    # Credentials are issued by the kubeconfig subresource and revoked by deleting them: read and delete
    # only, every other verb is the method kube refuses for a resource without it.
    creds = ResourceHandlers(credentials, on_deleted=revocation_events(virtualclusters.registry, events, host))
    cred_collection = GV_PATH + "/namespaces/{namespace}/" + VIRTUALCLUSTERCREDENTIALS.resource
    cr = f"resource:{VIRTUALCLUSTERCREDENTIALS.resource}"
    routes += [
        (cred_collection + "/{name}", f"{cr}.item", {"GET": creds.get, "DELETE": creds.delete,
                                                     "PUT": creds.not_supported, "PATCH": creds.not_supported,
                                                     "POST": creds.not_supported}),
        (cred_collection, f"{cr}.collection", {"GET": creds.list_or_watch, "DELETE": creds.delete_collection,
                                               "POST": creds.not_supported, "PUT": creds.nameless,
                                               "PATCH": creds.nameless}),
        (cred_collection + "/{name}/{subresource}", f"{cr}.subresource.unknown", {
            method: creds.unknown_subresource for method in ("GET", "PUT", "PATCH", "POST", "DELETE")}),
        (GV_PATH + "/" + VIRTUALCLUSTERCREDENTIALS.resource, f"{cr}.all", {
            "GET": creds.list_or_watch, "POST": creds.not_served, "PUT": creds.not_served,
            "PATCH": creds.not_served, "DELETE": creds.not_served}),
    ]
    for path, name, methods in routes:
        resource = app.router.add_resource(path, name=name)
        for method, handler in methods.items():
            resource.add_route(method, handler)
            if method == "GET":
                resource.add_route("HEAD", handler)  # as web.get() registers it
    app.add_routes([
        web.get("/version", version_handler),
        web.get("/metrics", metrics_handler),
        *discovery.routes([VIRTUALCLUSTERS, VIRTUALCLUSTERCREDENTIALS]),
        *webhook.routes(),
        *openapi.routes(),
        *health_routes(readiness_checks, lambda: lifecycle.shutting_down),
    ])

    async def startup(app: web.Application) -> None:
        await etcd.start()
        await cache.start()
        await credentials_cache.start()
        sweeper.start()

    async def cleanup(app: web.Application) -> None:
        await sweeper.stop()
        await credentials_cache.stop()
        await cache.stop()
        await etcd.close()

    async def end_watches(app: web.Application) -> None:
        """On shutdown, once the listener is closed: every watch ends as a finished response, and its
        client re-watches from its last resourceVersion, against another replica."""
        handlers.end_watches("the server is shutting down")

    app.on_startup.append(startup)
    app.on_shutdown.append(end_watches)
    app.on_cleanup.append(cleanup)
    return app


def version_info() -> dict[str, str]:
    """This server's own version, in kube's /version shape."""
    major, minor = __version__.split(".")[:2]
    return {"major": major, "minor": minor, "gitVersion": f"v{__version__}", "gitCommit": "",
            "gitTreeState": "clean", "buildDate": "", "goVersion": f"python{platform.python_version()}",
            "compiler": "cpython", "platform": f"{platform.system().lower()}/{platform.machine()}"}
