"""A small async Kubernetes client on aiohttp, for talking to the host cluster.

The official python client is synchronous; the request path (TokenReview,
SubjectAccessReview, namespace checks) and the reconciler need an async one. This
client reads a kubeconfig (:mod:`.kubeconfig`, or in-cluster config) and speaks JSON; failures
become :class:`HostError` (the host answered with a Status) or :class:`HostUnavailable` (it did
not answer in time, or no credential could be had to ask it with: :class:`CredentialError`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson

from apiserver.kubeclient import paths
from apiserver.kubeclient.errors import CredentialError, HostError, HostUnavailable
from apiserver.kubeclient.kubeconfig import (
    Auth,
    ClusterAccess,
    KubeconfigError,
    access_from_pem,
    in_cluster,
    load_kubeconfig,
    running_in_cluster,
)

APPLY_PATCH = "application/apply-patch+yaml"

# What this package offers its users, wherever it is defined.
__all__ = [
    "ClusterAccess", "CredentialError", "HostError", "HostUnavailable", "KubeClient", "KubeconfigError",
    "access_from_pem", "in_cluster", "load_kubeconfig", "running_in_cluster",
]


class KubeClient:
    """JSON requests to one cluster over one keep-alive session."""

    def __init__(self, access: ClusterAccess, timeout: float = 10.0, user_agent: str = "vc-apiserver") -> None:
        self.access = access
        self.credentials = access.credential_source()
        self.timeout = timeout
        self.user_agent = user_agent
        self._session: aiohttp.ClientSession | None = None
        self._session_ssl: Any = None

    @classmethod
    def from_kubeconfig(cls, path: str | Path, **kwargs: Any) -> KubeClient:
        return cls(load_kubeconfig(path), **kwargs)

    @property
    def server(self) -> str:
        return self.access.server

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _session_for(self, auth: Auth) -> aiohttp.ClientSession:
        """The session for ``auth``'s TLS context; a new client certificate gets new connections
        (client-go closes its connections when an exec plugin's certificate rotates)."""
        if self._session is not None and not self._session.closed and self._session_ssl is auth.ssl:
            return self._session
        old, self._session_ssl = self._session, auth.ssl
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=auth.ssl, limit=100),
            headers={"User-Agent": self.user_agent, "Accept": "application/json"})
        if old is not None:
            await old.close()
        return self._session

    @staticmethod
    def _headers(auth: Auth) -> dict[str, str]:
        return {"Authorization": f"Bearer {auth.token}"} if auth.token else {}

    async def request(self, method: str, path: str, *, body: Any = None, params: dict[str, str] | None = None,
                      content_type: str = "application/json", timeout: float | None = None, raw: bool = False) -> Any:
        """One request; returns the decoded JSON body of a 2xx answer (``raw``: its bytes, for the
        answers that are not JSON, such as a pod's log). A 401 to a credential that has meanwhile
        rotated (an exec plugin's, a token file's) is tried once more with the new one."""
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else orjson.dumps(body)
        auth = await self.credentials.current()
        for last_try in (False, True):
            headers = self._headers(auth)
            if data is not None:
                headers["Content-Type"] = content_type
            try:
                async with (await self._session_for(auth)).request(
                        method, self.access.server + path, data=data, params=params, headers=headers,
                        server_hostname=self.access.tls_server_name or None,
                        timeout=aiohttp.ClientTimeout(total=timeout or self.timeout, sock_connect=3)) as resp:
                    answer = await resp.read()
                    status = resp.status
            except (TimeoutError, aiohttp.ClientError, OSError) as e:
                raise HostUnavailable(f"{self.server}: {method} {path}: {type(e).__name__}: {e}") from e
            if status != 401 or last_try or not await self.credentials.rejected(auth):
                break
            auth = await self.credentials.current()
        if raw and status < 400:
            return answer
        if status >= 400:
            raise _refusal(status, answer)
        return _decoded(answer)

    async def dial(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, dict[str, str]]:
        """A connection of its own to the cluster, and the headers that authenticate on it: for what is not
        one JSON request, such as a relayed stream (exec, attach, port-forward, a followed log)."""
        auth = await self.credentials.current()
        url = urlsplit(self.access.server)
        port = url.port or (443 if url.scheme == "https" else 80)
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(
                url.hostname, port, ssl=auth.ssl if url.scheme == "https" else None,
                server_hostname=(self.access.tls_server_name or url.hostname) if url.scheme == "https" else None), 5)
        except (TimeoutError, OSError) as e:
            raise HostUnavailable(f"{self.server}: {type(e).__name__}: {e}") from e
        headers = {"Host": url.netloc, "User-Agent": self.user_agent, **self._headers(auth)}
        return reader, writer, headers

    async def get(self, path: str, **params: str) -> Any:
        return await self.request("GET", path, params=params or None)

    async def create(self, path: str, body: Any, **params: str) -> Any:
        return await self.request("POST", path, body=body, params=params or None)

    async def replace(self, path: str, body: Any, **params: str) -> Any:
        """PUT: the object as given, guarded by the resourceVersion it carries (a stale one is a 409)."""
        return await self.request("PUT", path, body=body, params=params or None)

    async def patch(self, path: str, body: Any, patch_type: str = "application/merge-patch+json", **params: str) -> Any:
        return await self.request("PATCH", path, body=body, content_type=patch_type, params=params or None)

    async def apply(self, obj: dict[str, Any], field_manager: str) -> Any:
        """Server-side apply of ``obj`` at its own path (a built-in kind of :mod:`.paths`), forced: the
        caller owns the fields it sends, whoever set them last. Unknown fields are an error, not dropped."""
        return await self.patch(paths.object_path(obj), obj, APPLY_PATCH, fieldManager=field_manager, force="true",
                                fieldValidation="Strict")

    async def delete(self, path: str, body: Any = None) -> Any:
        return await self.request("DELETE", path, body=body)

    async def log(self, namespace: str, pod: str, **params: str) -> bytes:
        """A pod's log, as bytes (it is not JSON); ``params`` as the API's: container, tailLines, sinceTime."""
        return await self.request("GET", paths.path("Pod", namespace, pod) + "/log", params=params or None, raw=True)

    async def watch(self, path: str, **params: str) -> AsyncIterator[dict[str, Any]]:
        """Stream watch events until the server ends the watch."""
        buffer = b""
        async for chunk in self.stream(path, sock_read=120, watch="true", **params):
            buffer += chunk
            while (newline := buffer.find(b"\n")) >= 0:
                line, buffer = buffer[:newline], buffer[newline + 1:]
                if line.strip():
                    yield orjson.loads(line)

    async def stream(self, path: str, sock_read: float | None = None, **params: str) -> AsyncIterator[bytes]:
        """A GET's body as it comes, until the server ends it (a watch, a followed log); ``sock_read``: how
        long a silence ends it. A refusal is a :class:`HostError` before the first chunk."""
        auth = await self.credentials.current()
        for last_try in (False, True):
            try:
                async with (await self._session_for(auth)).get(
                        self.access.server + path, params=params or None, headers=self._headers(auth),
                        server_hostname=self.access.tls_server_name or None,
                        timeout=aiohttp.ClientTimeout(total=None, sock_connect=3, sock_read=sock_read)) as resp:
                    if resp.status == 401 and not last_try and await self.credentials.rejected(auth):
                        auth = await self.credentials.current()
                        continue
                    if resp.status >= 400:
                        raise _refusal(resp.status, await resp.read())
                    async for chunk in resp.content.iter_any():
                        yield chunk
                    return
            except (TimeoutError, aiohttp.ClientError, OSError) as e:
                raise HostUnavailable(f"{self.server}: GET {path}: {type(e).__name__}: {e}") from e


def _decoded(answer: bytes) -> Any:
    """An answer's JSON; one that is not JSON (a proxy's text) as a Status-like message."""
    try:
        return orjson.loads(answer) if answer else {}
    except orjson.JSONDecodeError:
        return {"message": answer.decode(errors="replace")[:500]}


def _refusal(status: int, answer: bytes) -> HostError:
    decoded = _decoded(answer)
    return HostError(status, decoded if isinstance(decoded, dict) else {"message": str(decoded)})
