"""The codecs of deleteTopic, deleteSubGroup, topicStatus and topicList (protocol/topic_admin.py
and the controllers' forms in protocol/controller_requests/topics.py): golden bytes, round trips
through a frame, bad fields raise FieldError, and the refusal rules for system names."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.controller_requests.topics import (
    BrokerOutcome,
    DeleteReport,
    TopicEntry,
    TopicList,
)
from protocol.fields import FieldError
from protocol.remoting import FrameDecoder, encode_frame, request
from protocol.topic_admin import (
    DeleteGroupInBroker,
    DeleteTopicInBroker,
    QueueStatus,
    TopicRetired,
    TopicStats,
    TopicStatsQuery,
    group_delete_refusal,
    topic_delete_refusal,
)

offsets = st.integers(0, 2**63 - 1)
queue_ids = st.integers(0, 1023)
topics = st.text(alphabet="abcXYZ019-_%", min_size=1, max_size=30)
groups = st.text(alphabet="abcXYZ019-_|.", min_size=1, max_size=30)

requests = st.one_of(
    st.builds(
        DeleteTopicInBroker,
        topic=topics,
        force=st.booleans(),
        retire_at=st.dictionaries(queue_ids, offsets, max_size=4),
        dry_run=st.booleans(),
    ),
    st.builds(DeleteGroupInBroker, group=groups, remove_dlq=st.booleans()),
    st.builds(TopicStatsQuery, topic=topics),
)
answers = st.one_of(
    st.builds(TopicRetired, retired=st.dictionaries(queue_ids, offsets, max_size=4)),
    st.builds(
        TopicStats,
        queues=st.lists(st.builds(QueueStatus, queue_ids, offsets, offsets, offsets)).map(tuple),
    ),
)


def _through_the_wire(code: int, header: Any, body: bytes | None) -> Any:
    frames = FrameDecoder().feed(encode_frame(request(code, 7, header, body)))
    assert len(frames) == 1
    return frames[0]


@given(requests)
def test_every_request_round_trips_through_a_frame(req: Any) -> None:
    frame = _through_the_wire(req.code, *req.encode())
    assert frame.code == req.code
    assert type(req).parse(frame.header, frame.body) == req


@given(answers)
def test_every_answer_round_trips_through_a_frame(answer: Any) -> None:
    frame = _through_the_wire(0, *answer.encode())
    assert type(answer).parse(frame.header, frame.body) == answer


@pytest.mark.parametrize(
    ("req", "wire"),
    [
        (
            DeleteTopicInBroker(topic="T1", force=True, retire_at={0: 5, 1: 7}),
            "0000002a9600ccd7070082a5746f706963a25431a5666f726365c3c41181a872657469726541748"
            "2a13005a13107",
        ),
        (
            DeleteGroupInBroker(group="g1", remove_dlq=True),
            "000000209600cccf070082a967726f75704e616d65a26731a972656d6f7665446c71c3c0",
        ),
        (TopicStatsQuery(topic="T1"), "000000119600ccca070081a5746f706963a25431c0"),
        (
            DeleteTopicInBroker(topic="T1", dry_run=True),
            "000000199600ccd7070082a5746f706963a25431a664727952756ec3c0",
        ),
    ],
)
def test_a_fixed_request_encodes_to_the_same_bytes(req: Any, wire: str) -> None:
    assert encode_frame(request(req.code, 7, *req.encode())).hex() == wire
    frame = _through_the_wire(req.code, *req.encode())
    assert type(req).parse(frame.header, frame.body) == req


@pytest.mark.parametrize(
    ("answer", "body"),
    [
        (
            DeleteReport(name="T1", brokers=(BrokerOutcome("g1", "127.0.0.1:10911", 0, ""),)),
            "82a46e616d65a25431a762726f6b6572739194a26731af3132372e302e302e313a313039313100a0",
        ),
        (
            TopicList(topics=(TopicEntry("T1", "c1", {"g1": 4}),)),
            "81a6746f706963739193a25431a2633181a2673104",
        ),
        (TopicRetired(retired={0: 5}), "81a77265746972656481a13005"),
        (
            TopicStats(queues=(QueueStatus(0, 1, 5, 1700000000000),)),
            "81a67175657565739194000105cf0000018bcfe56800",
        ),
    ],
)
def test_a_fixed_answer_encodes_to_the_same_bytes(answer: Any, body: str) -> None:
    header, encoded = answer.encode()
    assert header == {} and encoded is not None and encoded.hex() == body
    assert type(answer).parse({}, encoded) == answer


@pytest.mark.parametrize(
    ("parse", "header", "body", "message"),
    [
        (DeleteTopicInBroker.parse, {}, None, "topic"),
        (DeleteTopicInBroker.parse, {"topic": "T", "force": "yes"}, None, "force"),
        (DeleteTopicInBroker.parse, {"topic": "T"}, b"\xc1", "malformed"),
        (
            DeleteTopicInBroker.parse,
            {"topic": "T"},
            msgpack.packb({"retireAt": {"x": 1}}),
            "not an integer",
        ),
        (
            DeleteTopicInBroker.parse,
            {"topic": "T"},
            msgpack.packb({"retireAt": {"0": -1}}),
            "non-negative",
        ),
        (DeleteGroupInBroker.parse, {"groupName": "a b"}, None, "consumer group"),
        (TopicStats.parse, {}, msgpack.packb({"queues": [[0, 1, 2]]}), "queue status"),
        (TopicStats.parse, {}, msgpack.packb({"queues": 3}), "list"),
        (TopicRetired.parse, {}, msgpack.packb({"retired": []}), "map queue ids"),
        (DeleteReport.parse, {}, msgpack.packb({"name": "T", "brokers": [[1]]}), "outcome"),
        (TopicList.parse, {}, msgpack.packb({"topics": [["T", "c", {"g": "x"}]]}), "queues"),
    ],
)
def test_bad_fields_raise_field_error(parse: Any, header: Any, body: Any, message: str) -> None:
    with pytest.raises(FieldError, match=message):
        parse(header, body)


def test_system_topics_and_groups_are_refused_and_ordinary_ones_are_not() -> None:
    for topic in ("rmq_sys_wheel_timer", "RMQ_SYS_TRACE_TOPIC", "TBW102", "SCHEDULE_TOPIC_XXXX"):
        assert "system topic" in (topic_delete_refusal(topic) or "")
    for topic in ("%RETRY%g", "%DLQ%g"):
        assert "deleteSubGroup" in (topic_delete_refusal(topic) or "")
    assert topic_delete_refusal("orders") is None
    assert topic_delete_refusal("rmq_sysx") is None
    for group in ("CID_RMQ_SYS_TRANS", "rmq_sys_x", "TOOLS_CONSUMER"):
        assert "system group" in (group_delete_refusal(group) or "")
    assert "consumer group" in (group_delete_refusal("a b") or "")
    assert group_delete_refusal("billing") is None
