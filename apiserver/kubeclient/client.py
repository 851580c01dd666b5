"""A small async Kubernetes client on aiohttp, for talking to the host cluster.

The official python client is synchronous; the request path (TokenReview,
SubjectAccessReview, namespace checks) and the reconciler need an async one. This
client reads a kubeconfig (or in-cluster config) and speaks JSON; failures become
:class:`HostError` (the host answered with a Status) or :class:`HostUnavailable`
(it did not answer in time).
"""

from __future__ import annotations

import base64
import contextlib
import os
import ssl
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml

IN_CLUSTER_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class HostError(Exception):
    """The host answered with a failure Status."""

    def __init__(self, code: int, status: dict[str, Any]) -> None:
        self.code = code
        self.status = status
        self.reason = str(status.get("reason", ""))
        self.message = str(status.get("message", "")) or f"HTTP {code}"
        super().__init__(f"{code} {self.reason}: {self.message}")


class HostUnavailable(Exception):
    """The host did not answer."""


@dataclass
class ClusterAccess:
    server: str
    ssl: ssl.SSLContext
    token: str = ""
    token_file: str = ""


def _pem(entry: dict[str, Any], key: str, base: Path) -> bytes | None:
    if entry.get(f"{key}-data"):
        return base64.b64decode(entry[f"{key}-data"])
    if entry.get(key):
        path = Path(entry[key])
        return (path if path.is_absolute() else base / path).read_bytes()
    return None


def _load_chain(ctx: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """ssl only loads client certificates from files: write them privately, load, remove."""
    with tempfile.TemporaryDirectory() as tmp:
        cert_path, key_path = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
        cert_path.write_bytes(cert)
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key)
        ctx.load_cert_chain(str(cert_path), str(key_path))


def load_kubeconfig(path: str | Path, context: str | None = None) -> ClusterAccess:
    path = Path(path)
    config = yaml.safe_load(path.read_text())
    ctx_name = context or config.get("current-context")
    ctx = next(c["context"] for c in config["contexts"] if c["name"] == ctx_name)
    cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == ctx["cluster"])
    user = next((u["user"] for u in config.get("users", []) if u["name"] == ctx.get("user")), {}) or {}
    ca = _pem(cluster, "certificate-authority", path.parent)
    sslctx = ssl.create_default_context(cadata=ca.decode() if ca else None)
    if cluster.get("insecure-skip-tls-verify"):
        sslctx.check_hostname = False
        sslctx.verify_mode = ssl.CERT_NONE
    cert, key = _pem(user, "client-certificate", path.parent), _pem(user, "client-key", path.parent)
    if cert and key:
        _load_chain(sslctx, cert, key)
    return ClusterAccess(cluster["server"].rstrip("/"), sslctx, user.get("token", ""), user.get("tokenFile", ""))


def access_from_pem(server: str, ca: bytes, cert: bytes, key: bytes) -> ClusterAccess:
    """Access with in-memory PEMs (a tenant's admin credential)."""
    sslctx = ssl.create_default_context(cadata=ca.decode())
    _load_chain(sslctx, cert, key)
    return ClusterAccess(server.rstrip("/"), sslctx)


def in_cluster() -> ClusterAccess:
    host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if ":" in host:
        host = f"[{host}]"
    sslctx = ssl.create_default_context(cafile=str(IN_CLUSTER_DIR / "ca.crt"))
    return ClusterAccess(f"https://{host}:{port}", sslctx, token_file=str(IN_CLUSTER_DIR / "token"))


def running_in_cluster() -> bool:
    return "KUBERNETES_SERVICE_HOST" in os.environ and (IN_CLUSTER_DIR / "token").exists()


class KubeClient:
    """JSON requests to one cluster over one keep-alive session."""

    def __init__(self, access: ClusterAccess, timeout: float = 10.0, user_agent: str = "vc-apiserver") -> None:
        self.access = access
        self.timeout = timeout
        self.user_agent = user_agent
        self._session: aiohttp.ClientSession | None = None
        self._token = (access.token, 0.0)

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

    def _session_or_new(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self.access.ssl, limit=100),
                headers={"User-Agent": self.user_agent, "Accept": "application/json"})
        return self._session

    def _auth_headers(self) -> dict[str, str]:
        token, read_at = self._token
        if self.access.token_file and time.monotonic() - read_at > 60:
            with contextlib.suppress(OSError):
                token = Path(self.access.token_file).read_text().strip()
                self._token = (token, time.monotonic())
        return {"Authorization": f"Bearer {token}"} if token else {}

    async def request(self, method: str, path: str, *, body: Any = None, params: dict[str, str] | None = None,
                      content_type: str = "application/json", timeout: float | None = None) -> Any:
        """One request; returns the decoded JSON body of a 2xx answer."""
        headers = self._auth_headers()
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else orjson.dumps(body)
            headers["Content-Type"] = content_type
        try:
            async with self._session_or_new().request(
                    method, self.access.server + path, data=data, params=params, headers=headers,
                    timeout=aiohttp.ClientTimeout(total=timeout or self.timeout, sock_connect=3)) as resp:
                raw = await resp.read()
                status = resp.status
        except (TimeoutError, aiohttp.ClientError, OSError) as e:
            raise HostUnavailable(f"{self.server}: {method} {path}: {type(e).__name__}: {e}") from e
        try:
            decoded = orjson.loads(raw) if raw else {}
        except orjson.JSONDecodeError:
            decoded = {"message": raw.decode(errors="replace")[:500]}
        if status >= 400:
            raise HostError(status, decoded if isinstance(decoded, dict) else {"message": str(decoded)})
        return decoded

    async def get(self, path: str, **params: str) -> Any:
        return await self.request("GET", path, params=params or None)

    async def create(self, path: str, body: Any) -> Any:
        return await self.request("POST", path, body=body)

    async def patch(self, path: str, body: Any, patch_type: str = "application/merge-patch+json") -> Any:
        return await self.request("PATCH", path, body=body, content_type=patch_type)

    async def delete(self, path: str, body: Any = None) -> Any:
        return await self.request("DELETE", path, body=body)

    async def watch(self, path: str, **params: str) -> AsyncIterator[dict[str, Any]]:
        """Stream watch events until the server ends the watch."""
        query = {"watch": "true", **params}
        try:
            async with self._session_or_new().get(
                    self.access.server + path, params=query, headers=self._auth_headers(),
                    timeout=aiohttp.ClientTimeout(total=None, sock_connect=3, sock_read=120)) as resp:
                if resp.status >= 400:
                    raise HostError(resp.status, orjson.loads(await resp.read() or b"{}"))
                buffer = b""
                async for chunk in resp.content.iter_any():
                    buffer += chunk
                    while (newline := buffer.find(b"\n")) >= 0:
                        line, buffer = buffer[:newline], buffer[newline + 1:]
                        if line.strip():
                            yield orjson.loads(line)
        except (TimeoutError, aiohttp.ClientError, OSError) as e:
            raise HostUnavailable(f"{self.server}: watch {path}: {type(e).__name__}: {e}") from e
