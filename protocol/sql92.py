"""SQL92 property filters, RocketMQ's subset (pure: no I/O, no clock).

A subscription of type SQL92 is a condition over the message's properties (its user properties
and ``TAGS``, ``KEYS``), e.g. ``region = 'eu' AND amount > 100``. The grammar (keywords in any
case)::

    expr        := or
    or          := and ( OR and )*
    and         := not ( AND not )*
    not         := NOT not | predicate
    predicate   := TRUE | FALSE | '(' expr ')'
                 | operand ( '>' | '>=' | '<' | '<=' | '=' | '<>' ) operand
                 | operand [NOT] BETWEEN operand AND operand
                 | operand [NOT] IN '(' string ( ',' string )* ')'
                 | operand IS [NOT] NULL
                 | operand IS ( TRUE | FALSE )
    operand     := property | number | string | TRUE | FALSE
    property    := [A-Za-z_$] [A-Za-z0-9_$.]*
    number      := ['-'] digits [ '.' digits ] [ ('e'|'E') ['+'|'-'] digits ]
    string      := "'" ( any character but "'" | "''" )* "'"

Semantics (RocketMQ's): a property's value is a string, and a missing property is *null*.
Conditions have three values, true, false and unknown (null); a message matches only when its
condition is true. A comparison with null is unknown; ``NOT unknown`` is unknown; ``AND`` is
false when either side is false, ``OR`` true when either side is true, otherwise unknown when
either side is. ``> >= < <=`` and ``BETWEEN`` compare numbers: a property's value is read as a
number (a value that is not one makes the comparison unknown, as RocketMQ's failed conversion
matches nothing). ``=`` and ``<>`` compare numbers when either side is a number literal,
booleans when either side is ``TRUE``/``FALSE`` (a value ``true``/``false`` in any case),
strings otherwise. ``IN`` compares strings. ``IS NULL``/``IS NOT NULL`` and ``IS TRUE``/``IS
FALSE`` are never unknown (``IS TRUE`` is false for a missing or non-boolean value).

:func:`compile_filter` parses once and caches (the compiled closures are what a broker runs per
message); :class:`SqlError` says the position (0-based character) and the reason.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

__all__ = [
    "MAX_DEPTH",
    "MAX_NESTING",
    "MAX_SQL_CHARS",
    "And",
    "Between",
    "BoolLit",
    "Compare",
    "In",
    "IsBool",
    "IsNull",
    "Node",
    "Not",
    "NumLit",
    "Operand",
    "Or",
    "Prop",
    "SqlError",
    "SqlFilterExpr",
    "StrLit",
    "as_number",
    "compile_filter",
    "parse_sql",
    "to_sql",
]

MAX_SQL_CHARS: Final = 4096
"""The longest expression accepted (a subscription is sent with every request)."""
MAX_NESTING: Final = 64
"""Most parentheses and NOTs inside one another (the parser recurses on them)."""
MAX_DEPTH: Final = 256
"""Deepest tree accepted (AND and OR chains count: evaluation recurses on the tree)."""


class SqlError(ValueError):
    """An expression that does not parse: ``position`` (0-based) and ``reason``."""

    def __init__(self, position: int, reason: str) -> None:
        super().__init__(f"at position {position}: {reason}")
        self.position = position
        self.reason = reason


# ---------------------------------------------------------------------------------------- AST


@dataclass(frozen=True, slots=True)
class Prop:
    name: str


@dataclass(frozen=True, slots=True)
class NumLit:
    value: int | float


@dataclass(frozen=True, slots=True)
class StrLit:
    value: str


@dataclass(frozen=True, slots=True)
class BoolLit:
    value: bool


Operand = Prop | NumLit | StrLit | BoolLit


@dataclass(frozen=True, slots=True)
class Compare:
    op: str  # one of > >= < <= = <>
    left: Operand
    right: Operand


@dataclass(frozen=True, slots=True)
class Between:
    value: Operand
    low: Operand
    high: Operand
    negated: bool


@dataclass(frozen=True, slots=True)
class In:
    value: Operand
    items: tuple[str, ...]
    negated: bool


@dataclass(frozen=True, slots=True)
class IsNull:
    value: Operand
    negated: bool


@dataclass(frozen=True, slots=True)
class IsBool:
    value: Operand
    truth: bool


@dataclass(frozen=True, slots=True)
class Not:
    inner: Node


@dataclass(frozen=True, slots=True)
class And:
    left: Node
    right: Node


@dataclass(frozen=True, slots=True)
class Or:
    left: Node
    right: Node


Node = Compare | Between | In | IsNull | IsBool | Not | And | Or | BoolLit

# ------------------------------------------------------------------------------------ lexing

_KEYWORDS: Final = frozenset({"AND", "OR", "NOT", "BETWEEN", "IN", "IS", "NULL", "TRUE", "FALSE"})
_TOKEN: Final = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<num>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)
  | (?P<id>[A-Za-z_$][A-Za-z0-9_$.]*)
  | (?P<str>'(?:[^']|'')*')
  | (?P<op><>|>=|<=|!=|[<>=(),-])
    """,
    re.VERBOSE,
)


