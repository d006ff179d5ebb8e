"""Tag expressions: ``*``, one tag, alternatives; bad expressions refused."""

from __future__ import annotations

import pytest

from protocol.filter import FilterError, filter_records, parse_tag_expression
from protocol.message import Message, RecordEncoder, iter_records, tag_hash


def test_expressions() -> None:
    assert parse_tag_expression("*") is None
    assert parse_tag_expression("") is None
    assert parse_tag_expression(" TagA || * ") is None
    f = parse_tag_expression("TagA || TagB")
    assert f is not None
    assert f.matches("TagA") and f.matches("TagB")
    assert not f.matches("TagC") and not f.matches("") and not f.matches("TagA || TagB")
    assert f.may_match(tag_hash("TagB")) and not f.may_match(tag_hash("TagC"))


@pytest.mark.parametrize("bad", ["TagA ||", "|| TagA", "TagA |||| TagB", "x" * 1025])
def test_bad_expressions_are_refused(bad: str) -> None:
    with pytest.raises(FilterError):
        parse_tag_expression(bad)


def test_filter_records_keeps_the_matching_ones_in_order() -> None:
    enc = RecordEncoder("127.0.0.1:10911")
    tags = ["A", "B", "C", "", "A"]
    body = b"".join(
        enc.encode(
            Message(topic="T", body=f"m{i}".encode(), tags=t),
            queue_id=0,
            queue_offset=i,
            physical_offset=i * 1000,
            store_timestamp=0,
        )
        for i, t in enumerate(tags)
    )
    f = parse_tag_expression("A || C")
    assert f is not None
    kept, count = filter_records(body, f)
    assert count == 3
    assert [r.body for r in iter_records(kept)] == [b"m0", b"m2", b"m4"]
