"""etcd's protobuf messages as the client writes and reads them, checked byte for byte against the
encoding rules (tag = field number << 3 | wire type; varints; length-delimited bytes)."""

from __future__ import annotations

import pytest
from google.protobuf.internal import api_implementation

from apiserver.etcd.messages import (
    DecodeError,
    Event,
    KeyValue,
    RangeResponse,
    ResponseHeader,
    TxnRequest,
    TxnResponse,
    WatchCreateRequest,
    WatchRequest,
    WatchResponse,
    compare_absent,
    compare_mod_revision,
    compare_value,
    op_delete,
    op_put,
)

# mvccpb.KeyValue{key "/ab", create_revision 5, mod_revision 7, version 2, value "hi", lease 42}
KV_AB = b"\x0a\x03/ab" + b"\x10\x05" + b"\x18\x07" + b"\x20\x02" + b"\x2a\x02hi" + b"\x30\x2a"
AB = KeyValue(key=b"/ab", value=b"hi", create_revision=5, mod_revision=7, version=2, lease=42)


def test_the_messages_run_on_protobufs_c_implementation() -> None:
    assert api_implementation.Type() == "upb"


def test_a_key_value_decodes_every_field() -> None:
    assert KeyValue.FromString(KV_AB) == AB


def test_fields_a_newer_etcd_adds_are_skipped() -> None:
    unknown = b"\x79" + bytes(8) + b"\x85\x01" + bytes(4) + b"\xa2\x06\x03xyz"  # fixed64 15, fixed32 16, bytes 100
    kv = KeyValue.FromString(unknown + KV_AB)
    kv.DiscardUnknownFields()
    assert kv == AB


def test_an_int64_below_zero_decodes_as_negative() -> None:
    minus_one = b"\xff" * 9 + b"\x01"  # int64: two's complement, ten bytes
    assert ResponseHeader(revision=-1).SerializeToString() == b"\x18" + minus_one
    assert ResponseHeader.FromString(b"\x18" + minus_one).revision == -1


@pytest.mark.parametrize("message", [b"\x0a\x05ab", b"\x10", b"\x10\xff", b"\x0b"])
def test_a_truncated_or_malformed_message_is_a_decode_error(message: bytes) -> None:
    with pytest.raises(DecodeError):
        KeyValue.FromString(message)


def test_compares_name_their_target_and_set_the_matching_union_member() -> None:
    # target 2 (CREATE 1, MOD 2, VALUE 3), key 3, then create_revision 5 / mod_revision 6 / value 7;
    # result 1 is EQUAL, proto3's default, and left out.
    assert compare_absent("/k").SerializeToString() == b"\x10\x01\x1a\x02/k\x28\x00"
    assert compare_mod_revision("/k", 300).SerializeToString() == b"\x10\x02\x1a\x02/k\x30\xac\x02"
    assert compare_value("/k", "v").SerializeToString() == b"\x10\x03\x1a\x02/k\x3a\x01v"


def test_a_transaction_nests_its_compares_and_ops() -> None:
    compare = compare_mod_revision("/k", 3).SerializeToString()
    put = b"\x0a\x02/k\x12\x01v"  # PutRequest{key 1, value 2}
    delete = b"\x0a\x02/k"  # DeleteRangeRequest{key 1}
    op_put_bytes = op_put("/k", b"v").SerializeToString()
    op_delete_bytes = op_delete("/k").SerializeToString()
    assert op_put_bytes == b"\x12" + bytes([len(put)]) + put  # RequestOp.request_put 2
    assert op_delete_bytes == b"\x1a" + bytes([len(delete)]) + delete  # RequestOp.request_delete_range 3
    txn = TxnRequest(compare=[compare_mod_revision("/k", 3)], success=[op_put("/k", b"v")],
                     failure=[op_delete("/k")]).SerializeToString()
    assert txn == (b"\x0a" + bytes([len(compare)]) + compare
                   + b"\x12" + bytes([len(op_put_bytes)]) + op_put_bytes
                   + b"\x1a" + bytes([len(op_delete_bytes)]) + op_delete_bytes)


def test_a_transactions_outcome_and_revision_come_from_its_reply() -> None:
    header = b"\x0a\x03\x18\x90\x4e"  # TxnResponse.header 1: ResponseHeader{revision 10000}
    succeeded = TxnResponse.FromString(header + b"\x10\x01")
    assert (succeeded.succeeded, succeeded.header.revision) == (True, 10000)
    failed = TxnResponse.FromString(header)  # false is proto3's default: absent
    assert (failed.succeeded, failed.header.revision) == (False, 10000)


def test_a_range_reply_carries_its_kvs_count_more_and_revision() -> None:
    reply = RangeResponse.FromString(b"\x0a\x03\x18\x90\x4e" + b"\x12" + bytes([len(KV_AB)]) + KV_AB
                                     + b"\x18\x01" + b"\x20\x02")
    assert (list(reply.kvs), reply.count, reply.more, reply.header.revision) == ([AB], 2, True, 10000)


def test_a_watch_request_asks_for_what_the_cache_needs() -> None:
    create = b"\x0a\x01/" + b"\x12\x01\x30" + b"\x18\x07" + b"\x20\x01" + b"\x30\x01"
    request = WatchRequest(create_request=WatchCreateRequest(key=b"/", range_end=b"0", start_revision=7, prev_kv=True,
                                                             progress_notify=True))
    assert request.SerializeToString() == b"\x0a" + bytes([len(create)]) + create


def test_watch_replies_carry_events_and_how_the_watch_stands() -> None:
    delete = b"\x08\x01" + b"\x12" + bytes([len(KV_AB)]) + KV_AB + b"\x1a" + bytes([len(KV_AB)]) + KV_AB
    events = WatchResponse.FromString(b"\x0a\x02\x18\x09" + b"\x5a" + bytes([len(delete)]) + delete)
    assert events.header.revision == 9 and not events.created
    assert [(e.type, e.kv.key, e.HasField("prev_kv")) for e in events.events] == [(Event.DELETE, b"/ab", True)]
    assert WatchResponse.FromString(b"\x0a\x02\x18\x09\x18\x01").created
    progress = WatchResponse.FromString(b"\x0a\x02\x18\x09")  # no events, neither created nor canceled
    assert (progress.header.revision, len(progress.events), progress.created, progress.canceled) == (9, 0, False, False)
    canceled = WatchResponse.FromString(b"\x20\x01\x28\x05\x32\x09compacted")
    assert (canceled.canceled, canceled.compact_revision, canceled.cancel_reason) == (True, 5, "compacted")
