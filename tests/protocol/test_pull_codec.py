"""The pull and offset-query codec: answers round trip through real frames (the requests do in
test_typed_requests, with every other code), and an answer missing a field its code requires
raises AnswerError and nothing else."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.codes import RequestCode, ResponseCode
from protocol.fields import FieldError
from protocol.pull import (
    AnswerError,
    ConsumerOffsetUpdate,
    MaxOffsetQuery,
    PullAnswer,
    PullCorrupt,
    PullFound,
    PullNotFound,
    PullOffsetMoved,
    PullRefused,
    PullRequest,
    PullRetry,
    decode_offset,
    decode_pull_answer,
    encode_pull_answer,
    offset_answer,
)
from protocol.remoting import Frame, FrameDecoder, encode_frame, request, response

ints = st.integers(-(2**63), 2**63 - 1)
remarks = st.text(max_size=40)

answers = st.one_of(
    st.builds(PullFound, next_offset=ints, count=ints, body=st.binary(max_size=100)),
    st.builds(PullNotFound, next_offset=st.one_of(st.none(), ints)),
    st.just(PullRetry()),
    st.builds(PullOffsetMoved, next_offset=ints, remark=remarks),
    st.builds(PullCorrupt, physical_offset=st.one_of(st.none(), ints), remark=remarks),
    st.builds(
        PullRefused,
        code=st.sampled_from(
            [ResponseCode.TOPIC_NOT_EXIST, ResponseCode.QUEUE_NOT_EXIST, ResponseCode.NOT_MASTER]
        ).map(int),
        remark=remarks,
    ),
)


def over_the_wire(frame: Frame) -> Frame:
    decoder = FrameDecoder()
    (got,) = decoder.feed(encode_frame(frame))
    return got


@given(answers)
def test_pull_answers_round_trip(answer: PullAnswer) -> None:
    code, header, body = encode_pull_answer(answer)
    frame = over_the_wire(response(request(RequestCode.PULL_MESSAGE, 3), code, header, body))
    assert decode_pull_answer(frame) == answer


@given(ints)
def test_offset_answers_round_trip(offset: int) -> None:
    for code in (RequestCode.GET_MIN_OFFSET, RequestCode.GET_MAX_OFFSET):
        frame = over_the_wire(
            response(request(code, 1), ResponseCode.SUCCESS, offset_answer(offset))
        )
        assert decode_offset(frame) == offset


def test_headers_are_the_documented_fields() -> None:
    pull = PullRequest(group="g", topic="T", queue_id=2, offset=40, max_count=16, max_bytes=1024)
    assert pull.header() == {
        "consumerGroup": "g",
        "topic": "T",
        "queueId": 2,
        "queueOffset": 40,
        "maxMsgNums": 16,
        "maxBytes": 1024,
        "suspendTimeoutMillis": 0,
    }
    assert "maxBytes" not in PullRequest(group="g", topic="T", queue_id=0, offset=0).header()
    assert MaxOffsetQuery(topic="T", queue_id=1, committed=True).header() == {
        "topic": "T",
        "queueId": 1,
        "committed": True,
    }
    assert MaxOffsetQuery(topic="T", queue_id=1).header() == {"topic": "T", "queueId": 1}
    assert ConsumerOffsetUpdate(group="g", topic="T", queue_id=1, offset=9).header() == {
        "consumerGroup": "g",
        "topic": "T",
        "queueId": 1,
        "commitOffset": 9,
    }
    # What the broker fills in when a client leaves a field out.
    bare = PullRequest.parse({"consumerGroup": "g", "topic": "T", "queueId": 0, "queueOffset": 5})
    assert (bare.max_count, bare.max_bytes, bare.suspend_ms) == (32, None, 0)


@pytest.mark.parametrize(
    ("header", "field"),
    [
        ({"topic": "T", "queueId": 0, "queueOffset": 0}, "consumerGroup"),
        ({"consumerGroup": "g", "topic": "T", "queueId": "0", "queueOffset": 0}, "queueId"),
        ({"consumerGroup": "g", "topic": "T", "queueId": 0, "queueOffset": 1.5}, "queueOffset"),
        (
            {"consumerGroup": "g", "topic": "T", "queueId": 0, "queueOffset": 0, "maxBytes": "x"},
            "maxBytes",
        ),
    ],
)
def test_bad_pull_requests_raise_field_error(header: dict[str, Any], field: str) -> None:
    with pytest.raises(FieldError, match=repr(field)):
        PullRequest.parse(header)
    with pytest.raises(FieldError, match="'committed' must be a boolean"):
        MaxOffsetQuery.parse({"topic": "T", "queueId": 0, "committed": 1})


def answer(code: int, header: dict[str, Any], body: bytes | None = None) -> Frame:
    return response(request(RequestCode.PULL_MESSAGE, 1), code, header, body)


@pytest.mark.parametrize(
    ("code", "header", "field"),
    [
        (ResponseCode.SUCCESS, {"count": 1}, "nextBeginOffset"),
        (ResponseCode.SUCCESS, {"nextBeginOffset": 3}, "count"),
        (ResponseCode.SUCCESS, {"nextBeginOffset": "3", "count": 1}, "nextBeginOffset"),
        (ResponseCode.PULL_OFFSET_MOVED, {"remark": "gone"}, "nextBeginOffset"),
        (ResponseCode.PULL_OFFSET_MOVED, {"nextBeginOffset": True}, "nextBeginOffset"),
    ],
)
def test_answers_missing_a_required_field_raise_answer_error(
    code: int, header: dict[str, Any], field: str
) -> None:
    with pytest.raises(AnswerError, match=f"response header {field!r} missing or not an integer"):
        decode_pull_answer(answer(code, header, b"x"))


def test_optional_answer_fields_and_the_corrupt_reason() -> None:
    assert decode_pull_answer(answer(ResponseCode.SUCCESS, {"nextBeginOffset": 4, "count": 0})) == (
        PullFound(next_offset=4, count=0, body=b"")
    )
    assert decode_pull_answer(answer(ResponseCode.PULL_NOT_FOUND, {})) == PullNotFound()
    bad_next = answer(ResponseCode.PULL_NOT_FOUND, {"nextBeginOffset": "7"})
    assert decode_pull_answer(bad_next) == PullNotFound(next_offset=None)
    corrupt = decode_pull_answer(answer(ResponseCode.MESSAGE_CORRUPT, {"physicalOffset": "x"}))
    assert corrupt == PullCorrupt(physical_offset=None, remark="")
    assert isinstance(corrupt, PullCorrupt)
    assert corrupt.reason("T", 2, 10) == "queue T:2, offset 10 cannot be read"
    said = PullCorrupt(physical_offset=99, remark="queue T:2, offset 10 cannot be read (crc)")
    assert said.reason("T", 2, 10) == said.remark
    refused = decode_pull_answer(answer(ResponseCode.NOT_MASTER, {"remark": 5}))
    assert refused == PullRefused(code=ResponseCode.NOT_MASTER, remark="")
    with pytest.raises(AnswerError, match="'offset' missing"):
        decode_offset(response(request(RequestCode.GET_MIN_OFFSET, 1), 0, {"offset": None}))
