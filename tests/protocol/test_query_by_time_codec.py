"""QUERY_MESSAGE_BY_TIME (5160) and its answer: fixed values encode to the frame bytes written
when this test was (code 5160 = cd 1428, the header a msgpack map in field order; a deliberate
change rewrites them here, with the reason), any value round trips through a real frame, and a
bad field raises one FieldError naming it."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.broker_requests.query import (
    END_OF_TIME,
    MAX_NUM,
    MessagesInRange,
    QueryMessageByTime,
)
from protocol.codes import RequestCode
from protocol.fields import FieldError
from protocol.remoting import FrameDecoder, encode_frame, request

naturals = st.integers(0, 2**62)
names = st.text(alphabet="abcXYZ019_-%", min_size=1, max_size=12)

requests = st.tuples(naturals, naturals).flatmap(
    lambda span: st.builds(
        QueryMessageByTime,
        topic=names,
        queue_id=st.integers(0, 1023),
        begin_ms=st.just(min(span)),
        end_ms=st.one_of(st.just(max(span)), st.just(END_OF_TIME)),
        max_num=st.integers(1, MAX_NUM),
        from_offset=st.one_of(st.none(), naturals),
    )
)
answers = st.builds(
    MessagesInRange,
    count=st.integers(0, MAX_NUM),
    next_offset=naturals,
    end_offset=naturals,
    body=st.binary(max_size=64),
)

GOLDEN: list[tuple[Any, str]] = [
    (
        QueryMessageByTime(
            topic="T",
            queue_id=3,
            begin_ms=1_700_000_000_000,
            end_ms=1_700_000_060_000,
            max_num=64,
            from_offset=12,
        ),
        "0000005c9600cd1428010086a5746f706963a154a77175657565496403a66d61784e756d40ae626567696e"
        "54696d657374616d70cf0000018bcfe56800ac656e6454696d657374616d70cf0000018bcfe65260aa6672"
        "6f6d4f66667365740cc0",
    ),
    # The defaults stay off the wire: no beginTimestamp, endTimestamp nor fromOffset.
    (
        QueryMessageByTime(topic="T", queue_id=0),
        "000000229600cd1428010083a5746f706963a154a77175657565496400a66d61784e756d40c0",
    ),
]


def frame_of(header: Any, body: bytes | None, code: int = 1) -> bytes:
    return encode_frame(request(code, 1, header, body))


def test_the_code_is_ours_and_free() -> None:
    assert RequestCode.QUERY_MESSAGE_BY_TIME == 5160
    assert [c for c in RequestCode if c.value == 5160] == [RequestCode.QUERY_MESSAGE_BY_TIME]


@pytest.mark.parametrize(("typed", "golden"), GOLDEN)
def test_the_request_bytes_stay_put(typed: QueryMessageByTime, golden: str) -> None:
    assert frame_of(*typed.encode(), code=typed.code).hex() == golden
    (frame,) = FrameDecoder().feed(bytes.fromhex(golden))
    assert frame.code == RequestCode.QUERY_MESSAGE_BY_TIME
    assert QueryMessageByTime.parse(frame.header, frame.body) == typed


def test_the_answer_bytes_stay_put() -> None:
    answer = MessagesInRange(count=1, next_offset=13, end_offset=20, body=b"rec")
    golden = (
        "00000029960001010083a5636f756e7401aa6e6578744f66667365740da9656e644f666673657414c403726563"
    )
    assert frame_of(*answer.encode()).hex() == golden
    (frame,) = FrameDecoder().feed(bytes.fromhex(golden))
    assert MessagesInRange.parse(frame.header, frame.body) == answer
    assert not answer.done and MessagesInRange(count=0, next_offset=20, end_offset=20).done


@given(requests)
def test_every_request_round_trips(typed: QueryMessageByTime) -> None:
    (frame,) = FrameDecoder().feed(frame_of(*typed.encode(), code=typed.code))
    assert QueryMessageByTime.parse(frame.header, frame.body) == typed


@given(answers)
def test_every_answer_round_trips(answer: MessagesInRange) -> None:
    (frame,) = FrameDecoder().feed(frame_of(*answer.encode()))
    assert MessagesInRange.parse(frame.header, frame.body) == answer


@pytest.mark.parametrize(
    ("cls", "header", "message"),
    [
        (QueryMessageByTime, {"queueId": 0}, "'topic'"),
        (QueryMessageByTime, {"topic": "T"}, "'queueId'"),
        (QueryMessageByTime, {"topic": "T", "queueId": -1}, "queueId must be >= 0"),
        (
            QueryMessageByTime,
            {"topic": "T", "queueId": 0, "beginTimestamp": 9, "endTimestamp": 8},
            "beginTimestamp 9 is after endTimestamp 8",
        ),
        (QueryMessageByTime, {"topic": "T", "queueId": 0, "maxNum": 1025}, "maxNum must be"),
        (QueryMessageByTime, {"topic": "T", "queueId": 0, "fromOffset": -2}, "fromOffset"),
        (QueryMessageByTime, {"topic": "T", "queueId": "0"}, "'queueId' must be an integer"),
        (MessagesInRange, {"count": 1, "nextOffset": 2}, "'endOffset'"),
        (
            MessagesInRange,
            {"count": -1, "nextOffset": 2, "endOffset": 3},
            "count, nextOffset and endOffset must be >= 0",
        ),
    ],
)
def test_a_bad_field_raises_one_field_error(
    cls: type[Any], header: dict[str, Any], message: str
) -> None:
    with pytest.raises(FieldError, match=re.escape(message)):
        cls.parse(header, None)
