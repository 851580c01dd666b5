"""The filter chain every request passes, outermost first (k8s.io/apiserver's ``server/filters`` and
``endpoints/filters``): metrics, errors as Status bodies, max-in-flight, authentication and
authorization. Each reads what kind of request it is from the one :func:`request_info`."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from apiserver.apis.resource import VIRTUALCLUSTERS
from apiserver.auth.authn import ANONYMOUS_USER, Authenticator, Authorizer, forbidden_message, is_health_path
from apiserver.endpoints import negotiation as wire
from apiserver.endpoints.request import request_info
from apiserver.endpoints.tenantauthz import PATH_PREFIX as TENANT_AUTHZ_PREFIX
from apiserver.machinery import errors
from apiserver.server.metrics import Metrics

__all__ = ["MAX_BODY", "PLAIN_NOT_FOUND_PREFIX", "Handler", "auth_middleware", "error_middleware", "inflight_middleware",
           "metrics_middleware"]

log = logging.getLogger(__name__)

MAX_BODY = 3 * 1024 * 1024
# Under the served group-version, a path nothing serves is answered as kube-apiserver answers it for a
# CRD's group-version: Go's plain-text "404 page not found" (its NotFound handler), not a Status.
PLAIN_NOT_FOUND_PREFIX = f"/apis/{VIRTUALCLUSTERS.group_version}/"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure leaves as a Status body, in the media type the client accepts; tracebacks go
    to the log only."""
    try:
        return await handler(request)
    except errors.ApiError as e:
        return wire.status_response(e, request.headers.get("Accept"))
    except web.HTTPRequestEntityTooLarge:
        return wire.status_response(errors.request_entity_too_large(MAX_BODY), request.headers.get("Accept"))
    except web.HTTPNotFound:
        if request.path.startswith(PLAIN_NOT_FOUND_PREFIX):
            return web.Response(status=404, text="404 page not found\n", content_type="text/plain",
                                charset="utf-8", headers={"X-Content-Type-Options": "nosniff"})
        return wire.status_response(errors.path_not_found(), request.headers.get("Accept"))
    except web.HTTPMethodNotAllowed as e:
        return wire.status_response(errors.ApiError(
            405, "MethodNotAllowed", f"the server does not allow this method on the requested resource "
                                     f"({e.method} {request.path})"), request.headers.get("Accept"))
    except web.HTTPException as e:
        return wire.status_response(errors.ApiError(e.status, e.reason or "Unknown", e.text or e.reason),
                                    request.headers.get("Accept"))
    except asyncio.CancelledError:
        raise
    except Exception as e:
        log.exception("internal error serving %s %s", request.method, request.path_qs)
        return wire.status_response(errors.internal(f"{type(e).__name__} while serving the request"),
                                    request.headers.get("Accept"))


def metrics_middleware(metrics: Metrics) -> Callable[..., Any]:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        kind = "mutating" if request_info(request).mutating else "readOnly"
        inflight = metrics.inflight_of(kind)
        inflight.inc()
        try:
            resp = await handler(request)
        finally:
            inflight.dec()
        info = request_info(request)
        metrics.request_served(request.method, info.attributes, resp.status,
                               None if info.long_running else time.perf_counter() - started)
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
        info = request_info(request)
        if is_health_path(request.path) or info.long_running:
            return await handler(request)
        kind = "mutating" if info.mutating else "readOnly"
        if limits[kind] and current[kind] >= limits[kind]:
            raise errors.too_many_requests()
        current[kind] += 1
        try:
            return await handler(request)
        finally:
            current[kind] -= 1
    return middleware


def auth_middleware(authenticator: Authenticator, authorizer: Authorizer) -> Callable[..., Any]:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if is_health_path(request.path) or request.path.startswith(TENANT_AUTHZ_PREFIX):
            request["user"] = ANONYMOUS_USER  # the tenant authorization webhook authenticates its callers itself
            return await handler(request)
        user = await authenticator.authenticate(request)
        if user is None:
            raise errors.unauthorized()
        request["user"] = user
        attrs = request_info(request).attributes
        allowed, reason = await authorizer.authorize(user, attrs)
        if not allowed:
            raise errors.ApiError(403, "Forbidden", forbidden_message(user, attrs, reason),
                                  name=attrs.name, group=attrs.group, kind=attrs.resource)
        return await handler(request)
    return middleware
