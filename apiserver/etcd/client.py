"""An etcd v3 client over etcd's gRPC API (:mod:`apiserver.etcd.grpc`), its messages the classes
generated from etcd's API (:mod:`apiserver.etcd.messages`).

Failures are mapped to three exceptions the storage layer understands: :class:`EtcdUnavailable`
(cannot reach a member in time, or lost it with a write's outcome unknown: the API answers 503),
:class:`EtcdCompacted` (revision too old: 410) and :class:`EtcdError` (anything else etcd
refused, with etcd's own message).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from google.protobuf.message import Message

from apiserver.etcd.grpc import (
    MAX_MESSAGE,
    CallBroken,
    Endpoint,
    GrpcConnections,
    GrpcError,
    Keepalive,
    NotSent,
    ReplyTooLarge,
)
from apiserver.etcd.messages import (
    CompactionRequest,
    CompactionResponse,
    Compare,
    DecodeError,
    DeleteRangeRequest,
    DeleteRangeResponse,
    KeyValue,
    LeaseGrantRequest,
    LeaseGrantResponse,
    LeaseKeepAliveRequest,
    LeaseKeepAliveResponse,
    LeaseRevokeRequest,
    LeaseRevokeResponse,
    PutRequest,
    PutResponse,
    RangeRequest,
    RangeResponse,
    RequestOp,
    SnapshotRequest,
    SnapshotResponse,
    StatusRequest,
    StatusResponse,
    TxnRequest,
    TxnResponse,
    WatchCreateRequest,
    WatchRequest,
    WatchResponse,
    key_bytes,
)

log = logging.getLogger(__name__)
Reply = TypeVar("Reply", bound=Message)

GRPC_DEADLINE_EXCEEDED = 4
GRPC_RESOURCE_EXHAUSTED = 8  # what grpc-go's client reports for a reply over its receive limit
GRPC_OUT_OF_RANGE = 11
GRPC_UNAVAILABLE = 14
KV = b"/etcdserverpb.KV/"
WATCH = b"/etcdserverpb.Watch/Watch"
LEASE = b"/etcdserverpb.Lease/"
MAINTENANCE = b"/etcdserverpb.Maintenance/"


class EtcdError(Exception):
    """etcd answered, and refused the request."""

    def __init__(self, message: str, code: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.code = code  # etcd's gRPC status code


class EtcdUnavailable(EtcdError):
    """No etcd member answered in time."""


class EtcdCompacted(EtcdError):
    """The requested revision has been compacted away."""

    def __init__(self, message: str, compact_revision: int = 0) -> None:
        super().__init__(message, GRPC_OUT_OF_RANGE)
        self.compact_revision = compact_revision


def prefix_end(prefix: bytes | str) -> bytes:
    """The ``range_end`` that selects every key starting with ``prefix``."""
    raw = bytearray(prefix.encode() if isinstance(prefix, str) else prefix)
    for i in range(len(raw) - 1, -1, -1):
        if raw[i] < 0xFF:
            raw[i] += 1
            return bytes(raw[: i + 1])
    return b"\0"


@dataclass
class EtcdConfig:
    endpoints: list[str]
    cafile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    request_timeout: float = 5.0
    connect_timeout: float = 2.0
    keepalive: Keepalive = field(default_factory=Keepalive)  # how a silently dead connection is found
    # The largest reply message taken from etcd; a larger one fails its call (EtcdError) as soon as
    # its length is known, before it is buffered. etcd's Go client, as kube-apiserver uses it, allows
    # math.MaxInt32 (its MaxCallRecvMsgSize default), and so does this: a Range over a whole
    # resource has to fit, and etcd's default backend quota (2 GiB) bounds what one can return.
    # Lower it to bound what one reply can make this process hold.
    max_reply_bytes: int = MAX_MESSAGE


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
        self._grpc: GrpcConnections | None = None

    @staticmethod
    def _ssl_context(config: EtcdConfig) -> ssl.SSLContext | None:
        if not any(e.startswith("https://") for e in config.endpoints):
            return None
        ctx = ssl.create_default_context(cafile=config.cafile)
        if config.certfile:
            ctx.load_cert_chain(config.certfile, config.keyfile)
        ctx.set_alpn_protocols(["h2"])
        return ctx

    async def start(self) -> None:
        if self._grpc is None:
            self._grpc = GrpcConnections(self._ssl, self.config.connect_timeout, self.config.keepalive,
                                         self.config.max_reply_bytes)

    async def close(self) -> None:
        if self._grpc is not None:
            self._grpc.close()
            self._grpc = None
        await asyncio.sleep(0)  # the aborted sockets close on the loop's next turn: a stopping etcd waits for them

    # -- transport -------------------------------------------------------------------

    def _move_past(self, index: int) -> None:
        """The next call or watch goes to the member after ``index``: that one failed it."""
        self._current = (index + 1) % len(self._endpoints)

    def _record(self, op: str, started: float, ok: bool) -> None:
        if self._observe is not None:
            self._observe(op, time.perf_counter() - started, ok)

    async def _call(self, method: bytes, request: Message, reply_type: type[Reply], *, idempotent: bool,
                    timeout: float | None = None, first_of_stream: bool = False) -> Reply:
        """One call on the current endpoint, its reply parsed; on to the next endpoint while the call
        was never sent (and, when doing it twice does no harm, also when a connection broke under it)."""
        if self._grpc is None:
            raise RuntimeError("EtcdClient.start() was not awaited")
        op = method.decode().rsplit("/", 1)[-1].lower()
        timeout = timeout if timeout is not None else self.config.request_timeout
        message = request.SerializeToString()
        last_error: Exception | None = None
        started = time.perf_counter()
        for attempt in range(len(self._endpoints)):
            index = (self._current + attempt) % len(self._endpoints)
            endpoint = self._endpoints[index]
            try:
                reply = await self._grpc.call(endpoint, method, message, timeout, first_of_stream)
            except GrpcError as e:
                self._current = index
                self._record(op, started, ok=False)
                raise self._error(e.message, e.code) from None
            except ReplyTooLarge as e:
                self._current = index
                self._record(op, started, ok=False)
                raise EtcdError(f"etcd's {op} reply: {e}", GRPC_RESOURCE_EXHAUSTED) from None
            except TimeoutError:
                self._record(op, started, ok=False)
                self._move_past(index)  # the next call asks another member
                raise EtcdUnavailable(f"etcd is unavailable: {endpoint.url} did not answer within "
                                      f"{timeout:g}s") from None
            except CallBroken as e:
                if not idempotent:
                    self._record(op, started, ok=False)
                    self._move_past(index)
                    raise EtcdUnavailable(f"etcd is unavailable: {e}; the write may or may not have been "
                                          "applied") from None
                last_error = e
                continue
            except NotSent as e:
                last_error = e
                continue
            self._current = index
            try:
                result = reply_type.FromString(reply)
            except DecodeError as e:
                self._record(op, started, ok=False)
                raise EtcdError(f"etcd's {op} reply could not be decoded: {e}") from None
            if not result.HasField("header"):  # every reply of etcd's has one
                self._record(op, started, ok=False)
                raise EtcdError(f"etcd's {op} reply carried no header")
            self._record(op, started, ok=True)
            return result
        self._record(op, started, ok=False)
        raise EtcdUnavailable(f"etcd is unavailable: {last_error}")

    @staticmethod
    def _error(message: str, code: int) -> EtcdError:
        """etcd's refusal as the exception the storage layer maps to an API status."""
        if "compacted" in message:
            return EtcdCompacted(message)
        if code in (GRPC_UNAVAILABLE, GRPC_DEADLINE_EXCEEDED):
            return EtcdUnavailable(message, code)
        return EtcdError(message, code)

    # -- KV --------------------------------------------------------------------------

    async def range(self, key: str | bytes, range_end: bytes | None = None, *, limit: int = 0,
                    revision: int = 0, keys_only: bool = False, count_only: bool = False,
                    serializable: bool = False) -> RangeResponse:
        request = RangeRequest(key=key_bytes(key), range_end=range_end, limit=limit, revision=revision,
                               keys_only=keys_only, count_only=count_only, serializable=serializable)
        return await self._call(KV + b"Range", request, RangeResponse, idempotent=True)

    async def current_revision(self, key: str | bytes) -> int:
        """etcd's revision as of a quorum read sent now: the smallest Range of ``key`` (which need
        not exist). This read is behind every consistent read."""
        request = RangeRequest(key=key_bytes(key), limit=1, keys_only=True)
        return (await self._call(KV + b"Range", request, RangeResponse, idempotent=True)).header.revision

    async def get(self, key: str | bytes) -> KeyValue | None:
        result = await self.range(key)
        return result.kvs[0] if result.kvs else None

    async def put(self, key: str | bytes, value: bytes, lease: int = 0) -> int:
        request = PutRequest(key=key_bytes(key), value=value, lease=lease)
        return (await self._call(KV + b"Put", request, PutResponse, idempotent=False)).header.revision

    async def delete_range(self, key: str | bytes, range_end: bytes | None = None) -> tuple[int, int]:
        """Delete keys; returns (deleted count, revision)."""
        request = DeleteRangeRequest(key=key_bytes(key), range_end=range_end)
        reply = await self._call(KV + b"DeleteRange", request, DeleteRangeResponse, idempotent=False)
        return reply.deleted, reply.header.revision

    async def txn(self, compare: list[Compare], success: list[RequestOp],
                  failure: list[RequestOp] | None = None) -> TxnResponse:
        """One transaction of compares and ops built with :func:`compare_mod_revision`, :func:`op_put`, ..."""
        request = TxnRequest(compare=compare, success=success, failure=failure)
        return await self._call(KV + b"Txn", request, TxnResponse, idempotent=False)

    async def compact(self, revision: int, physical: bool = False) -> None:
        await self._call(KV + b"Compact", CompactionRequest(revision=revision, physical=physical),
                         CompactionResponse, idempotent=False, timeout=max(self.config.request_timeout, 30.0))

    # -- leases ----------------------------------------------------------------------

    async def lease_grant(self, ttl: int) -> int:
        reply = await self._call(LEASE + b"LeaseGrant", LeaseGrantRequest(TTL=ttl), LeaseGrantResponse,
                                 idempotent=False)
        if reply.error:
            raise EtcdError(reply.error)
        return reply.ID

    async def lease_revoke(self, lease_id: int) -> None:
        await self._call(LEASE + b"LeaseRevoke", LeaseRevokeRequest(ID=lease_id), LeaseRevokeResponse,
                         idempotent=True)

    async def lease_keepalive(self, lease_id: int) -> int:
        """Refresh a lease once; returns its remaining TTL (0 = the lease is gone)."""
        reply = await self._call(LEASE + b"LeaseKeepAlive", LeaseKeepAliveRequest(ID=lease_id),
                                 LeaseKeepAliveResponse, idempotent=True, first_of_stream=True)
        return reply.TTL

    # -- maintenance -----------------------------------------------------------------

    async def status(self) -> None:
        """Ask the current member for its status: it answers, or this raises."""
        await self._call(MAINTENANCE + b"Status", StatusRequest(), StatusResponse, idempotent=True)

    async def snapshot(self) -> AsyncIterator[SnapshotResponse]:
        """etcd's snapshot of its whole backend, streamed in parts (Maintenance.Snapshot); the last is
        the SHA-256 of the data before it, as etcd appends it. Raises EtcdError, EtcdUnavailable when
        the stream breaks."""
        if self._grpc is None:
            raise RuntimeError("EtcdClient.start() was not awaited")
        index = self._current
        endpoint = self._endpoints[index]
        try:
            stream = await self._grpc.open_stream(endpoint, MAINTENANCE + b"Snapshot",
                                                  SnapshotRequest().SerializeToString(), self.config.request_timeout,
                                                  half_close=True)
        except (TimeoutError, ConnectionError) as e:
            self._move_past(index)
            raise EtcdUnavailable(f"etcd snapshot failed: {type(e).__name__}: {e}".rstrip(": ")) from e
        try:
            while (message := await stream.next()) is not None:
                yield SnapshotResponse.FromString(message)
        except GrpcError as e:
            raise self._error(f"etcd snapshot error: {e.message}", e.code) from None
        except ReplyTooLarge as e:
            raise EtcdError(f"etcd's snapshot reply: {e}", GRPC_RESOURCE_EXHAUSTED) from None
        except DecodeError as e:
            raise EtcdError(f"etcd's snapshot reply could not be decoded: {e}") from None
        except ConnectionError as e:
            self._move_past(index)
            raise EtcdUnavailable(f"etcd snapshot stream broke: {e}") from e
        finally:
            stream.cancel()

    # -- watch -----------------------------------------------------------------------

    async def watch(self, key: str | bytes, range_end: bytes | None = None, *, start_revision: int = 0,
                    prev_kv: bool = True, progress_notify: bool = True) -> AsyncIterator[WatchResponse]:
        """Stream watch responses; ends when the watch is canceled, raises when the stream breaks."""
        if self._grpc is None:
            raise RuntimeError("EtcdClient.start() was not awaited")
        request = WatchRequest(create_request=WatchCreateRequest(
            key=key_bytes(key), range_end=range_end, start_revision=start_revision, prev_kv=prev_kv,
            progress_notify=progress_notify)).SerializeToString()
        index = self._current
        endpoint = self._endpoints[index]
        try:
            stream = await self._grpc.open_stream(endpoint, WATCH, request, self.config.request_timeout)
        except (TimeoutError, ConnectionError) as e:
            self._move_past(index)
            raise EtcdUnavailable(f"etcd watch failed: {type(e).__name__}: {e}".rstrip(": ")) from e
        try:
            while (message := await stream.next()) is not None:
                resp = WatchResponse.FromString(message)
                yield resp
                if resp.canceled:
                    return
        except GrpcError as e:
            raise self._error(f"etcd watch error: {e.message}", e.code) from None
        except ReplyTooLarge as e:
            raise EtcdError(f"etcd's watch reply: {e}", GRPC_RESOURCE_EXHAUSTED) from None
        except DecodeError as e:
            raise EtcdError(f"etcd's watch reply could not be decoded: {e}") from None
        except ConnectionError as e:
            self._move_past(index)  # the member may be gone: try another
            raise EtcdUnavailable(f"etcd watch stream broke: {e}") from e
        finally:
            stream.cancel()
