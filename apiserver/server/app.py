"""The aiohttp application: the server's state, its routes and filter chain, start and stop."""

from __future__ import annotations

import logging
import platform
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from apiserver import __version__
from apiserver.apis.resource import VIRTUALCLUSTERS
from apiserver.auth.authn import Authenticator, Authorizer
from apiserver.endpoints import discovery, openapi
from apiserver.endpoints import negotiation as wire
from apiserver.endpoints.handlers import ResourceHandlers
from apiserver.endpoints.kubeconfig import KubeconfigIssuer
from apiserver.etcd.client import EtcdClient, EtcdError
from apiserver.kubeclient.client import KubeClient
from apiserver.kubeclient.events import EventRecorder
from apiserver.registry.admission import Admission
from apiserver.registry.kubeconfig import KubeconfigREST
from apiserver.registry.store import Registry
from apiserver.registry.virtualcluster import VirtualClusterStrategy
from apiserver.server.filters import (
    MAX_BODY,
    auth_middleware,
    error_middleware,
    inflight_middleware,
    metrics_middleware,
)
from apiserver.server.healthz import Check, health_routes
from apiserver.server.metrics import Metrics
from apiserver.storage.cacher import WatchCache
from apiserver.storage.delegator import CachedStore
from apiserver.storage.etcd3 import Store
from apiserver.storage.secrets import SecretStore

log = logging.getLogger(__name__)

GV_PATH = f"/apis/{VIRTUALCLUSTERS.group_version}"


@dataclass
class ServerState:
    """Everything the handlers share; built by :func:`build_app`, started on app startup."""

    etcd: EtcdClient
    authenticator: Authenticator
    authorizer: Authorizer
    metrics: Metrics
    version: dict[str, str]
    host: KubeClient | None = None
    admission: list[Admission] = field(default_factory=list)
    secrets: SecretStore | None = None
    max_kubeconfig_expiration: int = 365 * 86400
    wake_estimate: int = 30  # seconds a hibernated control plane of the configured runtime takes to wake
    max_requests_inflight: int = 400
    max_mutating_requests_inflight: int = 200
    events: EventRecorder = field(init=False)
    cache: WatchCache = field(init=False)
    registry: Registry = field(init=False)
    started: float = field(default_factory=time.monotonic)
    readiness_checks: dict[str, Check] = field(default_factory=dict)
    shutting_down: bool = False  # SIGTERM received: /readyz fails while requests are still served
    background: list[Callable[[], Awaitable[Any]]] = field(default_factory=list)


STATE = web.AppKey("state", ServerState)
SHUTDOWN_TIMEOUT = 60.0  # seconds requests in flight get to finish once the listener is closed (kube's)


# -- the application -------------------------------------------------------------------

def build_app(state: ServerState) -> web.Application:
    app = web.Application(
        client_max_size=MAX_BODY,
        middlewares=[metrics_middleware(state.metrics), error_middleware,
                     inflight_middleware(state.max_requests_inflight, state.max_mutating_requests_inflight),
                     auth_middleware(state.authenticator, state.authorizer)],
    )
    app[STATE] = state
    store = Store(state.etcd, VIRTUALCLUSTERS)
    state.cache = WatchCache(state.etcd, store.layout)
    state.registry = Registry(CachedStore(store, state.cache), VirtualClusterStrategy(), state.admission)
    handlers = ResourceHandlers(state.registry,
                                on_watch_change=lambda d: state.metrics.watchers.labels(
                                    VIRTUALCLUSTERS.resource).inc(d))

    async def etcd_check() -> None:
        try:
            await state.etcd.status()
        except EtcdError as e:
            raise RuntimeError(f"etcd: {e.message}") from e

    async def cache_check() -> None:
        if not state.cache.ready:
            raise RuntimeError("watch cache not initialized")

    state.readiness_checks.setdefault("etcd", etcd_check)
    state.readiness_checks.setdefault("watch-cache", cache_check)

    state.events = EventRecorder(state.host)
    kubeconfig = KubeconfigIssuer(KubeconfigREST(state.registry, state.secrets), state.events,
                                  state.max_kubeconfig_expiration, state.wake_estimate)

    async def version(request: web.Request) -> web.Response:
        return wire.render(state.version)

    async def metrics(request: web.Request) -> web.Response:
        state.metrics.objects.labels(VIRTUALCLUSTERS.resource).set(len(state.cache))
        body, content_type = state.metrics.exposition()
        resp = web.Response(body=body)
        resp.headers["Content-Type"] = content_type
        return resp

    ns_collection = GV_PATH + "/namespaces/{namespace}/virtualclusters"
    item = ns_collection + "/{name}"
    # One resource per path, the object itself first: aiohttp tries the resources under a common
    # prefix in registration order, one regular expression each, and a get by name is most requests.
    # The verbs are kube-apiserver's for a CRD: a POST to an object's path creates from the body, PUT
    # and PATCH of the collection lack a name, the status subresource refuses create and delete, an
    # unknown subresource is the object not found, and the cluster-wide path serves list and watch only.
    for path, name, methods in (
        (item, "vc.item", {"GET": handlers.get, "PUT": handlers.update, "PATCH": handlers.patch,
                           "DELETE": handlers.delete, "POST": handlers.create}),
        (ns_collection, "vc.collection", {"GET": handlers.list_or_watch, "POST": handlers.create,
                                          "DELETE": handlers.delete_collection, "PUT": handlers.nameless,
                                          "PATCH": handlers.nameless}),
        (item + "/{subresource:status}", "vc.subresource", {"GET": handlers.get, "PUT": handlers.update,
                                                            "PATCH": handlers.patch,
                                                            "POST": handlers.not_supported,
                                                            "DELETE": handlers.not_supported}),
        (item + "/{subresource:kubeconfig}", "vc.subresource.kubeconfig", {"GET": kubeconfig.handle}),
        (item + "/{subresource}", "vc.subresource.unknown", {method: handlers.unknown_subresource for method in
                                                            ("GET", "PUT", "PATCH", "POST", "DELETE")}),
        (GV_PATH + "/virtualclusters", "vc.all", {"GET": handlers.list_or_watch, "POST": handlers.not_served,
                                                  "PUT": handlers.not_served, "PATCH": handlers.not_served,
                                                  "DELETE": handlers.not_served}),
    ):
        resource = app.router.add_resource(path, name=name)
        for method, handler in methods.items():
            resource.add_route(method, handler)
            if method == "GET":
                resource.add_route("HEAD", handler)  # as web.get() registers it
    app.add_routes([
        web.get("/version", version),
        web.get("/metrics", metrics),
        *discovery.routes([VIRTUALCLUSTERS]),
        *openapi.routes(),
        *health_routes(state.readiness_checks, lambda: state.shutting_down),
    ])

    async def startup(app: web.Application) -> None:
        await state.etcd.start()
        await state.cache.start()
        for start in state.background:
            await start()

    async def cleanup(app: web.Application) -> None:
        await state.cache.stop()
        await state.etcd.close()

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