@dataclass(frozen=True, slots=True)
class _Tok:
    kind: str  # num, id, kw, str, op, end
    text: str
    pos: int


def _lex(text: str) -> list[_Tok]:
    toks: list[_Tok] = []
    pos = 0
    n = len(text)
    while pos < n:
        m = _TOKEN.match(text, pos)
        if m is None:
            if text[pos] == "'":
                raise SqlError(pos, "string literal is not closed (a quote inside is written '')")
            raise SqlError(pos, f"unexpected character {text[pos]!r}")
        kind = m.lastgroup or ""
        value = m.group()
        if kind == "op" and value == "!=":
            raise SqlError(pos, "'!=' is not SQL92: write '<>'")
        if kind == "id" and value.upper() in _KEYWORDS:
            toks.append(_Tok("kw", value.upper(), pos))
        elif kind != "ws":
            toks.append(_Tok(kind, value, pos))
        pos = m.end()
    toks.append(_Tok("end", "", n))
    return toks


# ----------------------------------------------------------------------------------- parsing


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = _lex(text)
        self.i = 0
        self.nesting = 0

    def nest(self) -> None:
        self.nesting += 1
        if self.nesting > MAX_NESTING:
            raise SqlError(self.peek().pos, f"parentheses and NOT nest deeper than {MAX_NESTING}")

    def peek(self) -> _Tok:
        return self.toks[self.i]

    def take(self) -> _Tok:
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def at_kw(self, *words: str) -> bool:
        tok = self.peek()
        return tok.kind == "kw" and tok.text in words

    def at_op(self, *ops: str) -> bool:
        tok = self.peek()
        return tok.kind == "op" and tok.text in ops

    def expect_kw(self, word: str, after: str) -> None:
        if not self.at_kw(word):
            raise self.error(f"expected {word} {after}")
        self.take()

    def expect_op(self, op: str, after: str) -> None:
        if not self.at_op(op):
            raise self.error(f"expected '{op}' {after}")
        self.take()

    def error(self, reason: str) -> SqlError:
        tok = self.peek()
        found = "the end of the expression" if tok.kind == "end" else repr(tok.text)
        return SqlError(tok.pos, f"{reason}, found {found}")

    def parse(self) -> Node:
        if self.peek().kind == "end":
            raise SqlError(0, "the expression is empty")
        node = self.or_()
        if self.peek().kind != "end":
            raise self.error("expected AND, OR or the end of the expression")
        return node

    def or_(self) -> Node:
        node = self.and_()
        while self.at_kw("OR"):
            self.take()
            node = Or(node, self.and_())
        return node

    def and_(self) -> Node:
        node = self.not_()
        while self.at_kw("AND"):
            self.take()
            node = And(node, self.not_())
        return node

    def not_(self) -> Node:
        if self.at_kw("NOT"):
            self.take()
            self.nest()
            inner = self.not_()
            self.nesting -= 1
            return Not(inner)
        return self.predicate()

    def predicate(self) -> Node:
        if self.at_op("("):
            self.take()
            self.nest()
            node = self.or_()
            self.expect_op(")", "to close the parenthesis")
            self.nesting -= 1
            return node
        start = self.peek()
        left = self.operand("to start a condition")
        if self.at_op(">", ">=", "<", "<=", "=", "<>"):
            op = self.take().text
            return Compare(op, left, self.operand(f"after '{op}'"))
        negated = False
        if self.at_kw("NOT"):
            self.take()
            negated = True
            if not self.at_kw("BETWEEN", "IN"):
                raise self.error("expected BETWEEN or IN after NOT")
        if self.at_kw("BETWEEN"):
            self.take()
            low = self.operand("after BETWEEN")
            self.expect_kw("AND", "between the bounds of BETWEEN")
            high = self.operand("after BETWEEN ... AND")
            return Between(left, low, high, negated)
        if self.at_kw("IN"):
            self.take()
            self.expect_op("(", "after IN")
            items = [self.string("in the IN list")]
            while self.at_op(","):
                self.take()
                items.append(self.string("in the IN list"))
            self.expect_op(")", "to close the IN list")
            return In(left, tuple(items), negated)
        if self.at_kw("IS"):
            self.take()
            if self.at_kw("NOT"):
                self.take()
                self.expect_kw("NULL", "after IS NOT")
                return IsNull(left, True)
            if self.at_kw("NULL"):
                self.take()
                return IsNull(left, False)
            if self.at_kw("TRUE", "FALSE"):
                return IsBool(left, self.take().text == "TRUE")
            raise self.error("expected NULL, NOT NULL, TRUE or FALSE after IS")
        if isinstance(left, BoolLit):
            return left
        what = (
            f"property {start.text!r} alone is not a condition (write {start.text} IS TRUE)"
            if isinstance(left, Prop)
            else "a literal alone is not a condition"
        )
        if self.peek().kind == "end" or self.at_kw("AND", "OR") or self.at_op(")"):
            raise SqlError(start.pos, what)
        raise self.error("expected a comparison, BETWEEN, IN or IS")

    def operand(self, where: str) -> Operand:
        tok = self.peek()
        if tok.kind == "id":
            self.take()
            return Prop(tok.text)
        if tok.kind == "str":
            self.take()
            return StrLit(tok.text[1:-1].replace("''", "'"))
        if tok.kind == "num":
            self.take()
            return NumLit(_number(tok.text, tok.pos))
        if tok.kind == "op" and tok.text == "-":
            self.take()
            nxt = self.peek()
            if nxt.kind != "num":
                raise self.error("expected a number after '-'")
            self.take()
            return NumLit(-_number(nxt.text, nxt.pos))
        if tok.kind == "kw" and tok.text in ("TRUE", "FALSE"):
            self.take()
            return BoolLit(tok.text == "TRUE")
        if tok.kind == "kw" and tok.text == "NULL":
            raise self.error(f"NULL is compared with IS NULL or IS NOT NULL, not {where}")
        raise self.error(f"expected a property, number or 'string' {where}")

    def string(self, where: str) -> str:
        tok = self.peek()
        if tok.kind != "str":
            raise self.error(f"expected a 'string' {where}")
        self.take()
        return tok.text[1:-1].replace("''", "'")


