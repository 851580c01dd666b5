"""The protobuf wire format of the etcd v3 messages this server sends over gRPC.

Hand-encoded because the set is small and fixed (etcd's ``rpc.proto`` and ``kv.proto``):
a request is a few length-delimited fields, and of a reply only what the client returns is
read. Field numbers are etcd's; proto3 leaves out fields at their default value, and so do
the encoders here, except inside a ``oneof``, where presence selects the member.

Compares and request ops are built once as encoded messages (:func:`compare_mod_revision`,
:func:`op_put`, ...) and put together by :func:`txn_request`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

# Compare.CompareTarget and the Compare.target_union member that goes with each
_TARGET_CREATE, _TARGET_MOD, _TARGET_VALUE = 1, 2, 3  # Compare.CompareTarget


class DecodeError(ValueError):
    """A reply that is not the protobuf message it should be."""


def varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64  # int64: two's complement, ten bytes
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _bytes_field(number: int, data: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(data)) + data


def _key(key: str | bytes) -> bytes:
    return key.encode() if isinstance(key, str) else key


def _message(*fields: tuple[int, int | bytes | str | None]) -> bytes:
    """Scalar fields in order, each left out at proto3's default (0, false, empty, None), as etcd's
    own encoder leaves them out. Not for a oneof's members, which must be present even at 0."""
    out = b""
    for number, value in fields:
        if not value:
            continue
        if isinstance(value, int):  # bool is an int: true is 1
            out += varint(number << 3) + varint(int(value))
        else:
            out += _bytes_field(number, _key(value))
    return out


# -- requests ---------------------------------------------------------------------------

def range_request(key: str | bytes, range_end: bytes | None = None, *, limit: int = 0, revision: int = 0,
                  keys_only: bool = False, count_only: bool = False, serializable: bool = False) -> bytes:
    """RangeRequest{key 1, range_end 2, limit 3, revision 4, serializable 7, keys_only 8, count_only 9}."""
    return _message((1, key), (2, range_end), (3, limit), (4, revision), (7, serializable), (8, keys_only),
                    (9, count_only))


def put_request(key: str | bytes, value: bytes, lease: int = 0) -> bytes:
    """PutRequest{key 1, value 2, lease 3}."""
    return _message((1, key), (2, value), (3, lease))


def delete_range_request(key: str | bytes, range_end: bytes | None = None) -> bytes:
    """DeleteRangeRequest{key 1, range_end 2}."""
    return _message((1, key), (2, range_end))


def _compare(target: int, key: str | bytes, member: bytes) -> bytes:
    """Compare{target 2, key 3, then ``member`` of target_union}; result 1 is EQUAL, the default.
    The member is encoded even at 0: in a oneof, presence is what selects it."""
    return _message((2, target), (3, key)) + member


def compare_mod_revision(key: str | bytes, revision: int) -> bytes:
    """Compare: the key's mod_revision (6) equals ``revision``."""
    return _compare(_TARGET_MOD, key, varint(6 << 3) + varint(revision))


def compare_absent(key: str | bytes) -> bytes:
    """Compare: the key's create_revision (5) is 0, i.e. it does not exist."""
    return _compare(_TARGET_CREATE, key, varint(5 << 3) + varint(0))


def compare_value(key: str | bytes, value: bytes | str) -> bytes:
    """Compare: the key's value (7) equals ``value``."""
    return _compare(_TARGET_VALUE, key, _bytes_field(7, _key(value)))


def op_put(key: str | bytes, value: bytes, lease: int = 0) -> bytes:
    """RequestOp{request_put 2}."""
    return _bytes_field(2, put_request(key, value, lease))


def op_delete(key: str | bytes, range_end: bytes | None = None) -> bytes:
    """RequestOp{request_delete_range 3}."""
    return _bytes_field(3, delete_range_request(key, range_end))


def watch_create_request(key: str | bytes, range_end: bytes | None = None, *, start_revision: int = 0,
                         prev_kv: bool = False, progress_notify: bool = False) -> bytes:
    """WatchRequest{create_request 1: WatchCreateRequest{key 1, range_end 2, start_revision 3,
    progress_notify 4, prev_kv 6}}."""
    return _bytes_field(1, _message((1, key), (2, range_end), (3, start_revision), (4, progress_notify),
                                    (6, prev_kv)))


def compaction_request(revision: int, physical: bool = False) -> bytes:
    """CompactionRequest{revision 1, physical 2}."""
    return _message((1, revision), (2, physical))


def lease_grant_request(ttl: int) -> bytes:
    """LeaseGrantRequest{TTL 1}."""
    return _message((1, ttl))


def lease_request(lease_id: int) -> bytes:
    """LeaseRevokeRequest or LeaseKeepAliveRequest: {ID 1}."""
    return _message((1, lease_id))


def txn_request(compare: list[bytes], success: list[bytes], failure: list[bytes]) -> bytes:
    """TxnRequest{compare 1, success 2, failure 3}, each repeated."""
    return (b"".join(_bytes_field(1, c) for c in compare) + b"".join(_bytes_field(2, op) for op in success)
            + b"".join(_bytes_field(3, op) for op in failure))


# -- replies ----------------------------------------------------------------------------

