"""protocol/trace.py: RocketMQ's trace data layout (golden bytes), round trips, bad bodies."""

from __future__ import annotations

import pytest

from protocol.trace import (
    ConsumeReturn,
    EndRecord,
    EndTransactionRecord,
    MessageType,
    PubRecord,
    SubAfterRecord,
    SubBeforeRecord,
    TraceFormatError,
    TraceRecord,
    TraceType,
    decode_records,
    encode_records,
    record_msg_ids,
)

A, B = "\x01", "\x02"

PUB = PubRecord(
    timestamp=1700000000123,
    group="pg",
    topic="orders",
    msg_id="7F00000100002A9F0000000000000000",
    tags="tagA",
    keys="k1 k2",
    store_host="127.0.0.1:10911",
    body_length=5,
    cost_ms=3,
    offset_msg_id="7F00000100002A9F00000000000000A0",
    client_host="127.0.0.1:50000",
    queue_id=2,
    queue_offset=41,
    traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
)


def test_pub_golden_bytes_are_rocketmqs_fields_then_ours() -> None:
    body = encode_records([PUB])
    # RocketMQ's TraceDataEncoder Pub: type ts region group topic msgId tags keys storeHost
    # bodyLength costTime msgType offsetMsgId success (clientHost): our four after them
    rocketmq = A.join(
        [
            "Pub", "1700000000123", "DefaultRegion", "pg", "orders",
            "7F00000100002A9F0000000000000000", "tagA", "k1 k2", "127.0.0.1:10911", "5", "3",
            "0", "7F00000100002A9F00000000000000A0", "true", "127.0.0.1:50000",
        ]
    )  # fmt: skip
    ours = A.join(["2", "41", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "client"])
    assert body == rocketmq + A + ours + B
    assert body.encode()[:4] == b"Pub\x01"


def test_sub_records_golden_bytes() -> None:
    before = SubBeforeRecord(
        timestamp=10, group="g1", request_id="r1", msg_id="M", retry_times=2, keys="k"
    )
    after = SubAfterRecord(
        timestamp=30,
        group="g1",
        request_id="r1",
        msg_id="M",
        cost_ms=20,
        success=False,
        keys="k",
        context_code=ConsumeReturn.FAILED,
    )
    assert encode_records([before, after]) == (
        A.join(["SubBefore", "10", "DefaultRegion", "g1", "r1", "M", "2", "k", "", "", "client"])
        + B
        + A.join(["SubAfter", "r1", "M", "20", "false", "k", "4", "30", "g1", "", "client"])
        + B
    )


def test_end_transaction_golden_bytes() -> None:
    end = EndTransactionRecord(
        timestamp=5,
        group="txg",
        topic="t",
        msg_id="M",
        store_host="h:1",
        transaction_id="tx1",
        state="ROLLBACK_MESSAGE",
        from_check=True,
    )
    assert encode_records([end]) == A.join(
        [
            "EndTransaction", "5", "DefaultRegion", "txg", "t", "M", "", "", "h:1", "1", "tx1",
            "ROLLBACK_MESSAGE", "true", "broker",
        ]
    ) + B  # fmt: skip


ALL: list[TraceRecord] = [
    PUB,
    SubBeforeRecord(timestamp=1, group="g", request_id="r", msg_id="M", client_host="c:1"),
    SubAfterRecord(timestamp=2, group="g", request_id="r", msg_id="M", cost_ms=1),
    EndTransactionRecord(timestamp=3, group="g", topic="t", msg_id="M"),
    EndRecord(
        kind=TraceType.RETRY,
        timestamp=4,
        group="g",
        topic="t",
        msg_id="M",
        attempt=1,
        detail="%RETRY%g",
    ),
    EndRecord(
        kind=TraceType.DLQ,
        timestamp=5,
        group="g",
        topic="t",
        msg_id="M",
        attempt=3,
        detail="%DLQ%g",
    ),
    EndRecord(kind=TraceType.RECALL, timestamp=6, group="", topic="t", msg_id="M"),
    EndRecord(
        kind=TraceType.DELAY, timestamp=7, group="", topic="t", msg_id="M", detail="1700000009999"
    ),
]


def test_every_record_type_round_trips_alone_and_batched() -> None:
    for record in ALL:
        assert decode_records(encode_records([record])) == [record]
    assert decode_records(encode_records(ALL).encode()) == ALL
    assert record_msg_ids(ALL) == [PUB.msg_id, "M"]


def test_rocketmqs_older_pub_records_decode() -> None:
    # 13 fields (before offsetMsgId) and 14 (before clientHost), as older Java clients wrote
    thirteen = A.join(["Pub", "1", "r", "g", "t", "M", "", "", "h", "0", "2", "3", "true"]) + B
    fourteen = A.join(["Pub", "1", "r", "g", "t", "M", "", "", "h", "0", "2", "0", "O", "false"])
    [old] = decode_records(thirteen)
    assert isinstance(old, PubRecord)
    assert (old.msg_type, old.success, old.offset_msg_id) == (MessageType.DELAY, True, "")
    [newer] = decode_records(fourteen + B)
    assert isinstance(newer, PubRecord)
    assert (newer.offset_msg_id, newer.success, newer.queue_id) == ("O", False, -1)


def test_unknown_record_types_are_skipped_like_rocketmqs_decoder() -> None:
    body = A.join(["Later", "x"]) + B + encode_records([PUB])
    assert decode_records(body) == [PUB]


@pytest.mark.parametrize(
    "body",
    [
        A.join(["Pub", "notanumber"] + [""] * 12) + B,
        A.join(["SubBefore", "1", "r"]) + B,
        A.join(["EndTransaction", "1", "r", "g", "t", "M", "", "", "h", "1", "x", "NOPE", "true"]),
        A.join(["Pub", "1", "r", "g", "t", "M", "", "", "h", "0", "2", "99", "true"]),
        b"\xff\xfe",
    ],
)
def test_a_bad_body_is_one_clear_error(body: str | bytes) -> None:
    with pytest.raises(TraceFormatError):
        decode_records(body)


def test_a_field_holding_a_separator_is_refused() -> None:
    with pytest.raises(TraceFormatError, match="separator"):
        encode_records([PubRecord(timestamp=1, group="g", topic="t", msg_id="M", keys="a\x02b")])
