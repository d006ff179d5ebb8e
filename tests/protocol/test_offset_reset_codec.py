"""INVOKE_BROKER_TO_RESET_OFFSET, its answer and RESET_CONSUMER_CLIENT_OFFSET
(protocol/broker_requests/offsets.py): ``parse(encode(x)) == x`` through a real frame for any
value hypothesis builds; one fixed value of each encodes to the same frame bytes as when this
test was written (a deliberate change rewrites them here, with the reason); a bad field raises
one FieldError naming it."""

from __future__ import annotations

import re
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.acl import User, UserType, make_rule
from protocol.broker_requests.offsets import (
    OUTCOMES,
    TO_MAX,
    OffsetsReset,
    QueueReset,
    ResetNotice,
    ResetOffset,
)
from protocol.codes import RequestCode
from protocol.fields import FieldError
from protocol.pop import (
    Reset,
    ReviveRecordError,
    decode_revive_record,
    encode_revive_record,
)
from protocol.remoting import FrameDecoder, Scalar, encode_frame, request
from protocol.request_permissions import authorize, broker_checks

names = st.text(min_size=1, max_size=20)
groups = st.from_regex(r"[A-Za-z0-9_|.\-]{1,40}", fullmatch=True)
naturals = st.integers(0, 2**63 - 1)
queue_ids = st.integers(0, 2**31 - 1)


def reset_offsets(**queue: st.SearchStrategy[int]) -> st.SearchStrategy[ResetOffset]:
    """ResetOffset requests of any topic, group, time and force, with ``queue``'s fields."""
    return st.builds(
        ResetOffset,
        topic=names,
        group=groups,
        timestamp=st.one_of(st.just(TO_MAX), naturals),
        force=st.booleans(),
        **queue,
    )


resets = st.one_of(
    reset_offsets(queue_id=st.one_of(st.just(-1), queue_ids)),  # by time
    reset_offsets(queue_id=queue_ids, offset=naturals),  # one queue to an offset
    # a static topic's item: the logical offset it holds, or quiet
    reset_offsets(
        queue_id=queue_ids,
        offset=naturals,
        logical_offset=st.one_of(st.none(), naturals),
        notify=st.booleans(),
    ),
)
queue_resets = st.builds(
    QueueReset,
    offset=naturals,
    previous=st.one_of(st.none(), naturals),
    min_offset=naturals,
    max_offset=naturals,
    outcome=st.sampled_from(OUTCOMES),
)
answers = st.builds(
    OffsetsReset,
    queues=st.dictionaries(queue_ids, queue_resets, max_size=8),
    notified=st.integers(0, 1000),
)
notices = st.builds(
    ResetNotice,
    topic=names,
    group=groups,
    broker_name=names,
    offsets=st.dictionaries(queue_ids, naturals, min_size=1, max_size=8),
)
logical_notices = st.builds(  # a static topic's item: its queue's logical offset beside it
    lambda notice, logical: ResetNotice(
        topic=notice.topic,
        group=notice.group,
        broker_name=notice.broker_name,
        offsets=notice.offsets,
        logical={min(notice.offsets): logical},
    ),
    notices,
    naturals,
)


def wire(code: int, value: Any) -> bytes:
    header, body = value.encode()
    return encode_frame(request(code, 1, header, body))


def back(cls: type[Any], data: bytes) -> Any:
    (frame,) = FrameDecoder().feed(data)
    return cls.parse(frame.header, frame.body)


def assert_round_trips_as(value: Any, code: RequestCode, rocketmq_number: int) -> None:
    """``value`` sent in a request frame arrives under ``code`` (RocketMQ's number) and parses
    back to itself."""
    (frame,) = FrameDecoder().feed(wire(value.code, value))
    assert frame.code == code
    assert code.value == rocketmq_number
    assert type(value).parse(frame.header, frame.body) == value


@settings(deadline=None)  # timing is not what these check (loaded CI hosts)
@given(resets)
def test_a_reset_request_round_trips_through_a_frame(ask: ResetOffset) -> None:
    assert_round_trips_as(ask, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, 222)


@settings(deadline=None)  # timing is not what these check (loaded CI hosts)
@given(answers)
def test_a_reset_answer_round_trips_through_a_frame(answer: OffsetsReset) -> None:
    assert back(OffsetsReset, wire(1, answer)) == answer


@settings(deadline=None)  # timing is not what these check (loaded CI hosts)
@given(st.one_of(notices, logical_notices))
def test_a_reset_notice_round_trips_through_a_frame(notice: ResetNotice) -> None:
    assert_round_trips_as(notice, RequestCode.RESET_CONSUMER_CLIENT_OFFSET, 220)


