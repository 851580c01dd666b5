"""The servers a differential test compares and the client it sends raw requests with.

* ``baseline``: kube-apiserver serving VirtualClusters as the CRD generated from our schema
  (``bench/crd.py``), on its own etcd;
* ``ours``: vc-apiserver, directly;
* ``ours-via-aggregator``: ours as users reach it, through a host kube-apiserver's aggregator
  (the product's own APIService registration, ``bench/aggregator.py``): a second vc-apiserver on
  ours' etcd with delegated authentication and authorization, started only when a test asks.

The client is ``http.client`` itself: it sends exactly the headers a step names (no default
Content-Type, User-Agent or Accept), keeps its connection open between requests and reads every
answer whole, Status or object or watch stream.
"""

from __future__ import annotations

import http.client
import json
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.aggregator import BareHost, start_aggregated
from bench.servers import Lab, Target

__all__ = ["BASELINE", "OURS", "VIA_AGGREGATOR", "Client", "DifferentialLab", "Response"]

BASELINE, OURS, VIA_AGGREGATOR = "baseline", "ours", "ours-via-aggregator"
GV = "/apis/kosmos.io/v1alpha1"
Obj = dict[str, Any]


@dataclass(frozen=True)
class Response:
    code: int
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> list[str]:
        return [v for k, v in self.headers if k.lower() == name.lower()]

    def json(self) -> Any:
        return json.loads(self.body)


class Client:
    """Raw requests to one target, on one kept-alive connection."""

    def __init__(self, name: str, target: Target) -> None:
        self.name = name
        self.target = target
        self.host, port = target.url.removeprefix("https://").rsplit(":", 1)
        self.port = int(port)
        self.ctx: ssl.SSLContext = target.ssl_context()
        self.conn: http.client.HTTPSConnection | None = None

    def _connection(self) -> http.client.HTTPSConnection:
        if self.conn is None:
            self.conn = http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=60)
        return self.conn

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> Response:
        """``path`` with its query, sent as written; only ``headers`` (and Content-Length) go with it.
        A connection the server closed meanwhile is opened again once."""
        for attempt in (1, 2):
            conn = self._connection()
            try:
                conn.putrequest(method, path, skip_accept_encoding=True)
                for name, value in (headers or {}).items():
                    conn.putheader(name, value)
                if body is not None or method in ("POST", "PUT", "PATCH"):
                    conn.putheader("Content-Length", str(len(body or b"")))
                conn.endheaders(body)
                resp = conn.getresponse()
                data = resp.read()
                if resp.will_close:
                    self.close()
                return Response(resp.status, resp.getheaders(), data)
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError,
                    http.client.CannotSendRequest, http.client.ResponseNotReady,
                    ssl.SSLEOFError, ssl.SSLZeroReturnError):  # an idle connection the server closed in TLS
                self.close()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    # -- what the managedFields suite sends -------------------------------------------------

    def send(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
             user_agent: str = "differential-test/1.0", namespace: str = "mf", **query: str) -> tuple[int, Obj]:
        """A request to the namespace's collection (``path`` "" or "/name[/status]"), JSON in and out."""
        qs = "&".join(f"{k}={v}" for k, v in query.items())
        data = body if isinstance(body, bytes) else None if body is None else json.dumps(body).encode()
        resp = self.request(method, f"{GV}/namespaces/{namespace}/virtualclusters{path}" + (f"?{qs}" if qs else ""),
                            data, {"Content-Type": content_type, "User-Agent": user_agent})
        return resp.code, resp.json()

    def get_raw(self, path: str, wait: float = 60.0) -> Obj:
        """GET a path outside the resource, waiting out 404s (kube publishes a new CRD's OpenAPI
        v3 a few seconds after the CRD is established)."""
        deadline = time.monotonic() + wait
        while True:
            resp = self.request("GET", path)
            if resp.code == 200:
                return resp.json()  # type: ignore[no-any-return]
            if resp.code != 404 or time.monotonic() > deadline:
                raise AssertionError(f"GET {path}: {resp.code} {resp.body[:300]!r}")
            time.sleep(0.5)


@dataclass
class DifferentialLab:
    """The baseline and ours under ``root`` (started at once), ours through an aggregator (on first
    use); :meth:`stop` ends exactly the processes it started."""

    root: Path
    lab: Lab = field(init=False)
    clients: dict[str, Client] = field(default_factory=dict)
    host: BareHost | None = None
    namespaces: set[str] = field(default_factory=set)

    def start(self) -> DifferentialLab:
        self.lab = Lab(self.root, [])
        for target in self.lab.start():
            self.clients[target.name] = Client(target.name, target)
        return self

    def aggregated(self) -> Client:
        """Ours through a host kube-apiserver's aggregator, started on first use."""
        if VIA_AGGREGATOR not in self.clients:
            via, self.host = start_aggregated(self.lab, self.lab.etcd_urls[OURS], sorted(self.namespaces))
            self.clients[VIA_AGGREGATOR] = Client(VIA_AGGREGATOR, via)
        return self.clients[VIA_AGGREGATOR]

    def namespace(self, *names: str) -> None:
        """Namespaces where kube checks they exist: the baseline (NamespaceLifecycle) and the host."""
        new = [n for n in names if n not in self.namespaces]
        if not new:
            return
        assert self.lab.kube is not None
        self.lab.kube.create_namespaces(new)
        if self.host is not None:
            self.host.kubectl("apply", "-f", "-", input="\n---\n".join(
                f"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}" for ns in new))
        self.namespaces.update(new)

    def stop(self) -> None:
        for client in self.clients.values():
            client.close()
        self.lab.stop()
