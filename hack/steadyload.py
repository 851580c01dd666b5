"""A steady client load on a Kubernetes apiserver, counting what fails as a client-go client would see it.

Readers GET one object in a loop, a writer creates ConfigMaps one after another, each over a kept-alive
connection, until stopped. A request is retried as client-go's ``rest.Request`` retries it (at most 10 times):
a GET whose connection was reset or closed before an answer, and any request answered 429 or 5xx with a
``Retry-After`` (an apiserver shutting down says so). What still failed after that is a failure; a write that
was answered 201 and is not there at the end is lost. Both counts are kept: failed at the first attempt, and
failed for the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from apiserver.kubeclient.kubeconfig import load_kubeconfig

__all__ = ["Load", "LoadResult"]

MAX_RETRIES = 10  # client-go's default maxRetries
PAUSE = 0.02  # seconds between one reader's requests


@dataclass
class LoadResult:
    reads: int = 0
    reads_failed_first: int = 0  # a first attempt that failed (the client retried it)
    reads_failed: int = 0  # failed for the client, retries included
    writes: int = 0
    writes_failed_first: int = 0
    writes_failed: int = 0
    writes_lost: int = 0  # acknowledged, and not there at the end
    errors: list[str] = field(default_factory=list)  # the first few failures, for a message

    def summary(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "errors"} | {"errors": self.errors[:5]}


class Load:
    """Readers and a writer against ``server`` (https://host:port) with a client certificate, in namespace
    ``namespace`` (which must exist, with a ConfigMap named ``target`` for the readers)."""

    def __init__(self, server: str, context: ssl.SSLContext, namespace: str = "default", target: str = "steady",
                 readers: int = 4) -> None:
        self.server, self.context, self.namespace, self.target, self.readers = (server, context, namespace, target,
                                                                                readers)
        self.result = LoadResult()
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._acknowledged: list[str] = []

    async def make_target(self) -> None:
        """The ConfigMap the readers read, made unless it is there."""
        async with self._session() as session:
            status, body = await self._request(session, "POST", f"/api/v1/namespaces/{self.namespace}/configmaps", {
                "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": self.target}, "data": {"k": "v"}})
        if status not in (201, 409):
            raise RuntimeError(f"creating ConfigMap {self.target} answered {status}: {body}")

    async def start(self) -> None:
        for i in range(self.readers):
            self._tasks.append(asyncio.create_task(self._read(), name=f"reader {i}"))
        self._tasks.append(asyncio.create_task(self._write(), name="writer"))

    async def stop(self) -> LoadResult:
        """Stop, then count the acknowledged writes that are not there."""
        self._stop.set()
        await asyncio.gather(*self._tasks)
        async with self._session() as session:
            status, body = await self._request(session, "GET", f"/api/v1/namespaces/{self.namespace}/configmaps"
                                                               f"?labelSelector=steadyload%3Dyes")
        present = {item["metadata"]["name"] for item in (body or {}).get("items") or []} if status == 200 else set()
        if status != 200:
            self.result.errors.append(f"listing the writes at the end answered {status}")
        self.result.writes_lost = len([n for n in self._acknowledged if n not in present])
        return self.result

    @classmethod
    def of_kubeconfig(cls, path: Path, **kwargs: Any) -> Load:
        """With the cluster and the client certificate of a kubeconfig's current context."""
        access = load_kubeconfig(path)
        return cls(access.server, access.ssl, **kwargs)

    def _session(self) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=self.context, limit=1))

    async def _read(self) -> None:
        async with self._session() as session:
            while not self._stop.is_set():
                ok, first = await self._with_retries(session, "GET", f"/api/v1/namespaces/{self.namespace}/"
                                                                     f"configmaps/{self.target}")
                self.result.reads += 1
                self.result.reads_failed_first += not first
                self.result.reads_failed += not ok
                await asyncio.sleep(PAUSE)

    async def _write(self) -> None:
        n = 0
        async with self._session() as session:
            while not self._stop.is_set():
                n += 1
                name = f"steady-{time.monotonic_ns()}-{n}"
                body = {"apiVersion": "v1", "kind": "ConfigMap", "data": {"n": str(n)},
                        "metadata": {"name": name, "labels": {"steadyload": "yes"}}}
                ok, first = await self._with_retries(session, "POST", f"/api/v1/namespaces/{self.namespace}/configmaps",
                                                     body)
                self.result.writes += 1
                self.result.writes_failed_first += not first
                self.result.writes_failed += not ok
                if ok:
                    self._acknowledged.append(name)
                await asyncio.sleep(PAUSE * 5)

    async def _with_retries(self, session: aiohttp.ClientSession, method: str, path: str,
                            body: Any = None) -> tuple[bool, bool]:
        """(succeeded, succeeded at the first attempt)."""
        first = True
        for _attempt in range(MAX_RETRIES + 1):
            try:
                status, _, retry_after = await self._answer(session, method, path, body)
            except (TimeoutError, aiohttp.ClientConnectionError) as e:
                first = False
                self._note(f"{method} {path}: {type(e).__name__}: {e}")
                if method != "GET":
                    return False, False
                continue  # client-go: a reset or closed connection is retried for a GET
            if status < 400 or (method == "POST" and status == 409):
                return True, first
            first = False
            self._note(f"{method} {path}: {status}")
            if retry_after is None or (status != 429 and status < 500):
                return False, False
            await asyncio.sleep(min(retry_after, 1.0))
        return False, False

    async def _request(self, session: aiohttp.ClientSession, method: str, path: str,
                       body: Any = None) -> tuple[int, Any]:
        status, data, _ = await self._answer(session, method, path, body)
        return status, data

    async def _answer(self, session: aiohttp.ClientSession, method: str, path: str,
                      body: Any) -> tuple[int, Any, float | None]:
        async with session.request(method, self.server + path, json=body,
                                   timeout=aiohttp.ClientTimeout(total=10)) as response:
            data = None
            with contextlib.suppress(aiohttp.ContentTypeError, ValueError):
                data = await response.json()
            retry = response.headers.get("Retry-After")
            return response.status, data, float(retry) if retry and retry.isdigit() else None

    def _note(self, error: str) -> None:
        if len(self.result.errors) < 20:
            self.result.errors.append(error)
