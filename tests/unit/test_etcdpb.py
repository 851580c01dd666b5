"""etcd's protobuf messages as the client writes and reads them, checked byte for byte against the
encoding rules (tag = field number << 3 | wire type; varints; length-delimited bytes)."""

from __future__ import annotations

import pytest

from apiserver.etcd.messages import (
    DecodeError,
    KeyValue,
    RangeResult,
    TxnResult,
    WatchResponse,
    compare_absent,
    compare_mod_revision,
    compare_value,
    header_revision,
    op_delete,
    op_put,
    txn_request,
    varint,
    watch_create_request,
)

# mvccpb.KeyValue{key "/ab", create_revision 5, mod_revision 7, version 2, value "hi", lease 42}
KV_AB = b"\x0a\x03/ab" + b"\x10\x05" + b"\x18\x07" + b"\x20\x02" + b"\x2a\x02hi" + b"\x30\x2a"


def test_a_key_value_decodes_every_field() -> None:
    assert KeyValue.decode(KV_AB) == KeyValue(b"/ab", b"hi", 5, 7, 2, 42)


def test_fields_a_newer_etcd_adds_are_skipped() -> None:
    unknown = b"\x79" + bytes(8) + b"\x85\x01" + bytes(4) + b"\xa2\x06\x03xyz"  # fixed64 15, fixed32 16, bytes 100
    assert KeyValue.decode(unknown + KV_AB) == KeyValue(b"/ab", b"hi", 5, 7, 2, 42)


def test_an_int64_below_zero_decodes_as_negative() -> None:
    assert varint(-1) == b"\xff" * 9 + b"\x01"
    assert header_revision(b"\x18" + varint(-1)) == -1


@pytest.mark.parametrize("message", [b"\x0a\x05ab", b"\x10", b"\x10\xff", b"\x0b"])
def test_a_truncated_or_malformed_message_is_a_decode_error(message: bytes) -> None:
    with pytest.raises(DecodeError):
        KeyValue.decode(message)


def test_compares_name_their_target_and_set_the_matching_union_member() -> None:
    # target 2 (CREATE 1, MOD 2, VALUE 3), key 3, then create_revision 5 / mod_revision 6 / value 7;
    # result 1 is EQUAL, proto3's default, and left out.
    assert compare_absent("/k") == b"\x10\x01\x1a\x02/k\x28\x00"
    assert compare_mod_revision("/k", 300) == b"\x10\x02\x1a\x02/k\x30\xac\x02"
    assert compare_value("/k", "v") == b"\x10\x03\x1a\x02/k\x3a\x01v"


def test_a_transaction_nests_its_compares_and_ops() -> None:
    compare = compare_mod_revision("/k", 3)
    put = b"\x0a\x02/k\x12\x01v"  # PutRequest{key 1, value 2}
    delete = b"\x0a\x02/k"  # DeleteRangeRequest{key 1}
    assert op_put("/k", b"v") == b"\x12" + bytes([len(put)]) + put  # RequestOp.request_put 2
    assert op_delete("/k") == b"\x1a" + bytes([len(delete)]) + delete  # RequestOp.request_delete_range 3
    txn = txn_request([compare], [op_put("/k", b"v")], [op_delete("/k")])
    assert txn == (b"\x0a" + bytes([len(compare)]) + compare
                   + b"\x12" + bytes([len(op_put("/k", b"v"))]) + op_put("/k", b"v")
                   + b"\x1a" + bytes([len(op_delete("/k"))]) + op_delete("/k"))


def test_a_transactions_outcome_and_revision_come_from_its_reply() -> None:
    header = b"\x0a\x03\x18\x90\x4e"  # TxnResponse.header 1: ResponseHeader{revision 10000}
    assert TxnResult.decode(header + b"\x10\x01") == TxnResult(True, 10000)
    assert TxnResult.decode(header) == TxnResult(False, 10000)  # false is proto3's default: absent


def test_a_range_reply_carries_its_kvs_count_more_and_revision() -> None:
    reply = b"\x0a\x03\x18\x90\x4e" + b"\x12" + bytes([len(KV_AB)]) + KV_AB + b"\x18\x01" + b"\x20\x02"
    assert RangeResult.decode(reply) == RangeResult([KeyValue(b"/ab", b"hi", 5, 7, 2, 42)], 2, True, 10000)


def test_a_watch_request_asks_for_what_the_cache_needs() -> None:
    create = b"\x0a\x01/" + b"\x12\x01\x30" + b"\x18\x07" + b"\x20\x01" + b"\x30\x01"
    assert watch_create_request("/", b"0", start_revision=7, prev_kv=True, progress_notify=True) == (
        b"\x0a" + bytes([len(create)]) + create)


def test_watch_replies_carry_events_and_how_the_watch_stands() -> None:
    delete = b"\x08\x01" + b"\x12" + bytes([len(KV_AB)]) + KV_AB + b"\x1a" + bytes([len(KV_AB)]) + KV_AB
    events = WatchResponse.decode(b"\x0a\x02\x18\x09" + b"\x5a" + bytes([len(delete)]) + delete)
    assert events.revision == 9 and not events.is_progress_notify
    assert [(e.type, e.kv.key, e.prev_kv is not None) for e in events.events] == [("DELETE", b"/ab", True)]
    assert WatchResponse.decode(b"\x0a\x02\x18\x09\x18\x01").created
    assert WatchResponse.decode(b"\x0a\x02\x18\x09").is_progress_notify
    canceled = WatchResponse.decode(b"\x20\x01\x28\x05\x32\x09compacted")
    assert (canceled.canceled, canceled.compact_revision, canceled.cancel_reason) == (True, 5, "compacted")
