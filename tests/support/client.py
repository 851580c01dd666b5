"""A client for hostile-input tests: every answer is checked against the Status contract
(:mod:`tests.support.status`) as it arrives, objects to aim at are brought into being (and back, if
a fuzzer deleted them), and a test ends by checking the server survived: still ready, no traceback
in its log since the test began."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp
from yarl import URL

from tests.conftest import Server, vc
from tests.support.status import check_answer

__all__ = ["GV", "assert_survived", "call", "collection", "dumps", "ensure", "log_mark", "raw_path", "remove",
           "send", "settled"]

GV = "/apis/kosmos.io/v1alpha1"


def collection(namespace: str) -> str:
    return f"{GV}/namespaces/{namespace}/virtualclusters"


async def send(http: aiohttp.ClientSession, method: str, path: str | URL, body: bytes | None = None, *,
               content_type: str = "application/json", params: dict[str, str] | None = None,
               headers: dict[str, str] | None = None) -> tuple[int, str, bytes]:
    all_headers = {**({"Content-Type": content_type} if body is not None else {}), **(headers or {})}
    async with http.request(method, path, data=body, params=params, headers=all_headers,
                            timeout=aiohttp.ClientTimeout(total=60)) as resp:
        return resp.status, resp.headers.get("Content-Type", ""), await resp.read()


async def call(http: aiohttp.ClientSession, method: str, path: str | URL, body: bytes | None = None, *,
               future_rv: bool = False, **kwargs: Any) -> tuple[int, Any]:
    """Send, check the contract, and return (status, decoded JSON body or None)."""
    code, content_type, raw = await send(http, method, path, body, **kwargs)
    what = f"{method} {path} {kwargs.get('params') or ''} body={body[:200] if isinstance(body, bytes) else body!r}"
    check_answer(code, content_type, raw, what, future_rv=future_rv)
    try:
        return code, json.loads(raw)
    except ValueError:
        return code, None


def raw_path(path: str) -> URL:
    """A path and query sent exactly as written (percent-escapes included, e.g. %FF)."""
    return URL(path, encoded=True)


def dumps(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def log_mark(server: Server) -> int:
    return server.api.log.stat().st_size


async def assert_survived(http: aiohttp.ClientSession, server: Server, log_start: int) -> None:
    """The server is still ready and logged no traceback since ``log_start``."""
    async with http.get("/readyz") as resp:
        assert resp.status == 200, await resp.text()
    text = server.api.log.read_bytes()[log_start:].decode(errors="replace")
    at = text.find("Traceback")
    assert at < 0, f"the server logged a traceback:\n{text[max(0, at - 400):at + 4000]}"


async def ensure(http: aiohttp.ClientSession, namespace: str, name: str, **extra: Any) -> dict[str, Any]:
    """The object, created if missing (and brought back if a fuzzer deleted it)."""
    path = f"{collection(namespace)}/{name}"
    code, obj = await call(http, "GET", path)
    if code == 200 and not obj["metadata"].get("deletionTimestamp"):
        return obj
    if code == 200:  # being deleted: let it go
        await call(http, "PATCH", path, b'{"metadata":{"finalizers":null}}', content_type="application/merge-patch+json")
    code, obj = await call(http, "POST", collection(namespace), dumps({**vc(name, namespace), **extra}))
    assert code == 201, obj
    return await settled(http, namespace, name)


async def settled(http: aiohttp.ClientSession, namespace: str, name: str) -> dict[str, Any]:
    """The object once the reconciler has written its first status (so it races no later write)."""
    deadline = time.monotonic() + 30
    while True:
        code, obj = await call(http, "GET", f"{collection(namespace)}/{name}")
        assert code == 200, obj
        if (obj.get("status") or {}).get("observedGeneration") == obj["metadata"]["generation"]:
            return obj
        assert time.monotonic() < deadline, f"the reconciler never observed {namespace}/{name}: {obj}"
        await asyncio.sleep(0.1)


async def remove(http: aiohttp.ClientSession, namespace: str, name: str) -> None:
    """Gone now: finalizers dropped, then deleted."""
    path = f"{collection(namespace)}/{name}"
    await call(http, "PATCH", path, b'{"metadata":{"finalizers":null}}', content_type="application/merge-patch+json")
    code, _ = await call(http, "DELETE", path)
    assert code in (200, 404)
