"""The agent's HTTPS service: mTLS, an allow-list of client names, three operations, Status errors.

TLS already refused anyone without a certificate from the client CA; the CN allow-list narrows that CA
to the reconciler's identity (403 for any other name). Join and leave run one at a time. Nothing a
client sends is logged, and no traceback reaches a client.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from apiserver.machinery import errors
from apiserver.machinery.timestamps import now_rfc3339
from reconciler.nodeagent import protocol
from reconciler.nodeagent.files import (
    PRIVATE,
    PUBLIC,
    Backup,
    KubeletPaths,
    stale,
    tenant_kubeconfig,
    write_atomic,
)
from reconciler.nodeagent.state import Joined, StateFile, status

log = logging.getLogger(__name__)

MAX_BODY = 256 << 10
OUTPUT_LINES = 40  # lines of the restart command's output kept in the log


@dataclass(frozen=True)
class AgentConfig:
    node_name: str
    paths: KubeletPaths
    state_dir: Path
    restart_command: tuple[str, ...]
    restart_timeout: float = 60.0


async def run_restart(command: tuple[str, ...], timeout: float) -> None:
    """Run the restart command without a shell; its failure is the client's 500."""
    try:
        proc = await asyncio.create_subprocess_exec(*command, stdin=asyncio.subprocess.DEVNULL,
                                                    stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.STDOUT, start_new_session=True)
    except OSError as e:
        raise errors.internal(f"the kubelet restart command could not start: {e.strerror}") from None
    try:
        output, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        raise errors.internal(f"the kubelet restart command did not finish within {timeout:.0f}s") from None
    lines = output.decode(errors="replace").splitlines()
    for line in lines[-OUTPUT_LINES:]:
        log.info("restart: %s", line)
    if proc.returncode != 0:
        last = lines[-1].strip()[:200] if lines else ""
        raise errors.internal(f"the kubelet restart command exited with {proc.returncode}"
                              + (f": {last}" if last else ""))


class NodeAgent:
    """The operations; file work happens in a thread (fsyncs), one operation at a time."""

    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        self.state = StateFile(config.state_dir / "state.json")
        self.backup = Backup(config.state_dir / "backup")
        self._lock = asyncio.Lock()

    def status(self) -> dict[str, Any]:
        return status(self.state.load())

    def _conflict(self, joined: Joined, wanted: str) -> errors.ApiError:
        return errors.ApiError(409, "Conflict", f"node {self.config.node_name} is joined to virtual cluster "
                                                f"{joined.virtual_cluster}, not {wanted}; it must leave it first")

    def _tenant_files(self, req: protocol.JoinRequest) -> dict[Path, tuple[bytes, int]]:
        paths = self.config.paths
        cluster = req.virtual_cluster.replace("/", "-")
        return {paths.ca: (req.ca_pem, PUBLIC),
                paths.credential: (req.cert_pem.rstrip(b"\n") + b"\n" + req.key_pem, PRIVATE),
                paths.kubeconfig: (tenant_kubeconfig(paths, req.server, protocol.node_user(req.node_name),
                                                     cluster), PRIVATE)}

    def _prepare_join(self, req: protocol.JoinRequest) -> Joined:
        """Save the kubelet's files (first join only), record the join, write the tenant's files."""
        joined = self.state.load()
        if joined is not None and joined.virtual_cluster != req.virtual_cluster:
            raise self._conflict(joined, req.virtual_cluster)
        if joined is None:
            self.backup.save(self.config.paths.all())  # a repeated join keeps the first, original copy
            log.info("saved the kubelet's files: %s", self.backup.saved())
        contents = self._tenant_files(req)
        changing = stale(contents)
        joined = Joined(req.virtual_cluster, req.server, req.node_name,
                        joined.since if joined is not None else now_rfc3339(),
                        restarted=joined is not None and joined.restarted and not changing)
        self.state.save(joined)  # before the files change: a crash from here on still knows what to undo
        for path in changing:
            write_atomic(path, *contents[path])
        return joined

    async def join(self, req: protocol.JoinRequest) -> dict[str, Any]:
        async with self._lock:
            joined = await asyncio.to_thread(self._prepare_join, req)
            if not joined.restarted:
                log.info("joining virtual cluster %s at %s: restarting the kubelet", req.virtual_cluster,
                         req.server)
                await run_restart(self.config.restart_command, self.config.restart_timeout)
                joined = dataclasses.replace(joined, restarted=True)
                await asyncio.to_thread(self.state.save, joined)
            return status(joined)

    def _restore(self, virtual_cluster: str) -> bool:
        joined = self.state.load()
        if joined is None:
            return False
        if joined.virtual_cluster != virtual_cluster:
            raise self._conflict(joined, virtual_cluster)
        if not self.backup.exists():
            raise errors.internal(f"node {self.config.node_name} is joined to {joined.virtual_cluster} but "
                                  f"the kubelet's saved files are missing from {self.backup.directory}")
        self.backup.restore()
        return True

    def _forget(self) -> None:
        self.state.clear()  # only once the kubelet runs on its own files again
        self.backup.discard()

    async def leave(self, virtual_cluster: str) -> dict[str, Any]:
        async with self._lock:
            if await asyncio.to_thread(self._restore, virtual_cluster):
                log.info("leaving virtual cluster %s: restored the kubelet's files, restarting it", virtual_cluster)
                await run_restart(self.config.restart_command, self.config.restart_timeout)
                await asyncio.to_thread(self._forget)
            return status(None)


