"""protocol/sql92.py: RocketMQ's SQL92 property filters (parser, printer, three-valued evaluator).

The property tests compare the compiled evaluator with a reference written differently (a
recursive walk over the tree with Kleene logic as min/max over F < U < T, numbers read with
``decimal``), over random expressions and random property maps, and print/parse round trips.
The golden cases are RocketMQ's documented examples and facts of its SQL92 tests.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.sql92 import (
    And,
    Between,
    BoolLit,
    Compare,
    In,
    IsBool,
    IsNull,
    Node,
    Not,
    NumLit,
    Operand,
    Or,
    Prop,
    SqlError,
    StrLit,
    compile_filter,
    parse_sql,
    to_sql,
)
from tests.hypothesis_profiles import examples

# ------------------------------------------------------------------------ golden cases


def matches(expr: str, **props: str) -> bool:
    return compile_filter(expr).matches(props)


def test_rocketmq_documented_example_between() -> None:
    # RocketMQ's filter example: messages with property a = 0..9, subscription "a between 0 and 3"
    got = [i for i in range(10) if matches("a between 0 and 3", a=str(i))]
    assert got == [0, 1, 2, 3]


def test_rocketmq_documented_example_tags_and_property() -> None:
    expr = (
        "(TAGS is not null and TAGS in ('TagA', 'TagB')) and (a is not null and a between 0 and 3)"
    )
    assert matches(expr, TAGS="TagA", a="2")
    assert not matches(expr, TAGS="TagC", a="2")
    assert not matches(expr, TAGS="TagB", a="4")
    assert not matches(expr, a="1")  # no TAGS: null, the IN is unknown


def test_issue_example() -> None:
    expr = "region = 'eu' AND amount > 100"
    assert matches(expr, region="eu", amount="101")
    assert matches(expr, region="eu", amount="100.5")
    assert not matches(expr, region="eu", amount="100")
    assert not matches(expr, region="us", amount="500")
    assert not matches(expr, region="eu")


@pytest.mark.parametrize(
    ("expr", "props", "expected"),
    [
        # comparisons with null are unknown, never true, in both directions
        ("a > 1", {}, None),
        ("a <> 1", {}, None),
        ("a = 'x'", {}, None),
        ("a <> 'x'", {}, None),
        ("NOT (a = 'x')", {}, None),
        # AND / OR with unknown (Kleene)
        ("a = 'x' AND FALSE", {}, False),
        ("a = 'x' OR TRUE", {}, True),
        ("a = 'x' AND TRUE", {}, None),
        ("a = 'x' OR FALSE", {}, None),
        # IS NULL is never unknown
        ("a IS NULL", {}, True),
        ("a IS NOT NULL", {}, False),
        ("a IS NULL", {"a": ""}, False),
        ("NOT (a IS NULL)", {"a": "1"}, True),
        # numbers: string properties read as numbers
        ("a > 10", {"a": "11"}, True),
        ("a > 10", {"a": "9"}, False),
        ("a >= 10", {"a": "10.0"}, True),
        ("a = 10", {"a": "10.0"}, True),
        ("a <> 10", {"a": "10"}, False),
        ("a < -1.5", {"a": "-2"}, True),
        ("a <= 1e3", {"a": "1000"}, True),
        ("a > 10", {"a": "abc"}, None),  # not a number: RocketMQ's conversion fails
        ("a <> 10", {"a": "abc"}, None),
        ("10 < a", {"a": "11"}, True),
        ("a > 1", {"a": "1_0"}, None),  # read as Java reads a number: no '_', no
        ("a > 1", {"a": "\u0661\u0660"}, None),  # non-ASCII digits, no NaN or Infinity
        ("a > 1", {"a": "Infinity"}, None),
        ("a < 1", {"a": "NaN"}, None),
        ("a > 1", {"a": " 2e1 "}, True),
        ("a > b", {"a": "2", "b": "1"}, True),  # both strings, both numbers
        # strings compare by = and <> only
        ("a = 'abc'", {"a": "abc"}, True),
        ("a = 'abc'", {"a": "ABC"}, False),
        ("a <> 'abc'", {"a": "abd"}, True),
        ("'abc' = a", {"a": "abc"}, True),
        ("a = 'it''s'", {"a": "it's"}, True),
        ("a = '10'", {"a": "10.0"}, False),  # string equality, not numeric
        ("a > 'b'", {"a": "c"}, None),
        # BETWEEN is inclusive; NOT BETWEEN; unknown with null or non-numbers
        ("a BETWEEN 1 AND 3", {"a": "1"}, True),
        ("a BETWEEN 1 AND 3", {"a": "3"}, True),
        ("a BETWEEN 1 AND 3", {"a": "4"}, False),
        ("a NOT BETWEEN 1 AND 3", {"a": "4"}, True),
        ("a NOT BETWEEN 1 AND 3", {"a": "2"}, False),
        ("a NOT BETWEEN 1 AND 3", {}, None),
        ("a BETWEEN 3 AND 1", {"a": "2"}, False),
        # IN / NOT IN over strings
        ("a IN ('x', 'y')", {"a": "y"}, True),
        ("a IN ('x', 'y')", {"a": "z"}, False),
        ("a NOT IN ('x', 'y')", {"a": "z"}, True),
        ("a NOT IN ('x', 'y')", {"a": "x"}, False),
        ("a NOT IN ('x', 'y')", {}, None),
        # booleans
        ("a IS TRUE", {"a": "true"}, True),
        ("a IS TRUE", {"a": "TRUE"}, True),
        ("a IS TRUE", {"a": "false"}, False),
        ("a IS TRUE", {}, False),
        ("a IS FALSE", {"a": "false"}, True),
        ("a IS FALSE", {"a": "yes"}, False),
        ("a = TRUE", {"a": "true"}, True),
        ("a <> TRUE", {"a": "false"}, True),
        ("a = TRUE", {"a": "1"}, None),
        ("TRUE", {}, True),
        ("NOT FALSE", {}, True),
        # keywords in any case; precedence NOT > AND > OR
        ("a = 'x' or b = 'y' and c = 'z'", {"a": "x"}, True),
        ("(a = 'x' or b = 'y') and c = 'z'", {"a": "x"}, None),
        ("not a = 'x' and b = 'y'", {"a": "w", "b": "y"}, True),
        # property names as RocketMQ's: letters, digits, _, $, .
        ("order.amount_$1 > 5", {"order.amount_$1": "6"}, True),
    ],
)
def test_table(expr: str, props: dict[str, str], expected: bool | None) -> None:
    assert compile_filter(expr).evaluate(props) is expected
    assert compile_filter(expr).matches(props) is (expected is True)


@pytest.mark.parametrize(
    ("expr", "position", "reason"),
    [
        ("", 0, "empty"),
        ("a >", 3, "expected a property, number or 'string' after '>'"),
        ("a > 1 AND", 9, "expected a property"),
        # The sentence says where: once it read "... 'string' a condition, found ...".
        ("NOT", 3, "expected a property, number or 'string' to start a condition, found the end"),
        (
            "a = 1 OR OR",
            9,
            "expected a property, number or 'string' to start a condition, found 'OR'",
        ),
        ("a = 'abc", 4, "string literal is not closed"),
        ("a != 1", 2, "'!=' is not SQL92"),
        ("a", 0, "property 'a' alone is not a condition"),
        ("a BETWEEN 1", 11, "expected AND between the bounds of BETWEEN"),
        ("a IN ()", 6, "expected a 'string' in the IN list"),
        ("a IN (1, 2)", 6, "expected a 'string' in the IN list"),
        ("a IS 5", 5, "expected NULL, NOT NULL, TRUE or FALSE after IS"),
        ("(a = 1", 6, "expected ')' to close the parenthesis"),
        ("a = 1)", 5, "expected AND, OR or the end"),
        ("a = NULL", 4, "NULL is compared with IS NULL"),
        ("a = 1 # 2", 6, "unexpected character '#'"),
        ("a NOT LIKE 'x'", 6, "expected BETWEEN or IN after NOT"),
        ("a > 1e999", 4, "out of range"),
    ],
)
def test_parse_errors_name_the_position_and_reason(expr: str, position: int, reason: str) -> None:
    with pytest.raises(SqlError) as info:
        compile_filter(expr)
    assert info.value.position == position, str(info.value)
    assert reason in info.value.reason
    assert f"at position {position}" in str(info.value)


@pytest.mark.parametrize(
    ("expr", "reason"),
    [
        ("NOT " * 65 + "TRUE", "parentheses and NOT nest deeper than 64"),
        ("NOT " * 1000 + "TRUE", "parentheses and NOT nest deeper than 64"),
        ("(" * 65 + "TRUE" + ")" * 65, "parentheses and NOT nest deeper than 64"),
        (" AND ".join(["TRUE"] * 300), "nests deeper than 256"),
        (" OR ".join(["a = 1"] * 300), "nests deeper than 256"),
    ],
)
def test_too_deep_is_refused_with_one_error(expr: str, reason: str) -> None:
    # Before the limits: RecursionError out of the parser (NOT x 1000) or the evaluator.
    with pytest.raises(SqlError, match=reason):
        compile_filter(expr)


def test_nesting_up_to_the_limits_parses_and_evaluates() -> None:
    assert compile_filter("NOT " * 64 + "TRUE").matches({})
    assert compile_filter("(" * 64 + "TRUE" + ")" * 64).matches({})
    assert compile_filter(" AND ".join(["a = 1"] * 256)).matches({"a": "1"})


def test_too_long_is_refused() -> None:
    with pytest.raises(SqlError, match="longer than"):
        parse_sql("a = 'x' OR " * 1000 + "TRUE")


def test_compiled_once_per_expression() -> None:
    text = "cache_probe = 'x' AND n > 3"
    assert compile_filter(text) is compile_filter(text)


# ----------------------------------------------------------- reference evaluator (tests only)

F, U, T = 0, 1, 2  # Kleene truth values: AND is min, OR is max, NOT is 2 - v


def _ref_value(op: Operand, props: dict[str, str]) -> object:
    if isinstance(op, Prop):
        return props.get(op.name)
    return op.value


def _ref_num(v: object) -> Decimal | None:
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, int | float):
        return Decimal(repr(v)) if isinstance(v, float) else Decimal(v)
    assert isinstance(v, str)
    text = v.strip(" \t\n\r")
    if not text.isascii() or "_" in text:
        return None
    try:
        d = Decimal(text)
    except InvalidOperation:
        return None
    return None if not d.is_finite() else d


def _ref_bool(v: object) -> bool | None:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lower() in ("true", "false"):
        return v.lower() == "true"
    return None


def _tv(b: bool | None) -> int:
    return U if b is None else (T if b else F)


def ref_eval(node: Node, props: dict[str, str]) -> int:
    if isinstance(node, BoolLit):
        return _tv(node.value)
    if isinstance(node, And):
        return min(ref_eval(node.left, props), ref_eval(node.right, props))
    if isinstance(node, Or):
        return max(ref_eval(node.left, props), ref_eval(node.right, props))
    if isinstance(node, Not):
        return 2 - ref_eval(node.inner, props)
    if isinstance(node, IsNull):
        return _tv((_ref_value(node.value, props) is None) != node.negated)
    if isinstance(node, IsBool):
        return _tv(_ref_bool(_ref_value(node.value, props)) == node.truth)
    if isinstance(node, In):
        v = _ref_value(node.value, props)
        if not isinstance(v, str) or isinstance(v, bool):
            return U
        return _tv((v in node.items) != node.negated)
    if isinstance(node, Between):
        nums = [_ref_num(_ref_value(o, props)) for o in (node.value, node.low, node.high)]
        if any(n is None for n in nums):
            return U
        v, lo, hi = nums
        assert v is not None and lo is not None and hi is not None
        return _tv((lo <= v and v <= hi) != node.negated)
    assert isinstance(node, Compare)
    a, b = _ref_value(node.left, props), _ref_value(node.right, props)
    kinds = {type(node.left), type(node.right)}
    if node.op in ("=", "<>") and BoolLit in kinds:
        x, y = _ref_bool(a), _ref_bool(b)
        if x is None or y is None:
            return U
        return _tv((x == y) == (node.op == "="))
    if node.op in ("=", "<>") and NumLit not in kinds:
        if a is None or b is None or isinstance(a, bool) or isinstance(b, bool):
            return U
        return _tv((str(a) == str(b)) == (node.op == "="))
    na, nb = _ref_num(a), _ref_num(b)
    if na is None or nb is None:
        return U
    cmp = (na > nb) - (na < nb)
    return _tv(
        {">": cmp > 0, ">=": cmp >= 0, "<": cmp < 0, "<=": cmp <= 0, "=": cmp == 0, "<>": cmp != 0}[
            node.op
        ]
    )


# --------------------------------------------------------------------- random expressions

NAMES = ["a", "b", "region", "x.y"]
STR_VALUES = ["", "eu", "us", "it's", "10", "true", "FALSE", "1.5", "-3", "abc"]
prop_values = st.one_of(
    st.sampled_from(STR_VALUES), st.integers(-20, 20).map(str), st.text(max_size=4)
)
prop_maps = st.dictionaries(st.sampled_from(NAMES), prop_values, max_size=4)

numbers = st.one_of(
    st.integers(-20, 20),
    st.sampled_from([0.5, -1.5, 2.25, 10.0, 1e3]),
)
operands: st.SearchStrategy[Operand] = st.one_of(
    st.sampled_from(NAMES).map(Prop),
    numbers.map(NumLit),
    st.sampled_from(STR_VALUES).map(StrLit),
    st.booleans().map(BoolLit),
)


def _leaf() -> st.SearchStrategy[Node]:
    return st.one_of(
        st.builds(Compare, st.sampled_from([">", ">=", "<", "<=", "=", "<>"]), operands, operands),
        st.builds(Between, operands, operands, operands, st.booleans()),
        st.builds(
            In,
            operands,
            st.lists(st.sampled_from(STR_VALUES), min_size=1, max_size=3).map(tuple),
            st.booleans(),
        ),
        st.builds(IsNull, operands, st.booleans()),
        st.builds(IsBool, operands, st.booleans()),
        st.booleans().map(BoolLit),
    )


trees: st.SearchStrategy[Node] = st.recursive(
    _leaf(),
    lambda inner: st.one_of(
        st.builds(Not, inner), st.builds(And, inner, inner), st.builds(Or, inner, inner)
    ),
    max_leaves=12,
)


@settings(max_examples=examples(400), deadline=None)
@given(trees, prop_maps)
def test_compiled_evaluator_agrees_with_the_reference(tree: Node, props: dict[str, str]) -> None:
    compiled = compile_filter(to_sql(tree))
    want = ref_eval(tree, props)
    got = compiled.evaluate(props)
    assert _tv(got) == want, (to_sql(tree), props)
    assert compiled.matches(props) is (want == T)


@settings(max_examples=examples(300), deadline=None)
@given(trees)
def test_printed_expressions_parse_back_to_the_same_tree(tree: Node) -> None:
    text = to_sql(tree)
    assert parse_sql(text) == tree
    assert to_sql(parse_sql(text)) == text


@settings(max_examples=examples(300), deadline=None)
@given(st.text(max_size=40))
def test_any_text_parses_or_fails_with_a_position(text: str) -> None:
    try:
        compile_filter(text)
    except SqlError as exc:
        assert 0 <= exc.position <= len(text)
        assert exc.reason
