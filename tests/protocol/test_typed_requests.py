"""Every typed request of the broker's request codes (protocol/pull.py and the family modules):
``parse(encode(x)) == x`` through a real frame, for any request hypothesis builds; and one fixed
request per code encodes to the same frame bytes as when its test was written, so the wire does
not move by accident (a deliberate change rewrites the golden bytes here, with the reason)."""

from __future__ import annotations

from typing import Any, ClassVar, Protocol, Self

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.pull import (
    AllConsumerOffsetsQuery,
    ConsumerOffsetQuery,
    ConsumerOffsetUpdate,
    MaxOffsetQuery,
    MinOffsetQuery,
    OffsetSearch,
    PullRequest,
)
from protocol.remoting import FrameDecoder, Header, Scalar, encode_frame, request


class Typed(Protocol):
    code: ClassVar[Any]

    def encode(self) -> tuple[Header, bytes | None]: ...

    @classmethod
    def parse(cls, header: dict[str, Scalar], body: bytes | None = None) -> Self: ...


names = st.text(min_size=1, max_size=20)
ints = st.integers(-(2**63), 2**63 - 1)
naturals = st.integers(0, 2**63 - 1)
tag_expressions = st.sampled_from(["*", "TagA", "TagA || TagB", " TagC "])

STRATEGIES: dict[type[Any], st.SearchStrategy[Any]] = {
    PullRequest: st.builds(
        PullRequest,
        group=names,
        topic=names,
        queue_id=ints,
        offset=ints,
        max_count=ints,
        max_bytes=st.one_of(st.none(), ints),
        suspend_ms=ints,
        subscription=tag_expressions,
    ),
    ConsumerOffsetQuery: st.builds(ConsumerOffsetQuery, group=names, topic=names, queue_id=ints),
    ConsumerOffsetUpdate: st.builds(
        ConsumerOffsetUpdate, group=names, topic=names, queue_id=ints, offset=naturals
    ),
    MinOffsetQuery: st.builds(MinOffsetQuery, topic=names, queue_id=ints),
    MaxOffsetQuery: st.builds(MaxOffsetQuery, topic=names, queue_id=ints, committed=st.booleans()),
    OffsetSearch: st.builds(OffsetSearch, topic=names, queue_id=ints, timestamp=ints),
    AllConsumerOffsetsQuery: st.builds(AllConsumerOffsetsQuery, with_times=st.booleans()),
}

GOLDEN: list[tuple[Any, str]] = [
    (
        PullRequest(
            group="g",
            topic="T",
            queue_id=2,
            offset=40,
            max_count=16,
            max_bytes=1024,
            suspend_ms=500,
            subscription="TagA || TagB",
        ),
        "0000007f96000b010088ad636f6e73756d657247726f7570a167a5746f706963a154a7717565756549640"
        "2ab71756575654f666673657428aa6d61784d73674e756d7310a86d61784279746573cd0400b47375737065"
        "6e6454696d656f75744d696c6c6973cd01f4ac737562736372697074696f6eac54616741207c7c2054616742"
        "c0",
    ),
    (
        ConsumerOffsetQuery(group="g", topic="T", queue_id=1),
        "0000002896000e010083ad636f6e73756d657247726f7570a167a5746f706963a154a77175657565496401c0",
    ),
    (
        ConsumerOffsetUpdate(group="g", topic="T", queue_id=1, offset=9),
        "0000003696000f010084ad636f6e73756d657247726f7570a167a5746f706963a154a77175657565496401ac"
        "636f6d6d69744f666673657409c0",
    ),
    (
        MinOffsetQuery(topic="T", queue_id=3),
        "0000001896001f010082a5746f706963a154a77175657565496403c0",
    ),
    (
        MaxOffsetQuery(topic="T", queue_id=3, committed=True),
        "0000002396001e010083a5746f706963a154a77175657565496403a9636f6d6d6974746564c3c0",
    ),
    (
        OffsetSearch(topic="T", queue_id=0, timestamp=1_700_000_000_000),
        "0000002b96001d010083a5746f706963a154a77175657565496400a974696d657374616d70cf0000018bcfe5"
        "6800c0",
    ),
    (AllConsumerOffsetsQuery(with_times=True), "0000001296002b010081a97769746854696d6573c3c0"),
]


def wire(typed: Typed) -> bytes:
    header, body = typed.encode()
    return encode_frame(request(typed.code, 1, header, body))


@pytest.mark.parametrize("cls", list(STRATEGIES), ids=lambda cls: cls.__name__)
def test_every_request_round_trips_through_a_frame(cls: type[Any]) -> None:
    @given(STRATEGIES[cls])
    def round_trip(typed: Any) -> None:
        (frame,) = FrameDecoder().feed(wire(typed))
        assert frame.code == cls.code
        assert cls.parse(frame.header, frame.body) == typed

    round_trip()


@pytest.mark.parametrize(
    ("typed", "golden"), GOLDEN, ids=[type(typed).__name__ for typed, _ in GOLDEN]
)
def test_the_wire_bytes_of_each_request_stay_put(typed: Any, golden: str) -> None:
    assert wire(typed).hex() == golden


def test_every_typed_request_has_a_golden_frame() -> None:
    assert {type(typed) for typed, _ in GOLDEN} == set(STRATEGIES)
    assert len({cls.code for cls in STRATEGIES}) == len(STRATEGIES)