def _read_varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        byte = buf[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, i


def fields(buf: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, value) of each field: an int for varints, bytes for length-delimited ones."""
    out: list[tuple[int, int | bytes]] = []
    i, end = 0, len(buf)
    try:
        while i < end:
            tag, i = _read_varint(buf, i)
            number, wire = tag >> 3, tag & 7
            if wire == 0:
                value, i = _read_varint(buf, i)
                out.append((number, value))
            elif wire == 2:
                size, i = _read_varint(buf, i)
                if i + size > end:
                    raise DecodeError("a field runs past the end of the message")
                out.append((number, buf[i:i + size]))
                i += size
            elif wire in (1, 5):
                i += 8 if wire == 1 else 4
            else:
                raise DecodeError(f"unexpected protobuf wire type {wire}")
    except IndexError:
        raise DecodeError("the message ends inside a field") from None
    return out


def _int64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def header_revision(header: bytes) -> int:
    """ResponseHeader.revision (field 3)."""
    return int_field(header, 3)


@dataclass(frozen=True, slots=True)
class KeyValue:
    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int = 0

    @classmethod
    def decode(cls, message: bytes) -> KeyValue:
        """mvccpb.KeyValue{key 1, create_revision 2, mod_revision 3, version 4, value 5, lease 6}."""
        key = value = b""
        numbers = [0, 0, 0, 0, 0, 0, 0]
        for number, field in fields(message):
            if isinstance(field, bytes):
                if number == 1:
                    key = field
                elif number == 5:
                    value = field
            elif number < 7:
                numbers[number] = _int64(field)
        return cls(key, value, numbers[2], numbers[3], numbers[4], numbers[6])


@dataclass(frozen=True, slots=True)
class RangeResult:
    kvs: list[KeyValue]
    count: int
    more: bool
    revision: int

    @classmethod
    def decode(cls, message: bytes) -> RangeResult:
        """RangeResponse{header 1, kvs 2, more 3, count 4}."""
        kvs: list[KeyValue] = []
        revision = count = 0
        more = False
        for number, field in fields(message):
            if number == 2 and isinstance(field, bytes):
                kvs.append(KeyValue.decode(field))
            elif number == 1 and isinstance(field, bytes):
                revision = header_revision(field)
            elif number == 3:
                more = bool(field)
            elif number == 4 and isinstance(field, int):
                count = field
        return cls(kvs, count, more, revision)


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: str  # "PUT" or "DELETE"
    kv: KeyValue
    prev_kv: KeyValue | None

    @classmethod
    def decode(cls, message: bytes) -> WatchEvent:
        """mvccpb.Event{type 1 (PUT 0, DELETE 1), kv 2, prev_kv 3}."""
        kind, kv, prev = 0, None, None
        for number, value in fields(message):
            if number == 2 and isinstance(value, bytes):
                kv = KeyValue.decode(value)
            elif number == 3 and isinstance(value, bytes):
                prev = KeyValue.decode(value)
            elif number == 1 and isinstance(value, int):
                kind = value
        return cls("DELETE" if kind == 1 else "PUT", kv or KeyValue(b"", b"", 0, 0, 0), prev)


@dataclass(slots=True)
class WatchResponse:
    revision: int
    events: list[WatchEvent] = dataclasses.field(default_factory=list)
    created: bool = False
    canceled: bool = False
    compact_revision: int = 0
    cancel_reason: str = ""

    @property
    def is_progress_notify(self) -> bool:
        return not self.events and not self.created and not self.canceled

    @classmethod
    def decode(cls, message: bytes) -> WatchResponse:
        """WatchResponse{header 1, created 3, canceled 4, compact_revision 5, cancel_reason 6, events 11}."""
        resp = cls(0)
        for number, value in fields(message):
            if isinstance(value, bytes):
                if number == 11:
                    resp.events.append(WatchEvent.decode(value))
                elif number == 1:
                    resp.revision = header_revision(value)
                elif number == 6:
                    resp.cancel_reason = value.decode(errors="replace")
            elif number == 3:
                resp.created = bool(value)
            elif number == 4:
                resp.canceled = bool(value)
            elif number == 5:
                resp.compact_revision = _int64(value)
        return resp


@dataclass(frozen=True, slots=True)
class TxnResult:
    succeeded: bool
    revision: int

    @classmethod
    def decode(cls, message: bytes) -> TxnResult:
        """TxnResponse{header 1, succeeded 2}; the responses of its ops (3) are not read."""
        succeeded, revision = False, None
        for number, value in fields(message):
            if number == 1 and isinstance(value, bytes):
                revision = header_revision(value)
            elif number == 2:
                succeeded = value == 1
        if revision is None:
            raise DecodeError("etcd's reply carried no header")
        return cls(succeeded, revision)


def reply_revision(message: bytes) -> int:
    """The header's revision of a Range, Put, DeleteRange or Txn reply (all carry it as field 1)."""
    for number, field in fields(message):
        if number == 1 and isinstance(field, bytes):
            return header_revision(field)
    raise DecodeError("etcd's reply carried no header")


def int_field(message: bytes, number: int) -> int:
    """An int64 field of a reply: DeleteRangeResponse.deleted (2), LeaseGrantResponse.ID (2), a TTL (3)."""
    for found, value in fields(message):
        if found == number and isinstance(value, int):
            return _int64(value)
    return 0


def string_field(message: bytes, number: int) -> str:
    """A string field of a reply, such as LeaseGrantResponse.error (4)."""
    for found, value in fields(message):
        if found == number and isinstance(value, bytes):
            return value.decode(errors="replace")
    return ""
