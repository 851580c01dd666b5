"""The aiohttp application: routes, the middleware chain, and non-resource endpoints."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import platform
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from apiserver import __version__
from apiserver.apis.resource import VIRTUALCLUSTERS, ResourceInfo
from apiserver.auth.authn import (
    ANONYMOUS_USER,
    Attributes,
    Authenticator,
    Authorizer,
    forbidden_message,
    is_health_path,
)
from apiserver.endpoints import discovery, openapi
from apiserver.endpoints import negotiation as wire
from apiserver.endpoints.handlers import ResourceHandlers
from apiserver.endpoints.kubeconfig import KubeconfigIssuer
from apiserver.etcd.client import EtcdClient, EtcdError
from apiserver.kubeclient.client import KubeClient
from apiserver.kubeclient.events import EventRecorder
from apiserver.machinery import errors
from apiserver.machinery.selectors import parse_field_selector
from apiserver.registry.admission import Admission
from apiserver.registry.store import Registry
from apiserver.registry.virtualcluster import VirtualClusterStrategy
from apiserver.server.metrics import Metrics
from apiserver.storage.etcd3 import Store
from apiserver.storage.secrets import SecretStore

log = logging.getLogger(__name__)

MAX_BODY = 3 * 1024 * 1024
GV_PATH = f"/apis/{VIRTUALCLUSTERS.group}/{VIRTUALCLUSTERS.version}"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

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
    max_requests_inflight: int = 400
    max_mutating_requests_inflight: int = 200
    events: EventRecorder = field(init=False)
    store: Store = field(init=False)
    registry: Registry = field(init=False)
    started: float = field(default_factory=time.monotonic)
    readiness_checks: dict[str, Callable[[], Awaitable[None]]] = field(default_factory=dict)
    shutting_down: bool = False  # SIGTERM received: /readyz fails while requests are still served
    background: list[Callable[[], Awaitable[Any]]] = field(default_factory=list)


STATE = web.AppKey("state", ServerState)
SHUTDOWN_TIMEOUT = 60.0  # seconds requests in flight get to finish once the listener is closed (kube's)


# -- request info ------------------------------------------------------------------------

def request_attributes(request: web.Request) -> Attributes:
    """kube's RequestInfo: the verb and resource a request acts on."""
    route = request.match_info.route
    name = route.name if route is not None else None
    path = request.path
    method = request.method
    if name is None or not name.startswith("vc."):
        verb = {"GET": "get", "HEAD": "get", "POST": "post", "PUT": "put", "PATCH": "patch",
                "DELETE": "delete"}.get(method, method.lower())
        return Attributes(verb=verb, path=path)
    info = VIRTUALCLUSTERS
    match = request.match_info
    item = "name" in request.match_info
    watch = request.rel_url.query.get("watch") in ("true", "1", "True")
    if method in ("GET", "HEAD"):
        verb = ("watch" if watch else "get") if item else ("watch" if watch else "list")
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch",
                "DELETE": "delete" if item else "deletecollection"}.get(method, method.lower())
    object_name = match.get("name", "")
    if not item and verb in ("list", "watch") and request.rel_url.query.get("fieldSelector"):
        with contextlib.suppress(errors.ApiError):  # a malformed selector is the handler's 400 to give
            object_name = parse_field_selector(request.rel_url.query["fieldSelector"], None).exact_name() or ""
    return Attributes(verb=verb, path=path, resource_request=True, namespace=match.get("namespace", ""),
                      group=info.group, version=info.version, resource=info.resource,
                      subresource=match.get("subresource", ""), name=object_name)


def attributes_of(request: web.Request) -> Attributes:
    """The request's attributes, derived once and shared by authorization and metrics."""
    attrs = request.get("attrs")
    if attrs is None:
        attrs = request["attrs"] = request_attributes(request)
    return attrs


# -- middlewares ---------------------------------------------------------------------------