def _number(text: str, pos: int) -> int | float:
    if "." in text or "e" in text or "E" in text:
        value = float(text)
        if math.isinf(value):
            raise SqlError(pos, f"number {text} is out of range")
        return value
    return int(text)


def parse_sql(text: str) -> Node:
    """The expression's tree. Raises :class:`SqlError` (position and reason)."""
    if len(text) > MAX_SQL_CHARS:
        raise SqlError(MAX_SQL_CHARS, f"the expression is longer than {MAX_SQL_CHARS} characters")
    tree = _Parser(text).parse()
    if _depth(tree) > MAX_DEPTH:
        raise SqlError(
            0, f"the expression nests deeper than {MAX_DEPTH} (AND, OR, NOT, parentheses)"
        )
    return tree


def _depth(tree: Node) -> int:
    """The tree's depth, without recursion."""
    deepest = 0
    stack: list[tuple[Node, int]] = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(node, And | Or):
            stack += [(node.left, depth + 1), (node.right, depth + 1)]
        elif isinstance(node, Not):
            stack.append((node.inner, depth + 1))
    return deepest


# ---------------------------------------------------------------------------------- printing


def _operand_sql(op: Operand) -> str:
    if isinstance(op, Prop):
        return op.name
    if isinstance(op, StrLit):
        return _quote(op.value)
    if isinstance(op, BoolLit):
        return "TRUE" if op.value else "FALSE"
    return repr(op.value)


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def to_sql(node: Node) -> str:
    """The expression printed back (fully parenthesised; parses to the same tree)."""
    if isinstance(node, BoolLit):
        return "TRUE" if node.value else "FALSE"
    if isinstance(node, Compare):
        return f"{_operand_sql(node.left)} {node.op} {_operand_sql(node.right)}"
    if isinstance(node, Between):
        neg = "NOT " if node.negated else ""
        return (
            f"{_operand_sql(node.value)} {neg}BETWEEN {_operand_sql(node.low)}"
            f" AND {_operand_sql(node.high)}"
        )
    if isinstance(node, In):
        neg = "NOT " if node.negated else ""
        items = ", ".join(_quote(v) for v in node.items)
        return f"{_operand_sql(node.value)} {neg}IN ({items})"
    if isinstance(node, IsNull):
        return f"{_operand_sql(node.value)} IS {'NOT ' if node.negated else ''}NULL"
    if isinstance(node, IsBool):
        return f"{_operand_sql(node.value)} IS {'TRUE' if node.truth else 'FALSE'}"
    if isinstance(node, Not):
        return f"NOT ({to_sql(node.inner)})"
    if isinstance(node, And):
        return f"({to_sql(node.left)}) AND ({to_sql(node.right)})"
    return f"({to_sql(node.left)}) OR ({to_sql(node.right)})"


# --------------------------------------------------------------------------------- compiling

Props = Mapping[str, str]
_Value = Callable[[Props], "str | int | float | bool | None"]
_Cond = Callable[[Props], "bool | None"]


