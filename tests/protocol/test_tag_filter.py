"""Tag expressions: ``*``, one tag, alternatives; bad expressions refused."""

from __future__ import annotations

import pytest

from protocol.filter import FilterError, parse_tag_expression
from protocol.message import tag_hash


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
