"""The property digest and what a SQL92 expression needs of it (protocol/property_index.py):
one-sided, so a message an expression matches always passes its need, whatever the expression
and the properties; and the needs of the usual expressions decide."""

from __future__ import annotations

from hypothesis import given, settings

from protocol.property_index import digest_of, property_need
from protocol.sql92 import Node, compile_filter, to_sql
from tests.hypothesis_profiles import examples
from tests.protocol.test_sql92 import prop_maps, trees


@settings(max_examples=examples(600), deadline=None)
@given(trees, prop_maps)
def test_a_matching_message_always_passes_the_need(tree: Node, props: dict[str, str]) -> None:
    expr = compile_filter(to_sql(tree))
    need = property_need(expr)
    if expr.matches(props):
        assert need.may_match(*digest_of(props)), (to_sql(tree), props)


def _passes(expr: str, **props: str) -> bool:
    return property_need(compile_filter(expr)).may_match(*digest_of(props))


def test_equalities_decide_on_the_digest() -> None:
    assert _passes("region = 'eu' AND amount > 100", region="eu", amount="5")
    assert not _passes("region = 'eu' AND amount > 100", region="us", amount="500")
    assert not _passes("region = 'eu' AND amount > 100", region="eu")  # amount missing
    # Numbers compare as numbers: one spelling per value.
    for spelling in ("0", "0.0", "00", " 0", "-0", "0e5"):
        assert _passes("k = 0", k=spelling), spelling
    assert _passes("k = 1.5", k="15e-1")
    assert not _passes("k = 0", k="1")
    assert _passes("k IN ('a', 'b')", k="b")
    assert not _passes("k IN ('a', 'b')", k="c")
    assert not _passes("k IS NOT NULL", other="1")
    assert not _passes("NOT (k IS NULL)", other="1")
    assert not _passes("NOT (k = 1)", other="1")  # unknown, not false, without k
    assert not _passes("FALSE")
    # Ids and keys are digested by presence only: a condition on their value reads the record.
    assert _passes("UNIQ_KEY = 'abc'", UNIQ_KEY="abc")
    assert _passes("KEYS = 'a'", KEYS="b")
    assert not _passes("KEYS = 'a'", k="1")


def test_what_the_digest_cannot_tell_needs_nothing_more_than_presence() -> None:
    for expr in ("k < 50", "k <> 3", "k BETWEEN 1 AND 5", "k NOT IN ('a')", "k IS TRUE"):
        need = property_need(compile_filter(expr))
        assert need.decides, expr  # it still needs k present
        assert need.may_match(*digest_of({"k": "99"})), expr
    for expr in ("k IS NULL", "TRUE", "NOT (k IS NOT NULL)", "k = 1 OR k IS NULL"):
        assert not property_need(compile_filter(expr)).decides, expr
