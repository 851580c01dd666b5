"""An etcd v3 client over etcd's JSON gateway, on pooled keep-alive connections (:mod:`.etcdhttp`).

The gateway speaks base64 keys/values and int64-as-string; default values are
omitted (no ``kvs`` = none, no ``succeeded`` = false). Failures are mapped to three
exceptions the storage layer understands: :class:`EtcdUnavailable` (cannot reach a
member in time: the API answers 503), :class:`EtcdCompacted` (revision too old: 410)
and :class:`EtcdError` (anything else etcd refused, with etcd's own message).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import ssl
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from .etcdgrpc import ProbeError, RevisionProbe
from .etcdhttp import Endpoint, GatewayConnections

log = logging.getLogger(__name__)

GRPC_OUT_OF_RANGE = 11
GRPC_RESOURCE_EXHAUSTED = 8


class EtcdError(Exception):
    """etcd answered, and refused the request."""

    def __init__(self, message: str, code: int = 0, http_status: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.http_status = http_status


class EtcdUnavailable(EtcdError):
    """No etcd member answered in time."""


class EtcdCompacted(EtcdError):
    """The requested revision has been compacted away."""

    def __init__(self, message: str, compact_revision: int = 0) -> None:
        super().__init__(message, GRPC_OUT_OF_RANGE)
        self.compact_revision = compact_revision


def _b64(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode()
    return base64.b64encode(data).decode()


def _unb64(data: str | None) -> bytes:
    return base64.b64decode(data) if data else b""


def prefix_end(prefix: bytes | str) -> bytes:
    """The ``range_end`` that selects every key starting with ``prefix``."""
    raw = bytearray(prefix.encode() if isinstance(prefix, str) else prefix)
    for i in range(len(raw) - 1, -1, -1):
        if raw[i] < 0xFF:
            raw[i] += 1
            return bytes(raw[: i + 1])
    return b"\0"


@dataclass(frozen=True, slots=True)
class KeyValue:
    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int = 0

    @classmethod
    def from_json(cls, kv: dict[str, Any]) -> KeyValue:
        return cls(
            key=_unb64(kv.get("key")),
            value=_unb64(kv.get("value")),
            create_revision=int(kv.get("create_revision", 0)),
            mod_revision=int(kv.get("mod_revision", 0)),
            version=int(kv.get("version", 0)),
            lease=int(kv.get("lease", 0)),
        )


@dataclass(frozen=True, slots=True)
class RangeResult:
    kvs: list[KeyValue]
    count: int
    more: bool
    revision: int


@dataclass(frozen=True, slots=True)
class TxnResult:
    succeeded: bool
    revision: int
    responses: list[dict[str, Any]]

    def range_kvs(self, index: int) -> list[KeyValue]:
        """The key-values of the ``index``-th response when it was a range."""
        resp = self.responses[index].get("response_range", {})
        return [KeyValue.from_json(kv) for kv in resp.get("kvs", [])]

    def prev_kvs(self, index: int) -> list[KeyValue]:
        """Previous values returned by a put/delete with ``prev_kv``."""
        resp = self.responses[index]
        inner = resp.get("response_put") or resp.get("response_delete_range") or {}
        if "prev_kv" in inner:
            return [KeyValue.from_json(inner["prev_kv"])]
        return [KeyValue.from_json(kv) for kv in inner.get("prev_kvs", [])]


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: str  # "PUT" or "DELETE"
    kv: KeyValue
    prev_kv: KeyValue | None


@dataclass(slots=True)
class WatchResponse:
    revision: int
    events: list[WatchEvent] = field(default_factory=list)
    created: bool = False
    canceled: bool = False
    compact_revision: int = 0
    cancel_reason: str = ""

    @property
    def is_progress_notify(self) -> bool:
        return not self.events and not self.created and not self.canceled


# Builders for txn compares and operations, so callers never write gateway JSON.

def compare_mod_revision(key: str | bytes, revision: int) -> dict[str, Any]:
    return {"key": _b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": str(revision)}


def compare_absent(key: str | bytes) -> dict[str, Any]:
    return {"key": _b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": "0"}


def compare_value(key: str | bytes, value: bytes | str) -> dict[str, Any]:
    return {"key": _b64(key), "target": "VALUE", "result": "EQUAL", "value": _b64(value)}


def op_put(key: str | bytes, value: bytes, lease: int = 0, prev_kv: bool = False) -> dict[str, Any]:
    req: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
    if lease:
        req["lease"] = str(lease)
    if prev_kv:
        req["prev_kv"] = True
    return {"request_put": req}


def op_delete(key: str | bytes, range_end: bytes | None = None, prev_kv: bool = False) -> dict[str, Any]:
    req: dict[str, Any] = {"key": _b64(key)}
    if range_end is not None:
        req["range_end"] = _b64(range_end)
    if prev_kv:
        req["prev_kv"] = True
    return {"request_delete_range": req}


@dataclass
class EtcdConfig:
    endpoints: list[str]
    cafile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    request_timeout: float = 5.0
    connect_timeout: float = 2.0


LatencyObserver = Callable[[str, float, bool], None]


class EtcdClient:
    """A client of an etcd cluster; fails over between endpoints."""

    def __init__(self, config: EtcdConfig, observe: LatencyObserver | None = None) -> None:
        if not config.endpoints:
            raise ValueError("at least one etcd endpoint is required")
        self.config = config
        self._endpoints = [Endpoint.parse(e) for e in config.endpoints]
        self._current = 0
        self._observe = observe
        self._ssl = self._ssl_context(config)
        self._grpc_ssl = self._ssl_context(config, alpn="h2")
        self._http: GatewayConnections | None = None
        self._probe: RevisionProbe | None = None

    @staticmethod
    def _ssl_context(config: EtcdConfig, alpn: str = "") -> ssl.SSLContext | None:
        if not any(e.startswith("https://") for e in config.endpoints):
            return None
        ctx = ssl.create_default_context(cafile=config.cafile)
        if config.certfile:
            ctx.load_cert_chain(config.certfile, config.keyfile)
        if alpn:
            ctx.set_alpn_protocols([alpn])
        return ctx

    async def start(self) -> None:
        if self._http is None:
            self._http = GatewayConnections(self._ssl, self.config.connect_timeout)
            self._probe = RevisionProbe(self._grpc_ssl, self.config.connect_timeout)

    async def close(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None
        if self._probe is not None:
            self._probe.close()
            self._probe = None
        await asyncio.sleep(0)  # the aborted sockets close on the loop's next turn: a stopping etcd waits for them

    @property
    def http(self) -> GatewayConnections:
        if self._http is None:
            raise RuntimeError("EtcdClient.start() was not awaited")
        return self._http

    # -- transport -------------------------------------------------------------------

    async def _post(self, path: str, body: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        """POST to the current endpoint, trying the others on connection failure."""
        op = path.rsplit("/", 1)[-1]
        total = timeout if timeout is not None else self.config.request_timeout
        payload = orjson.dumps(body)
        last_error: Exception | None = None
        started = time.perf_counter()
        for attempt in range(len(self._endpoints)):
            endpoint = self._endpoints[(self._current + attempt) % len(self._endpoints)]
            try:
                status, raw = await self.http.call(endpoint, path, payload, total)
            except (TimeoutError, OSError) as e:  # GatewayError is a ConnectionError
                last_error = e
                continue
            self._current = (self._current + attempt) % len(self._endpoints)
            self._record(op, started, ok=status == 200)
            return self._decode(raw, status)
        self._record(op, started, ok=False)
        raise EtcdUnavailable(f"etcd is unavailable: {type(last_error).__name__}: {last_error}".rstrip(": "))

    def _record(self, op: str, started: float, ok: bool) -> None:
        if self._observe is not None:
            self._observe(op, time.perf_counter() - started, ok)

    @staticmethod
    def _decode(raw: bytes, status: int) -> dict[str, Any]:
        try:
            data = orjson.loads(raw) if raw else {}
        except orjson.JSONDecodeError as e:
            raise EtcdError(f"etcd returned a non-JSON body (HTTP {status})", http_status=status) from e
        if status == 200 and "error" not in data:
            return data
        message = data.get("message") or data.get("error") or f"HTTP {status}"
        code = int(data.get("code", 0))
        if "compacted" in message:
            raise EtcdCompacted(message)
        if status in (502, 503, 504) or code == 14:  # gRPC Unavailable
            raise EtcdUnavailable(message, code, status)
        raise EtcdError(message, code, status)

    # -- KV --------------------------------------------------------------------------

    async def range(self, key: str | bytes, range_end: bytes | None = None, *, limit: int = 0,
                    revision: int = 0, keys_only: bool = False, count_only: bool = False,
                    serializable: bool = False) -> RangeResult:
        body: dict[str, Any] = {"key": _b64(key)}
        if range_end is not None:
            body["range_end"] = _b64(range_end)
        if limit:
            body["limit"] = str(limit)
        if revision:
            body["revision"] = str(revision)
        if keys_only:
            body["keys_only"] = True
        if count_only:
            body["count_only"] = True
        if serializable:
            body["serializable"] = True
        data = await self._post("/v3/kv/range", body)
        return RangeResult(
            kvs=[KeyValue.from_json(kv) for kv in data.get("kvs", [])],
            count=int(data.get("count", 0)),
            more=bool(data.get("more", False)),
            revision=int(data.get("header", {}).get("revision", 0)),
        )

    async def current_revision(self, key: str | bytes) -> int:
        """etcd's revision as of a quorum read sent now (a Range of ``key``, which may not exist).

        Over gRPC (:mod:`.etcdgrpc`): this read is behind every consistent read. When that
        fails other than by timing out, the gateway is asked instead: it fails over between
        endpoints and reports etcd's errors as every other call does.
        """
        if self._probe is None:
            raise RuntimeError("EtcdClient.start() was not awaited")
        endpoint = self._endpoints[self._current]
        started = time.perf_counter()
        try:
            revision = await self._probe.revision(endpoint, key.encode() if isinstance(key, str) else key,
                                                  self.config.request_timeout)
        except TimeoutError:
            self._record("range", started, ok=False)
            self._current = (self._current + 1) % len(self._endpoints)  # the next call asks another member
            raise EtcdUnavailable(f"etcd is unavailable: {endpoint.url} did not answer within "
                                  f"{self.config.request_timeout:g}s") from None
        except (ProbeError, OSError) as e:
            log.debug("revision read over gRPC failed (%s); asking the gateway", e)
            return (await self.range(key, limit=1, keys_only=True)).revision
        self._record("range", started, ok=True)
        return revision

    async def get(self, key: str | bytes) -> KeyValue | None:
        result = await self.range(key)
        return result.kvs[0] if result.kvs else None

    async def put(self, key: str | bytes, value: bytes, lease: int = 0) -> int:
        body: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
        if lease:
            body["lease"] = str(lease)
        data = await self._post("/v3/kv/put", body)
        return int(data.get("header", {}).get("revision", 0))

    async def delete_range(self, key: str | bytes, range_end: bytes | None = None) -> tuple[int, int]:
        """Delete keys; returns (deleted count, revision)."""
        body: dict[str, Any] = {"key": _b64(key)}
        if range_end is not None:
            body["range_end"] = _b64(range_end)
        data = await self._post("/v3/kv/deleterange", body)
        return int(data.get("deleted", 0)), int(data.get("header", {}).get("revision", 0))

    async def txn(self, compare: list[dict[str, Any]], success: list[dict[str, Any]],
                  failure: list[dict[str, Any]] | None = None) -> TxnResult:
        body = {"compare": compare, "success": success, "failure": failure or []}
        data = await self._post("/v3/kv/txn", body)
        return TxnResult(
            succeeded=bool(data.get("succeeded", False)),
            revision=int(data.get("header", {}).get("revision", 0)),
            responses=list(data.get("responses", [])),
        )

    async def compact(self, revision: int, physical: bool = False) -> None:
        body: dict[str, Any] = {"revision": str(revision)}
        if physical:
            body["physical"] = True
        await self._post("/v3/kv/compaction", body, timeout=max(self.config.request_timeout, 30.0))

    # -- leases ----------------------------------------------------------------------

    async def lease_grant(self, ttl: int) -> int:
        data = await self._post("/v3/lease/grant", {"TTL": str(ttl)})
        if data.get("error"):
            raise EtcdError(str(data["error"]))
        return int(data["ID"])

    async def lease_revoke(self, lease_id: int) -> None:
        await self._post("/v3/lease/revoke", {"ID": str(lease_id)})

    async def lease_keepalive(self, lease_id: int) -> int:
        """Refresh a lease once; returns its remaining TTL (0 = the lease is gone)."""
        data = await self._post("/v3/lease/keepalive", {"ID": str(lease_id)})
        result = data.get("result", data)
        return int(result.get("TTL", 0))

    # -- maintenance -----------------------------------------------------------------

    async def status(self) -> dict[str, Any]:
        return await self._post("/v3/maintenance/status", {})

    # -- watch -----------------------------------------------------------------------

    async def watch(self, key: str | bytes, range_end: bytes | None = None, *, start_revision: int = 0,
                    prev_kv: bool = True, progress_notify: bool = True) -> AsyncIterator[WatchResponse]:
        """Stream watch responses; ends when the stream closes or the watch is canceled.

        The gateway frames each response as one JSON document per line.
        """
        req: dict[str, Any] = {"key": _b64(key)}
        if range_end is not None:
            req["range_end"] = _b64(range_end)
        if start_revision:
            req["start_revision"] = str(start_revision)
        if prev_kv:
            req["prev_kv"] = True
        if progress_notify:
            req["progress_notify"] = True
        endpoint = self._endpoints[self._current]
        try:
            status, stream = await self.http.stream(endpoint, "/v3/watch", orjson.dumps({"create_request": req}),
                                                    self.config.request_timeout)
        except (TimeoutError, OSError) as e:
            self._current = (self._current + 1) % len(self._endpoints)
            raise EtcdUnavailable(f"etcd watch failed: {type(e).__name__}: {e}".rstrip(": ")) from e
        try:
            if status != 200:
                self._decode(await self.http.read_all(stream), status)
            buffer = b""
            async for chunk in stream.chunks():
                buffer += chunk
                while (newline := buffer.find(b"\n")) >= 0:
                    line, buffer = buffer[:newline], buffer[newline + 1:]
                    if not line.strip():
                        continue
                    parsed = self._parse_watch_line(line)
                    yield parsed
                    if parsed.canceled:
                        return
        except (TimeoutError, OSError) as e:
            raise EtcdUnavailable(f"etcd watch stream broke: {type(e).__name__}: {e}") from e
        finally:
            self.http.release(stream)

    @staticmethod
    def _parse_watch_line(line: bytes) -> WatchResponse:
        data = orjson.loads(line)
        if "error" in data:
            err = data["error"]
            message = err.get("message", str(err)) if isinstance(err, dict) else str(err)
            if "compacted" in message:
                raise EtcdCompacted(message)
            raise EtcdUnavailable(f"etcd watch error: {message}")
        result = data.get("result", {})
        events = []
        for ev in result.get("events", []):
            prev = ev.get("prev_kv")
            events.append(WatchEvent(
                type=ev.get("type", "PUT"),
                kv=KeyValue.from_json(ev.get("kv", {})),
                prev_kv=KeyValue.from_json(prev) if prev else None,
            ))
        return WatchResponse(
            revision=int(result.get("header", {}).get("revision", 0)),
            events=events,
            created=bool(result.get("created", False)),
            canceled=bool(result.get("canceled", False)),
            compact_revision=int(result.get("compact_revision", 0)),
            cancel_reason=result.get("cancel_reason", ""),
        )