# Read by hand when written: msgpack [kind 0, code, opaque 1, flags 0, header map, body]. The
# time 1_700_000_000_000 is cf 0000018bcfe56800 as in test_typed_requests; -1 is ff.
GOLDEN: list[tuple[int, Any, str]] = [
    (
        222,
        ResetOffset(topic="T", group="g", timestamp=1_700_000_000_000, force=True),
        "000000349600ccde010084a5746f706963a154a567726f7570a167a974696d657374616d70cf0000018b"
        "cfe56800a76973466f726365c3c0",
    ),
    (
        222,
        ResetOffset(topic="T", group="g", queue_id=3, offset=42),
        "0000003d9600ccde010086a5746f706963a154a567726f7570a167a974696d657374616d70ffa7697346"
        "6f726365c2a77175657565496403a66f66667365742ac0",
    ),
    (
        1,
        OffsetsReset(
            queues={
                0: QueueReset(offset=5, previous=9, min_offset=0, max_offset=12, outcome="reset")
            },
            notified=2,
        ),
        "00000047960001010080c43f82a6717565756573810085a66f666673657405a870726576696f757309a3"
        "6d696e00a36d61780ca76f7574636f6d65a57265736574a86e6f74696669656402",
    ),
    (
        220,
        ResetNotice(topic="T", group="g", broker_name="broker-a", offsets={0: 5, 1: 7}),
        "0000003b9600ccdc010083a5746f706963a154a567726f7570a167aa62726f6b65724e616d65a862726f"
        "6b65722d61c40e81a76f6666736574738200050107",
    ),
    (  # a static topic's item that holds the logical offset 12: "logicalOffset" 0c
        222,
        ResetOffset(topic="T", group="g", queue_id=1, offset=40, logical_offset=12),
        "0000004c9600ccde010087a5746f706963a154a567726f7570a167a974696d657374616d70ffa7697346"
        "6f726365c2a77175657565496401a66f666673657428ad6c6f676963616c4f66667365740cc0",
    ),
    (  # an item that does not hold it: "notify" false (c2)
        222,
        ResetOffset(topic="T", group="g", queue_id=0, offset=0, notify=False),
        "000000459600ccde010087a5746f706963a154a567726f7570a167a974696d657374616d70ffa7697346"
        "6f726365c2a77175657565496400a66f666673657400a66e6f74696679c2c0",
    ),
    (  # its notice: body {"offsets": {1: 40}, "logical": {1: 12}}
        220,
        ResetNotice(topic="T", group="g", broker_name="broker-a", offsets={1: 40}, logical={1: 12}),
        "000000449600ccdc010083a5746f706963a154a567726f7570a167aa62726f6b65724e616d65a862726f"
        "6b65722d61c41782a76f666673657473810128a76c6f676963616c81010c",
    ),
]


@pytest.mark.parametrize(("code", "value", "golden"), GOLDEN, ids=lambda v: type(v).__name__)
def test_the_wire_bytes_stay_put(code: int, value: Any, golden: str) -> None:
    assert wire(code, value).hex() == golden
    assert back(type(value), bytes.fromhex(golden)) == value