_NUMBER: Final = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)
"""A property value read as a number: ASCII decimal, as Java's ``Double.valueOf`` reads one
(no NaN or Infinity, no ``_`` separators or non-ASCII digits as Python's ``float`` allows)."""


def as_number(value: object) -> int | float | None:
    """``value`` as a number as comparisons read it (None when it is not one)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return value
    if isinstance(value, str):
        m = _NUMBER.fullmatch(value.strip(" \t\n\r"))
        if m is None:
            return None
        text = m.group()
        return float(text) if any(c in text for c in ".eE") else int(text)
    return None


def _as_bool(value: object) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        low = value.lower()
        if low == "true":
            return True
        if low == "false":
            return False
    return None


def _value_fn(op: Operand) -> _Value:
    if isinstance(op, Prop):
        name = op.name
        return lambda props: props.get(name)
    const = op.value
    return lambda _props: const


_ORDER: Final[dict[str, Callable[[int | float, int | float], bool]]] = {
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    "=": lambda a, b: a == b,
    "<>": lambda a, b: a != b,
}


def _compare_fn(node: Compare) -> _Cond:
    lf, rf = _value_fn(node.left), _value_fn(node.right)
    kinds = {type(node.left), type(node.right)}
    test = _ORDER[node.op]
    if node.op in ("=", "<>") and BoolLit in kinds:

        def cond_bool(props: Props) -> bool | None:
            a, b = _as_bool(lf(props)), _as_bool(rf(props))
            if a is None or b is None:
                return None
            return (a == b) if node.op == "=" else (a != b)

        return cond_bool
    if node.op in ("=", "<>") and NumLit not in kinds:
        equal = node.op == "="

        def cond_str(props: Props) -> bool | None:
            a, b = lf(props), rf(props)
            if a is None or b is None:
                return None
            if isinstance(a, bool) or isinstance(b, bool):
                return None
            return (str(a) == str(b)) is equal

        return cond_str

    def cond_num(props: Props) -> bool | None:
        a, b = as_number(lf(props)), as_number(rf(props))
        if a is None or b is None:
            return None
        return test(a, b)

    return cond_num


def _three_not(value: bool | None) -> bool | None:
    return None if value is None else not value


def _cond_fn(node: Node) -> _Cond:
    if isinstance(node, BoolLit):
        const = node.value
        return lambda _props: const
    if isinstance(node, Compare):
        return _compare_fn(node)
    if isinstance(node, Between):
        vf, lf, hf = _value_fn(node.value), _value_fn(node.low), _value_fn(node.high)
        negated = node.negated

        def between(props: Props) -> bool | None:
            v = as_number(vf(props))
            lo, hi = as_number(lf(props)), as_number(hf(props))
            if v is None or lo is None or hi is None:
                return None
            return (lo <= v <= hi) is not negated

        return between
    if isinstance(node, In):
        vf = _value_fn(node.value)
        items = frozenset(node.items)
        negated = node.negated

        def in_(props: Props) -> bool | None:
            v = vf(props)
            if not isinstance(v, str):
                return None
            return (v in items) is not negated

        return in_
    if isinstance(node, IsNull):
        vf = _value_fn(node.value)
        negated = node.negated
        return lambda props: (vf(props) is None) is not negated
    if isinstance(node, IsBool):
        vf = _value_fn(node.value)
        truth = node.truth
        return lambda props: _as_bool(vf(props)) is truth
    if isinstance(node, Not):
        inner = _cond_fn(node.inner)
        return lambda props: _three_not(inner(props))
    left, right = _cond_fn(node.left), _cond_fn(node.right)
    # AND and OR in three-valued logic: one side at the deciding value (false for AND, true
    # for OR) decides, the right side unread when the left does; else unknown if either is.
    decides = not isinstance(node, And)

    def junction(props: Props) -> bool | None:
        a = left(props)
        if a is decides:
            return decides
        b = right(props)
        if b is decides:
            return decides
        return None if a is None or b is None else not decides

    return junction


@dataclass(frozen=True, slots=True)
class SqlFilterExpr:
    """A compiled expression: :meth:`evaluate` gives the three-valued result, :meth:`matches`
    whether a message with these properties is delivered (only when true)."""

    text: str
    tree: Node
    _cond: _Cond

    def evaluate(self, props: Props) -> bool | None:
        return self._cond(props)

    def matches(self, props: Props) -> bool:
        return self._cond(props) is True


@lru_cache(maxsize=256)
def compile_filter(text: str) -> SqlFilterExpr:
    """Parse and compile ``text`` once (cached by its text: every pull of a subscription carries
    it). Raises :class:`SqlError`."""
    tree = parse_sql(text)
    return SqlFilterExpr(text, tree, _cond_fn(tree))
