"""Health endpoints: ``/livez`` answers while the process can serve, ``/readyz`` while it should be
sent traffic (etcd reachable, watch cache listed, not shutting down), ``/healthz`` for old probes."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from apiserver.machinery import errors

__all__ = ["Check", "health_routes"]

log = logging.getLogger(__name__)

Check = Callable[[], Awaitable[None]]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def health_routes(readiness_checks: dict[str, Check], shutting_down: Callable[[], bool]) -> list[web.RouteDef]:
    """``/healthz``, ``/livez`` and ``/readyz`` (each also ``/<check>`` and ``?verbose``), as kube serves them."""
    async def ping() -> None:
        return None

    async def shutdown() -> None:
        if shutting_down():
            raise RuntimeError("the server is shutting down")

    def checks(kind: str) -> dict[str, Callable[[], Awaitable[None]]]:
        base: dict[str, Callable[[], Awaitable[None]]] = {"ping": ping}
        if kind == "readyz":
            base.update(readiness_checks)
            base["shutdown"] = shutdown
        elif kind == "healthz":
            base.update({k: v for k, v in readiness_checks.items() if k == "etcd"})
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