# -- HTTP ---------------------------------------------------------------------------------

def peer_common_name(request: web.Request) -> str:
    cert = request.transport.get_extra_info("peercert") if request.transport else None
    for rdn in (cert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return ""


def _http_error(e: web.HTTPException) -> errors.ApiError:
    if e.status == 404:
        return errors.path_not_found()
    if e.status == 405:
        return errors.ApiError(405, "MethodNotAllowed",
                               "the server does not allow this method on the requested resource")
    if e.status == 413:
        return errors.request_entity_too_large(MAX_BODY)
    return errors.ApiError(e.status, e.reason.replace(" ", ""), e.reason)


def _ok(body: dict[str, Any]) -> web.Response:
    return web.Response(body=orjson.dumps(body), content_type="application/json")


def _respond(e: errors.ApiError) -> web.Response:
    return web.Response(body=orjson.dumps(e.status()), status=e.code, content_type="application/json",
                        headers=e.headers)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def build_app(agent: NodeAgent, allowed_cns: frozenset[str]) -> web.Application:
    @web.middleware
    async def statuses(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            cn = peer_common_name(request)
            if cn not in allowed_cns:
                log.warning("refused %s %s from client %r: not an allowed client name", request.method,
                            request.path, cn)
                raise errors.forbidden(f'client "{cn}" is not allowed to use the node agent')
            return await handler(request)
        except errors.ApiError as e:
            return _respond(e)
        except web.HTTPException as e:
            return _respond(_http_error(e))
        except Exception:
            log.exception("%s %s failed", request.method, request.path)
            return _respond(errors.internal("the node agent failed; see its log"))

    async def body(request: web.Request) -> Any:
        raw = await request.read()
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise errors.bad_request("the request body is not valid JSON") from None

    async def join(request: web.Request) -> web.Response:
        return _ok(await agent.join(protocol.parse_join(await body(request), agent.config.node_name)))

    async def leave(request: web.Request) -> web.Response:
        return _ok(await agent.leave(protocol.parse_leave(await body(request))))

    async def get_status(_: web.Request) -> web.Response:
        return _ok(await asyncio.to_thread(agent.status))

    app = web.Application(middlewares=[statuses], client_max_size=MAX_BODY)
    app.router.add_post(protocol.JOIN, join)
    app.router.add_post(protocol.LEAVE, leave)
    app.router.add_get(protocol.STATUS, get_status, allow_head=False)
    return app


def serving_context(cert: str, key: str, client_ca: str) -> ssl.SSLContext:
    """TLS that requires a client certificate from ``client_ca``: anything else fails the handshake."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=client_ca)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_cert_chain(cert, key)
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx
