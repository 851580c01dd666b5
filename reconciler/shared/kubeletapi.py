"""The kubelet API of every slice's virtual node: what a tenant apiserver asks a node's kubelet for
(``kubectl logs``, ``exec``, ``attach``, ``port-forward``), carried to the host pods' subresources.

One TLS listener serves every slice. The node's status points its tenant apiserver here (its InternalIP
and kubelet port). A caller is a tenant apiserver only with its kubelet client certificate
(``apiserver-kubelet-client``, signed by its own cluster CA), and its certificate says which tenant it is;
it reaches only the pods bound to that tenant's shared node.

A request is rewritten once (the kubelet's path and query become the host API's subresource of the
mapped host pod, with this server's host credentials) and then relayed as bytes both ways. An upgrade
(SPDY, or WebSockets where the tenant apiserver forwards them) is answered by the host's ``101`` and
carried on unchanged, so every streaming protocol the host speaks is carried through.

Like a kubelet, the listener offers HTTP/2, and a tenant apiserver asks for logs over it (its upgrades stay
on HTTP/1.1). That is not only fewer handshakes: over HTTP/1.1 a Go client reads a body's last bytes and
its end in one read, and kube's WebSocket log stream drops what comes with the end, so a finished log
read over a WebSocket (``kubectl`` in a browser, the conformance suite) came back empty.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

from aiohttp import web
from cryptography import x509

from apiserver.kubeclient.client import HostError, HostUnavailable, KubeClient
from apiserver.machinery.jsonutil import Obj
from apiserver.transport.http2 import ALPN, HTTP11, Http2Connection
from reconciler.shared import names

log = logging.getLogger(__name__)

KUBELET_CLIENT = "kube-apiserver-kubelet-client"  # the CN of the tenant apiserver's kubelet client certificate
MAX_HEAD = 64 * 1024
CHUNK = 64 * 1024
H2_STREAMS = 100  # concurrent HTTP/2 streams (logs) a tenant apiserver may open on one connection
H2_IDLE = 300.0  # seconds an HTTP/2 connection without a stream stays open
# The kubelet's query names (the tenant apiserver's) and the host API's, for exec and attach.
_STREAMS = {"input": "stdin", "output": "stdout", "error": "stderr", "tty": "tty"}
# What an upgrade carries over from the caller's request.
_UPGRADE_HEADERS = ("connection", "upgrade", "x-stream-protocol-version", "sec-websocket-key",
                    "sec-websocket-version", "sec-websocket-protocol", "sec-websocket-extensions")


@dataclass(frozen=True)
class Tenant:
    """What the listener knows of one slice: its tenant's cluster CA, and the host namespace its pods run in."""

    uid: str
    ca: x509.Certificate
    namespace: str


class Refusal(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


_REASONS = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed",
            502: "Bad Gateway", 503: "Service Unavailable"}


def host_request(method: str, target: str, host_namespace: str) -> tuple[str, str, str, str]:
    """The host API request for a kubelet request: (method, path?query, tenant namespace, tenant pod).
    Raises :class:`Refusal` for what a shared node's kubelet does not serve."""
    url = urlsplit(target)
    parts = [unquote(p) for p in url.path.strip("/").split("/")]
    query = parse_qsl(url.query, keep_blank_values=True)
    if parts[0] == "containerLogs" and len(parts) == 4:
        _, ns, pod, container = parts
        params = [("container", container), *((k, v) for k, v in query if k != "container")]
        subresource = "log"
    elif parts[0] in ("exec", "attach") and len(parts) == 4:
        verb, ns, pod, container = parts
        params = [("container", container), *((_STREAMS.get(k, k), "true" if k in _STREAMS else v) for k, v in query)]
        subresource = verb
    elif parts[0] == "portForward" and len(parts) == 3:
        _, ns, pod = parts
        params = [("ports" if k == "port" else k, v) for k, v in query]
        subresource = "portforward"
    else:
        raise Refusal(404, f"a shared node serves containerLogs, exec, attach and portForward, not {url.path}")
    host_pod = names.host_name(ns, pod)
    path = f"/api/v1/namespaces/{host_namespace}/pods/{host_pod}/{subresource}"
    return method, f"{path}?{urlencode(params)}" if params else path, ns, pod


