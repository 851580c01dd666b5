"""An etcd v3 client: key-value calls over gRPC (:mod:`.etcdgrpc`), the rest over etcd's JSON gateway.

Reads, writes and transactions are unary gRPC calls with hand-encoded messages (:mod:`.etcdpb`).
Watches, leases, compaction and status go through the gateway (:mod:`.etcdhttp`), which speaks
base64 keys/values and int64-as-string and omits default values.

Failures are mapped to three exceptions the storage layer understands: :class:`EtcdUnavailable`
(cannot reach a member in time, or lost it with a write's outcome unknown: the API answers 503),
:class:`EtcdCompacted` (revision too old: 410) and :class:`EtcdError` (anything else etcd
refused, with etcd's own message).
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

from . import etcdpb
from .etcdgrpc import CallBroken, GrpcConnections, GrpcError, NotSent
from .etcdhttp import Endpoint, GatewayConnections
from .etcdpb import (  # noqa: F401 - the client's vocabulary, re-exported
    KeyValue,
    RangeResult,
    compare_absent,
    compare_mod_revision,
    compare_value,
    op_delete,
    op_put,
)

log = logging.getLogger(__name__)

GRPC_DEADLINE_EXCEEDED = 4
GRPC_OUT_OF_RANGE = 11
GRPC_UNAVAILABLE = 14
KV = b"/etcdserverpb.KV/"


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


def _kv_from_json(kv: dict[str, Any]) -> KeyValue:
    return KeyValue(
        key=_unb64(kv.get("key")),
        value=_unb64(kv.get("value")),
        create_revision=int(kv.get("create_revision", 0)),
        mod_revision=int(kv.get("mod_revision", 0)),
        version=int(kv.get("version", 0)),
        lease=int(kv.get("lease", 0)),
    )


@dataclass(frozen=True, slots=True)
class TxnResult:
    succeeded: bool
    revision: int


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
        self._grpc: GrpcConnections | None = None

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
            self._grpc = GrpcConnections(self._grpc_ssl, self.config.connect_timeout)

    async def close(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None
        if self._grpc is not None:
            self._grpc.close()
            self._grpc = None
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

    async def _call(self, method: bytes, message: bytes, *, mutation: bool) -> bytes:
        """One unary KV call on the current endpoint; on to the next while the call was never sent
        (and, for reads, also when a connection broke under it)."""
        if self._grpc is None:
            raise RuntimeError("EtcdClient.start() was not awaited")
        op = method.decode().rsplit("/", 1)[-1].lower()
        timeout = self.config.request_timeout
        last_error: Exception | None = None
        started = time.perf_counter()
        for attempt in range(len(self._endpoints)):
            index = (self._current + attempt) % len(self._endpoints)
            endpoint = self._endpoints[index]
            try:
                reply = await self._grpc.call(endpoint, KV + method, message, timeout)
            except GrpcError as e:
                self._current = index
                self._record(op, started, ok=False)
                raise self._error(e.message, e.code) from None
            except TimeoutError:
                self._record(op, started, ok=False)
                self._current = (index + 1) % len(self._endpoints)  # the next call asks another member
                raise EtcdUnavailable(f"etcd is unavailable: {endpoint.url} did not answer within "
                                      f"{timeout:g}s") from None
            except CallBroken as e:
                if mutation:
                    self._record(op, started, ok=False)
                    self._current = (index + 1) % len(self._endpoints)
                    raise EtcdUnavailable(f"etcd is unavailable: {e}; the write may or may not have been "
                                          "applied") from None
                last_error = e
                continue
            except NotSent as e:
                last_error = e
                continue
            self._current = index
            self._record(op, started, ok=True)
            return reply
        self._record(op, started, ok=False)
        raise EtcdUnavailable(f"etcd is unavailable: {last_error}")

    @staticmethod
    def _error(message: str, code: int, http_status: int = 0) -> EtcdError:
        """etcd's refusal as the exception the storage layer maps to an API status."""
        if "compacted" in message:
            return EtcdCompacted(message)
        if http_status in (502, 503, 504) or code in (GRPC_UNAVAILABLE, GRPC_DEADLINE_EXCEEDED):
            return EtcdUnavailable(message, code, http_status)
        return EtcdError(message, code, http_status)

    @classmethod
    def _decode(cls, raw: bytes, status: int) -> dict[str, Any]:
        try:
            data = orjson.loads(raw) if raw else {}
        except orjson.JSONDecodeError as e:
            raise EtcdError(f"etcd returned a non-JSON body (HTTP {status})", http_status=status) from e
        if status == 200 and "error" not in data:
            return data
        message = data.get("message") or data.get("error") or f"HTTP {status}"
        raise cls._error(message, int(data.get("code", 0)), status)

    # -- KV --------------------------------------------------------------------------

    async def range(self, key: str | bytes, range_end: bytes | None = None, *, limit: int = 0,
                    revision: int = 0, keys_only: bool = False, count_only: bool = False,
                    serializable: bool = False) -> RangeResult:
        message = etcdpb.range_request(key, range_end, limit=limit, revision=revision, keys_only=keys_only,
                                       count_only=count_only, serializable=serializable)
        return RangeResult.decode(await self._call(b"Range", message, mutation=False))

    async def current_revision(self, key: str | bytes) -> int:
        """etcd's revision as of a quorum read sent now: the smallest Range of ``key`` (which need
        not exist). This read is behind every consistent read."""
        message = etcdpb.range_request(key, limit=1, keys_only=True)
        return etcdpb.reply_revision(await self._call(b"Range", message, mutation=False))

    async def get(self, key: str | bytes) -> KeyValue | None:
        result = await self.range(key)
        return result.kvs[0] if result.kvs else None

    async def put(self, key: str | bytes, value: bytes, lease: int = 0) -> int:
        reply = await self._call(b"Put", etcdpb.put_request(key, value, lease), mutation=True)
        return etcdpb.reply_revision(reply)

    async def delete_range(self, key: str | bytes, range_end: bytes | None = None) -> tuple[int, int]:
        """Delete keys; returns (deleted count, revision)."""
        reply = await self._call(b"DeleteRange", etcdpb.delete_range_request(key, range_end), mutation=True)
        return etcdpb.deleted_count(reply), etcdpb.reply_revision(reply)

    async def txn(self, compare: list[bytes], success: list[bytes], failure: list[bytes] | None = None) -> TxnResult:
        """One transaction of compares and ops built with :func:`compare_mod_revision`, :func:`op_put`, ..."""
        reply = await self._call(b"Txn", etcdpb.txn_request(compare, success, failure or []), mutation=True)
        return TxnResult(succeeded=etcdpb.txn_succeeded(reply), revision=etcdpb.reply_revision(reply))

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
                kv=_kv_from_json(ev.get("kv", {})),
                prev_kv=_kv_from_json(prev) if prev else None,
            ))
        return WatchResponse(
            revision=int(result.get("header", {}).get("revision", 0)),
            events=events,
            created=bool(result.get("created", False)),
            canceled=bool(result.get("canceled", False)),
            compact_revision=int(result.get("compact_revision", 0)),
            cancel_reason=result.get("cancel_reason", ""),
        )