@pytest.mark.parametrize(
    ("cls", "header", "body", "message"),
    [
        (ResetOffset, {"group": "g", "timestamp": 1}, None, "'topic'"),
        (ResetOffset, {"topic": "T", "group": "a b", "timestamp": 1}, None, "may hold only"),
        (ResetOffset, {"topic": "T", "group": "g"}, None, "'timestamp' must be an integer"),
        (
            ResetOffset,
            {"topic": "T", "group": "g", "timestamp": -2},
            None,
            "timestamp must be epoch ms or -1 (the end), not -2",
        ),
        (
            ResetOffset,
            {"topic": "T", "group": "g", "timestamp": 1, "isForce": "yes"},
            None,
            "'isForce' must be a boolean",
        ),
        (
            ResetOffset,
            {"topic": "T", "group": "g", "timestamp": 1, "queueId": -2},
            None,
            "queueId must be >= 0, or -1 for every queue, not -2",
        ),
        (
            ResetOffset,
            {"topic": "T", "group": "g", "timestamp": 1, "offset": 5},
            None,
            "an offset needs a queueId",
        ),
        (
            ResetOffset,
            {"topic": "T", "group": "g", "timestamp": 1, "queueId": 0, "offset": -1},
            None,
            "offset must be >= 0, not -1",
        ),
        (
            ResetNotice,
            {"topic": "T", "group": "g", "brokerName": "b"},
            msgpack.packb({"offsets": {0: -1}}),
            "a map of queue id to offset >= 0",
        ),
        (ResetNotice, {"topic": "T", "group": "g", "brokerName": "b"}, b"\xc1", "malformed"),
        (
            ResetNotice,
            {"topic": "T", "group": "g", "brokerName": "b"},
            msgpack.packb({"offsets": {0: 5}, "logical": {1: 3}}),
            "logical offsets must map queue ids of its offsets",
        ),
        (
            ResetNotice,
            {"topic": "T", "group": "g", "brokerName": "b"},
            msgpack.packb({"offsets": {0: 5}, "logical": {0: -3}}),
            "logical offsets must map queue ids of its offsets to offsets >= 0",
        ),
        (
            ResetOffset,
            {"topic": "T", "group": "g", "timestamp": 1, "queueId": 0, "logicalOffset": 4},
            None,
            "a logicalOffset needs a queueId and an offset",
        ),
        (
            ResetOffset,
            {
                "topic": "T",
                "group": "g",
                "timestamp": -1,
                "queueId": 0,
                "offset": 0,
                "logicalOffset": -4,
            },
            None,
            "logicalOffset must be >= 0, not -4",
        ),
        (
            ResetOffset,
            {"topic": "T", "group": "g", "timestamp": -1, "notify": 0},
            None,
            "'notify' must be a boolean",
        ),
        (ResetNotice, {"topic": "T", "group": "g"}, msgpack.packb({"offsets": {}}), "brokerName"),
        (
            OffsetsReset,
            {},
            msgpack.packb({"queues": {0: {"offset": 1, "min": 0, "max": 2, "outcome": "?"}}}),
            "outcome must be one of reset, kept, min, max, not '?'",
        ),
        (
            OffsetsReset,
            {},
            msgpack.packb({"queues": {0: {"offset": "1", "min": 0, "max": 2, "outcome": "min"}}}),
            "offset, min and max must be integers",
        ),
    ],
)
def test_a_bad_field_raises_one_field_error_naming_it(
    cls: type[Any], header: dict[str, Scalar], body: bytes | None, message: str
) -> None:
    with pytest.raises(FieldError, match=re.escape(message)):
        cls.parse(header, body)


def test_a_reset_needs_update_or_admin_on_the_group_not_sub() -> None:
    member = User(
        "m",
        UserType.NORMAL,
        (make_rule("Topic:T", ["sub"], "allow"), make_rule("Group:g", ["sub"], "allow")),
    )
    operator = User("op", UserType.NORMAL, (make_rule("Group:g", ["update"], "allow"),))
    header, _ = ResetOffset(topic="T", group="g", timestamp=1).encode()
    req = request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, 1, header)
    checks = broker_checks(req, "DefaultCluster")
    refused = authorize(member, checks, "10.0.0.1", req.code)
    assert not refused.allowed and "Group:g" in refused.reason, refused
    assert authorize(operator, checks, "10.0.0.1", req.code).allowed
    other, _ = ResetOffset(topic="T", group="h", timestamp=1).encode()
    req_h = request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, 1, other)
    assert not authorize(operator, broker_checks(req_h, "DefaultCluster"), "10.0.0.1", 222).allowed


# The revive log's RESET record (protocol/pop.py): kind 7, the group and topic as
# length-prefixed names, then queue id (u16) and offset (i64), big-endian.
RESET_GOLDEN = "07016701540003000000000000002a"


def test_the_pop_reset_record_bytes_stay_put() -> None:
    record = Reset("g", "T", 3, 42)
    assert encode_revive_record(record).hex() == RESET_GOLDEN
    assert decode_revive_record(bytes.fromhex(RESET_GOLDEN)) == record


@settings(deadline=None)
@given(groups, names, st.integers(0, 2**16 - 1), naturals)
def test_the_pop_reset_record_round_trips(group: str, topic: str, queue: int, offset: int) -> None:
    record = Reset(group, topic, queue, offset)
    assert decode_revive_record(encode_revive_record(record)) == record


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (RESET_GOLDEN[:-2], "reset record has the wrong size"),
        (RESET_GOLDEN + "00", "reset record has the wrong size"),
        ("0701670154" + "0003" + "ffffffffffffffff", "reset to offset -1"),
        ("0701", "truncated"),
    ],
)
def test_a_bad_pop_reset_record_raises_one_error(body: str, message: str) -> None:
    with pytest.raises(ReviveRecordError, match=re.escape(message)):
        decode_revive_record(bytes.fromhex(body))
