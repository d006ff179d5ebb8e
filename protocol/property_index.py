"""The property digest of a message and what a SQL92 expression needs of it (pure: no I/O).

A broker with property filters on keeps, beside each ConsumeQueue entry, a 128-bit digest of the
record's properties (``storage/filter_index.py``): a bloom filter over *atoms* of each
property ``k`` with value ``v``:

* ``has k`` (the property is present),
* ``k = 'v'`` as a string,
* ``k = n`` as a number, when ``v`` reads as one (:func:`protocol.sql92` reads numbers the same
  way), with ``n`` in one canonical spelling (``1``, ``1.0`` and ``1e0`` are one atom).

Each atom sets three of the 128 bits (from its CRC-32, mixed). :func:`property_need` turns an expression
into what must hold for it to be *true*, in disjunctive form over atoms (``region = 'eu' AND
amount > 100`` needs ``region = 'eu'`` and ``has amount``; an ``IN`` list needs one of its
strings; ``NOT`` is analysed as what makes its operand false), and :class:`PropertyNeed`
compiles that into bit masks. An entry whose digest lacks every mask cannot match: the broker
passes over it without reading its record. The test is one-sided: a digest may hold a mask by
chance (a false positive, then the record is read and the expression decides), never lack one
for a message that matches, so results are those of the expression alone.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

from protocol.message import PROP_PRODUCER_SEQ, decode_properties
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
    Prop,
    SqlFilterExpr,
    StrLit,
    as_number,
)

__all__ = [
    "ALL_BITS",
    "SEQ_DIGEST",
    "PropertyNeed",
    "digest_of",
    "digest_of_raw",
    "property_need",
]

ALL_BITS: Final = (1 << 64) - 1
"""A digest half with every bit set: what an entry whose properties could not be read gets (it
may match anything, so its record is read)."""
_SHIFTS: Final = (57, 50, 43)
"""Bits an atom sets (three, from its mixed hash)."""
_MAX_TERMS: Final = 16
"""Most alternatives a need keeps; past it an OR needs nothing and an AND keeps one side."""

_Atom = bytes
_Dnf = tuple[frozenset[_Atom], ...]
_TRUE: Final[_Dnf] = (frozenset(),)
_FALSE: Final[_Dnf] = ()


_VALUE_BLIND: Final = frozenset(
    {
        "UNIQ_KEY",
        "KEYS",
        "__PSEQ",
        "TRACE_CONTEXT",
        "ORIGIN_MESSAGE_ID",
        "DLQ_ORIGIN_MESSAGE_ID",
        "CONSUME_FAILURE_REASON",
        "__transactionId__",
        "TRAN_HALF_OFFSET",
        "TIMER_SOURCE_OFFSET",
        "TIMER_OUT_MS",
        "TIMER_ENQUEUE_MS",
        "TIMER_DEQUEUE_MS",
        "TIMER_DELIVER_MS",
        "TIMER_DEL_UNIQKEY",
    }
)
"""System properties whose values differ from message to message (ids, keys, times): only
their presence is digested (hashing each value would cost a hash per message and fill the
digest with bits no filter asks for); a condition on their value reads the record."""


def _has(key: str) -> _Atom:
    return b"h\0" + key.encode()


def _str(key: str, value: str) -> _Atom:
    if key in _VALUE_BLIND:
        return _has(key)
    return b"s\0" + key.encode() + b"\0" + value.encode()


def _num(key: str, value: int | float) -> _Atom:
    if key in _VALUE_BLIND:
        return _has(key)
    return b"n\0" + key.encode() + b"\0" + _canonical(value).encode()


def _canonical(value: int | float) -> str:
    """One spelling per number, so that two values equal as :mod:`protocol.sql92` compares them
    (Python's exact ``==`` between ints and floats) spell the same."""
    if isinstance(value, float):
        if value.is_integer():
            return str(int(value))
        return repr(value)
    return str(value)


def _bits(atom: _Atom) -> int:
    """The three of the 128 bits ``atom`` sets. CRC-32 of similar atoms (k=7, k=57) differ in
    structured ways: it is mixed (Fibonacci hashing) and the bit numbers taken from the top."""
    h = (zlib.crc32(atom) * 0x9E3779B97F4A7C15) & ALL_BITS
    mask = 0
    for shift in _SHIFTS:
        mask |= 1 << ((h >> shift) & 127)
    return mask


@lru_cache(maxsize=8192)
def _pair_bits(key: str, value: str) -> int:
    """The bits of the atoms of one property (cached: most values repeat from message to
    message)."""
    mask = _bits(_has(key)) | _bits(_str(key, value))
    number = None if key in _VALUE_BLIND else as_number(value)
    if number is not None:
        mask |= _bits(_num(key, number))
    return mask


def digest_of(props: Mapping[str, str]) -> tuple[int, int]:
    """The digest of a message with these properties: two 64-bit halves."""
    mask = 0
    for key, value in props.items():
        mask |= _pair_bits(key, "" if key in _VALUE_BLIND else value)
    return mask & ALL_BITS, mask >> 64


def digest_of_raw(props_raw: bytes) -> tuple[int, int]:
    """The digest of a record's properties as the record holds them, encoded (what the filter
    index reads from a record's tail); both halves :data:`ALL_BITS` when they are not UTF-8,
    as for a record the index cannot read."""
    try:
        return digest_of(decode_properties(props_raw))
    except UnicodeDecodeError:
        return ALL_BITS, ALL_BITS


SEQ_DIGEST: Final = digest_of({PROP_PRODUCER_SEQ: ""})
"""The digest of an idempotent producer's ``__PSEQ`` property, whatever its value (only its
presence is digested): a record whose properties are that property followed by others has the
others' digest with these bits set."""


# ------------------------------------------------------------------------------- the analysis


def _and(a: _Dnf, b: _Dnf) -> _Dnf:
    if not a or not b:
        return _FALSE
    if len(a) * len(b) > _MAX_TERMS:
        return a if len(a) <= len(b) else b  # what A AND B needs includes what A needs
    return _dedupe(tuple(x | y for x in a for y in b))


def _or(a: _Dnf, b: _Dnf) -> _Dnf:
    terms = a + b
    if len(terms) > _MAX_TERMS or any(not t for t in terms):
        return _TRUE
    return _dedupe(terms)


def _dedupe(terms: _Dnf) -> _Dnf:
    return tuple(dict.fromkeys(terms))


def _present(*operands: Operand) -> _Dnf:
    """Every property among ``operands`` is present (what a comparison that is not unknown
    needs)."""
    return (frozenset(_has(op.name) for op in operands if isinstance(op, Prop)),)


def _need_true(node: Node) -> _Dnf:
    if isinstance(node, BoolLit):
        return _TRUE if node.value else _FALSE
    if isinstance(node, Compare):
        need = _present(node.left, node.right)
        if node.op != "=":
            return need
        kinds = {type(node.left), type(node.right)}
        if BoolLit in kinds:
            return need
        prop, lit = (
            (node.left, node.right) if isinstance(node.left, Prop) else (node.right, node.left)
        )
        if not isinstance(prop, Prop):
            return need
        if isinstance(lit, NumLit):
            return _and(need, (frozenset({_num(prop.name, lit.value)}),))
        if isinstance(lit, StrLit) and NumLit not in kinds:
            return _and(need, (frozenset({_str(prop.name, lit.value)}),))
        return need
    if isinstance(node, Between):
        return _present(node.value, node.low, node.high)
    if isinstance(node, In):
        need = _present(node.value)
        if node.negated or not isinstance(node.value, Prop):
            return need
        name = node.value.name
        return _and(need, tuple(frozenset({_str(name, item)}) for item in node.items))
    if isinstance(node, IsNull):
        return _present(node.value) if node.negated else _TRUE
    if isinstance(node, IsBool):
        return _present(node.value)
    if isinstance(node, Not):
        return _need_false(node.inner)
    if isinstance(node, And):
        return _and(_need_true(node.left), _need_true(node.right))
    return _or(_need_true(node.left), _need_true(node.right))


def _need_false(node: Node) -> _Dnf:
    """What must hold for ``node`` to be false (not unknown)."""
    if isinstance(node, BoolLit):
        return _FALSE if node.value else _TRUE
    if isinstance(node, Compare):
        return _present(node.left, node.right)
    if isinstance(node, Between):
        return _present(node.value, node.low, node.high)
    if isinstance(node, In):
        return _present(node.value)
    if isinstance(node, IsNull):
        return _TRUE if node.negated else _present(node.value)
    if isinstance(node, IsBool):
        return _TRUE  # false also for a missing value
    if isinstance(node, Not):
        return _need_true(node.inner)
    if isinstance(node, And):
        return _or(_need_false(node.left), _need_false(node.right))
    return _and(_need_false(node.left), _need_false(node.right))


@dataclass(frozen=True, slots=True)
class PropertyNeed:
    """What an expression needs of a digest: it may match an entry only when the entry's digest
    holds every bit of one of ``masks`` (pairs of 64-bit halves). ``decides`` is False when
    the expression needs nothing a digest can tell (every entry is read, as without an index).
    """

    masks: tuple[tuple[int, int], ...]
    decides: bool

    def __contains__(self, tag_hash: object) -> bool:
        """As a ConsumeQueue tag-hash test: every tag hash may match (a SQL92 filter is decided
        on the property digest and the record, never on the tag hash)."""
        return True

    def may_match(self, lo: int, hi: int) -> bool:
        return any(lo & mlo == mlo and hi & mhi == mhi for mlo, mhi in self.masks)


@lru_cache(maxsize=256)
def _need_of_tree(tree: Node) -> PropertyNeed:
    masks: list[tuple[int, int]] = []
    for term in _need_true(tree):
        mask = 0
        for atom in term:
            mask |= _bits(atom)
        masks.append((mask & ALL_BITS, mask >> 64))
    return PropertyNeed(tuple(dict.fromkeys(masks)), all(m != (0, 0) for m in masks))


def property_need(expr: SqlFilterExpr) -> PropertyNeed:
    """What ``expr`` needs of an entry's digest to be true (cached by its tree)."""
    return _need_of_tree(expr.tree)