class KubeletApi:
    """The listener; ``tenants`` answers which slices run now (by their syncers)."""

    def __init__(self, host: KubeClient, tenants: Callable[[], list[Tenant]], bind: str, port: int,
                 cert_file: str, key_file: str) -> None:
        self.host = host
        self.tenants = tenants
        self.bind, self.port = bind, port
        self._ssl = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)  # trusting no CA but the tenants' (trust)
        self._ssl.minimum_version = ssl.TLSVersion.TLSv1_2
        self._ssl.load_cert_chain(cert_file, key_file)
        self._ssl.verify_mode = ssl.CERT_REQUIRED
        self._ssl.set_alpn_protocols([ALPN, HTTP11])
        self._trusted: set[bytes] = set()
        self._server: asyncio.Server | None = None
        self._h2: web.Server | None = None

    def trust(self, ca_pem: bytes) -> None:
        """A tenant's cluster CA, whose kubelet client certificates may connect from now on (which tenant a
        certificate belongs to is decided per connection, among the slices that run)."""
        if ca_pem not in self._trusted:
            self._ssl.load_verify_locations(cadata=ca_pem.decode())
            self._trusted.add(ca_pem)

    async def start(self) -> None:
        h2 = self._h2 = web.Server(self._h2_request)
        self._server = await asyncio.get_running_loop().create_server(lambda: _Negotiator(h2, self._serve),
                                                                      self.bind, self.port, ssl=self._ssl)
        if self.port == 0:
            self.port = self._server.sockets[0].getsockname()[1]
        log.info("shared nodes' kubelet API listening on %s:%d", self.bind, self.port)

    async def stop(self) -> None:
        if self._h2 is not None:
            await self._h2.shutdown(1.0)
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    def _tenant_of(self, der: bytes | None) -> Tenant:
        if not der:
            raise Refusal(401, "a client certificate is required")
        cert = x509.load_der_x509_certificate(der)
        cn = [a.value for a in cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)]
        if cn != [KUBELET_CLIENT]:
            raise Refusal(403, f"only a tenant apiserver's kubelet client ({KUBELET_CLIENT}) may use a shared node's "
                               f"kubelet API")
        for tenant in self.tenants():
            with contextlib.suppress(Exception):  # signed by another tenant's CA
                cert.verify_directly_issued_by(tenant.ca)
                return tenant
        raise Refusal(403, "the certificate's cluster runs no shared slice here")

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, ssl.SSLError):
            writer.close()
            return
        try:
            tenant = self._tenant_of(writer.get_extra_info("ssl_object").getpeercert(binary_form=True))
            lines = head.decode("latin-1").split("\r\n")
            method, target, _ = lines[0].split(" ", 2)
            headers = [tuple(h.split(":", 1)) for h in lines[1:] if ":" in h]
            if urlsplit(target).path == "/healthz":
                await _answer(writer, 200, "ok")
                return
            method, path, ns, pod = host_request(method, target, tenant.namespace)
            await self._check_pod(tenant, ns, pod)
            await self._relay(reader, writer, method, path, [(k.strip(), v.strip()) for k, v in headers])
        except Refusal as e:
            await _answer(writer, e.code, e.message)
        except (HostUnavailable, HostError) as e:
            await _answer(writer, 502, f"the host did not carry the request: {e}")
        except (ConnectionError, ValueError, ssl.SSLError) as e:
            log.debug("kubelet API connection ended: %s", e)
            writer.close()

    async def _h2_request(self, request: web.BaseRequest) -> web.StreamResponse:
        """A request on an HTTP/2 connection: a log, streamed from the host pod's (a kubelet's upgrades
        come over HTTP/1.1, which HTTP/2 has no way to do)."""
        try:
            tenant = self._tenant_of(request.transport.get_extra_info("ssl_object").getpeercert(binary_form=True))
            if request.path == "/healthz":
                return web.Response(text="ok")
            if request.method != "GET" or not request.path.startswith("/containerLogs/"):
                raise Refusal(400, f"{request.method} {request.path} upgrades: it is served over HTTP/1.1")
            _, path, ns, pod = host_request(request.method, str(request.rel_url), tenant.namespace)
            await self._check_pod(tenant, ns, pod)
            chunks = self.host.stream(path)
            first = await anext(chunks, b"")  # a refusal comes before the answer starts
        except Refusal as e:
            return web.Response(status=e.code, text=e.message)
        except HostError as e:  # as the kubelet would say it: of the tenant's pod
            return web.Response(status=e.code, text=e.message.replace(names.host_name(ns, pod), pod))
        except HostUnavailable as e:
            return web.Response(status=502, text=f"the host did not carry the request: {e}")
        answer = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await answer.prepare(request)
        try:
            if first:
                await answer.write(first)
            async for chunk in chunks:
                await answer.write(chunk)
        except (HostError, HostUnavailable) as e:  # the host ended it midway: the stream is reset
            log.debug("a relayed log ended: %s", e)
            request.transport.abort()
        finally:
            await chunks.aclose()
        return answer

    async def _check_pod(self, tenant: Tenant, ns: str, pod: str) -> None:
        """Only a pod of this tenant, running on its shared node (the host pod says whose it is)."""
        try:
            host_pod: Obj = await self.host.get(f"/api/v1/namespaces/{tenant.namespace}/pods/{names.host_name(ns, pod)}")
        except HostError as e:
            if e.code == 404:
                raise Refusal(404, f'pod "{pod}" in namespace "{ns}" is not running on this node') from None
            raise
        notes = host_pod["metadata"].get("annotations") or {}
        if not names.owned_by(host_pod, tenant.uid) or (notes.get(names.TENANT_NAMESPACE), notes.get(
                names.TENANT_NAME)) != (ns, pod):
            raise Refusal(404, f'pod "{pod}" in namespace "{ns}" is not running on this node')

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, method: str, path: str,
                     headers: list[tuple[str, str]]) -> None:
        """The request to the host, then bytes both ways until either side is done (a log ends, a stream
        closes)."""
        upstream_r, upstream_w, auth = await self.host.dial()
        upgrade = any(k.lower() == "upgrade" for k, _ in headers)
        out = [f"{method} {path} HTTP/1.1", *(f"{k}: {v}" for k, v in auth.items())]
        if upgrade:
            out += [f"{k}: {v}" for k, v in headers if k.lower() in _UPGRADE_HEADERS]
        else:
            out += ["Connection: close"]
            out += [f"{k}: {v}" for k, v in headers if k.lower() == "accept"]
        if method in ("POST", "PUT"):
            out.append("Content-Length: 0")
        upstream_w.write(("\r\n".join(out) + "\r\n\r\n").encode("latin-1"))
        await upstream_w.drain()
        await asyncio.gather(_pipe(reader, upstream_w), _pipe(upstream_r, writer))


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    try:
        while data := await source.read(CHUNK):
            sink.write(data)
            await sink.drain()
    except (ConnectionError, ssl.SSLError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            if sink.can_write_eof():
                sink.write_eof()
            else:
                sink.close()


class _Negotiator(asyncio.Protocol):
    """Hands a connection, once its TLS handshake is done, to HTTP/2 or to the HTTP/1.1 relay, as its client
    chose by ALPN."""

    def __init__(self, h2: web.Server, serve: Callable[[asyncio.StreamReader, asyncio.StreamWriter],
                                                    Awaitable[None]]) -> None:
        self.h2 = h2
        self.serve = serve

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        ssl_object = transport.get_extra_info("ssl_object")
        protocol: asyncio.BaseProtocol
        if ssl_object is not None and ssl_object.selected_alpn_protocol() == ALPN:
            protocol = Http2Connection(self.h2, H2_STREAMS, H2_IDLE)
        else:
            protocol = asyncio.StreamReaderProtocol(asyncio.StreamReader(limit=MAX_HEAD), self.serve)
        transport.set_protocol(protocol)
        protocol.connection_made(transport)


async def _answer(writer: asyncio.StreamWriter, code: int, message: str) -> None:
    body = message.encode()
    writer.write(f"HTTP/1.1 {code} {_REASONS.get(code, 'OK')}\r\nContent-Type: text/plain; charset=utf-8\r\n"
                 f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
    with contextlib.suppress(Exception):
        await writer.drain()
        writer.close()