@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure leaves as a Status body; tracebacks go to the log only."""
    try:
        return await handler(request)
    except errors.ApiError as e:
        return wire.status_response(e)
    except web.HTTPRequestEntityTooLarge:
        return wire.status_response(errors.request_entity_too_large(MAX_BODY))
    except web.HTTPNotFound:
        return wire.status_response(errors.path_not_found())
    except web.HTTPMethodNotAllowed as e:
        return wire.status_response(errors.ApiError(
            405, "MethodNotAllowed", f"the server does not allow this method on the requested resource "
                                     f"({e.method} {request.path})"))
    except web.HTTPException as e:
        return wire.status_response(errors.ApiError(e.status, e.reason or "Unknown", e.text or e.reason))
    except asyncio.CancelledError:
        raise
    except Exception as e:
        log.exception("internal error serving %s %s", request.method, request.path_qs)
        return wire.status_response(errors.internal(f"{type(e).__name__} while serving the request"))


def metrics_middleware(metrics: Metrics) -> Callable[..., Any]:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        kind = "mutating" if request.method in ("POST", "PUT", "PATCH", "DELETE") else "readOnly"
        inflight = metrics.inflight_of(kind)
        inflight.inc()
        try:
            resp = await handler(request)
        finally:
            inflight.dec()
        attrs = attributes_of(request)
        metrics.request_served(request.method, attrs, resp.status,
                               None if attrs.verb == "watch" else time.perf_counter() - started)
        return resp
    return middleware


def inflight_middleware(max_readonly: int, max_mutating: int) -> Callable[..., Any]:
    """kube's --max-requests-inflight / --max-mutating-requests-inflight: beyond them, 429 + Retry-After.

    Health checks and watches (long-running) are never limited, so probes keep answering under load.
    """
    limits = {"readOnly": max_readonly, "mutating": max_mutating}
    current = {"readOnly": 0, "mutating": 0}

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if is_health_path(request.path) or request.rel_url.query.get("watch") in ("true", "1", "True"):
            return await handler(request)
        kind = "mutating" if request.method in ("POST", "PUT", "PATCH", "DELETE") else "readOnly"
        if limits[kind] and current[kind] >= limits[kind]:
            raise errors.too_many_requests()
        current[kind] += 1
        try:
            return await handler(request)
        finally:
            current[kind] -= 1
    return middleware


def auth_middleware(state: ServerState) -> Callable[..., Any]:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if is_health_path(request.path):
            request["user"] = ANONYMOUS_USER
            return await handler(request)
        user = await state.authenticator.authenticate(request)
        if user is None:
            raise errors.unauthorized()
        request["user"] = user
        attrs = attributes_of(request)
        allowed, reason = await state.authorizer.authorize(user, attrs)
        if not allowed:
            raise errors.ApiError(403, "Forbidden", forbidden_message(user, attrs, reason),
                                  name=attrs.name, group=attrs.group, kind=attrs.resource)
        return await handler(request)
    return middleware


# -- non-resource endpoints ------------------------------------------------------------------

def discovery_routes(resources: list[ResourceInfo]) -> list[web.RouteDef]:
    docs = {v: discovery.aggregated(resources, v) for v in ("v2", "v2beta1")}
    etags = {v: discovery.etag(d) for v, d in docs.items()}
    info = resources[0]
    legacy = discovery.resource_list(resources, info.group_version)

    async def apis(request: web.Request) -> web.Response:
        version = discovery.wants_aggregated(request.headers.get("Accept"))
        if version is None:
            return wire.render(discovery.api_group_list(info.group, info.version))
        headers = {"ETag": etags[version], "Vary": "Accept"}
        if request.headers.get("If-None-Match") == etags[version]:
            return web.Response(status=304, headers=headers)
        resp = wire.render(docs[version], headers=headers)
        resp.headers["Content-Type"] = \
            f"application/json;g=apidiscovery.k8s.io;v={version};as=APIGroupDiscoveryList"
        return resp

    async def group(request: web.Request) -> web.Response:
        return wire.render(discovery.api_group(info.group, info.version))

    async def group_version(request: web.Request) -> web.Response:
        return wire.render(legacy)

    return [web.get("/apis", apis), web.get("/apis/", apis), web.get(f"/apis/{info.group}", group),
            web.get(GV_PATH, group_version), web.get(GV_PATH + "/", group_version)]


def openapi_routes() -> list[web.RouteDef]:
    v2_body = wire.dumps(openapi.openapi_v2())
    v3_doc = openapi.openapi_v3()
    v3_body = wire.dumps(v3_doc)
    v3_hash = openapi.document_hash(v3_doc)
    v3_index = wire.dumps(openapi.openapi_v3_discovery(v3_hash))
    etag_v2 = f'"{openapi.document_hash(openapi.openapi_v2())}"'
    etag_v3 = f'"{v3_hash}"'

    def serve(body: bytes, etag: str) -> Handler:
        async def handler(request: web.Request) -> web.Response:
            headers = {"ETag": etag, "Vary": "Accept"}
            if request.headers.get("If-None-Match") == etag:
                return web.Response(status=304, headers=headers)
            return web.Response(body=body, content_type=wire.JSON, headers=headers)
        return handler

    async def v3_group(request: web.Request) -> web.Response:
        headers = {"ETag": etag_v3}
        if request.rel_url.query.get("hash") == v3_hash:
            headers["Cache-Control"] = "public, immutable"
            headers["Expires"] = "Thu, 01 Jan 2099 00:00:00 GMT"
        if request.headers.get("If-None-Match") == etag_v3:
            return web.Response(status=304, headers=headers)
        return web.Response(body=v3_body, content_type=wire.JSON, headers=headers)

    return [web.get("/openapi/v2", serve(v2_body, etag_v2)),
            web.get("/openapi/v3", serve(v3_index, f'"{v3_hash}-index"')),
            web.get(f"/openapi/v3{GV_PATH}", v3_group)]


def health_routes(state: ServerState) -> list[web.RouteDef]:
    async def ping() -> None:
        return None

    async def shutdown() -> None:
        if state.shutting_down:
            raise RuntimeError("the server is shutting down")

    def checks(kind: str) -> dict[str, Callable[[], Awaitable[None]]]:
        base: dict[str, Callable[[], Awaitable[None]]] = {"ping": ping}
        if kind == "readyz":
            base.update(state.readiness_checks)
            base["shutdown"] = shutdown
        elif kind == "healthz":
            base.update({k: v for k, v in state.readiness_checks.items() if k == "etcd"})
        return base

    def endpoint(kind: str) -> Handler:
        async def handler(request: web.Request) -> web.Response:
            only = request.match_info.get("check")
            results: list[tuple[str, str | None]] = []
            for name, check in checks(kind).items():
                if only and name != only:
                    continue
                try:
                    await asyncio.wait_for(check(), 2.0)
                    results.append((name, None))
                except Exception as e:  # a failing check is reported, never raised
                    results.append((name, str(e) or type(e).__name__))
            if only and not results:
                raise errors.path_not_found()
            failed = [n for n, err in results if err]
            verbose = "verbose" in request.rel_url.query
            if not failed and not verbose:
                return web.Response(text="ok", content_type="text/plain")
            lines = [f"[+]{n} ok" if err is None else f"[-]{n} failed: reason withheld" for n, err in results]
            for n, err in results:
                if err is not None:
                    log.warning("%s check %s failed: %s", kind, n, err)
            lines.append(f"{kind} check failed" if failed else f"{kind} check passed")
            return web.Response(text="\n".join(lines) + "\n", status=500 if failed else 200,
                                content_type="text/plain")
        return handler

    routes = []
    for kind in ("healthz", "livez", "readyz"):
        routes += [web.get(f"/{kind}", endpoint(kind)), web.get(f"/{kind}/{{check}}", endpoint(kind))]
    return routes


# -- the application -------------------------------------------------------------------

def build_app(state: ServerState) -> web.Application:
    app = web.Application(
        client_max_size=MAX_BODY,
        middlewares=[metrics_middleware(state.metrics), error_middleware,
                     inflight_middleware(state.max_requests_inflight, state.max_mutating_requests_inflight),
                     auth_middleware(state)],
    )
    app[STATE] = state
    state.store = Store(state.etcd, VIRTUALCLUSTERS)
    state.registry = Registry(state.store, VirtualClusterStrategy(), state.admission)
    handlers = ResourceHandlers(state.registry,
                                on_watch_change=lambda d: state.metrics.watchers.labels(
                                    VIRTUALCLUSTERS.resource).inc(d))

    async def etcd_check() -> None:
        try:
            await state.etcd.status()
        except EtcdError as e:
            raise RuntimeError(f"etcd: {e.message}") from e

    async def cache_check() -> None:
        if not state.store.cache.ready:
            raise RuntimeError("watch cache not initialized")

    state.readiness_checks.setdefault("etcd", etcd_check)
    state.readiness_checks.setdefault("watch-cache", cache_check)

    state.events = EventRecorder(state.host)
    kubeconfig = KubeconfigIssuer(state.registry, state.secrets, state.events, state.max_kubeconfig_expiration)

    async def version(request: web.Request) -> web.Response:
        return wire.render(state.version)

    async def metrics(request: web.Request) -> web.Response:
        state.metrics.objects.labels(VIRTUALCLUSTERS.resource).set(len(state.store.cache))
        body, content_type = state.metrics.exposition()
        resp = web.Response(body=body)
        resp.headers["Content-Type"] = content_type
        return resp

    ns_collection = GV_PATH + "/namespaces/{namespace}/virtualclusters"
    item = ns_collection + "/{name}"
    # One resource per path, the object itself first: aiohttp tries the resources under a common
    # prefix in registration order, one regular expression each, and a get by name is most requests.
    for path, name, methods in (
        (item, "vc.item", {"GET": handlers.get, "PUT": handlers.update, "PATCH": handlers.patch,
                           "DELETE": handlers.delete}),
        (ns_collection, "vc.collection", {"GET": handlers.list_or_watch, "POST": handlers.create,
                                          "DELETE": handlers.delete_collection}),
        (item + "/{subresource:status}", "vc.subresource", {"GET": handlers.get, "PUT": handlers.update,
                                                            "PATCH": handlers.patch}),
        (item + "/{subresource:kubeconfig}", "vc.subresource.kubeconfig", {"GET": kubeconfig.handle}),
        (GV_PATH + "/virtualclusters", "vc.all", {"GET": handlers.list_or_watch}),
    ):
        resource = app.router.add_resource(path, name=name)
        for method, handler in methods.items():
            resource.add_route(method, handler)
            if method == "GET":
                resource.add_route("HEAD", handler)  # as web.get() registers it
    app.add_routes([
        web.get("/version", version),
        web.get("/metrics", metrics),
        *discovery_routes([VIRTUALCLUSTERS]),
        *openapi_routes(),
        *health_routes(state),
    ])

    async def startup(app: web.Application) -> None:
        await state.etcd.start()
        await state.store.cache.start()
        for start in state.background:
            await start()

    async def cleanup(app: web.Application) -> None:
        await state.store.cache.stop()
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
