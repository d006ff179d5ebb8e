"""Subscription filters (pure parsing): of type TAG, ``*`` (everything) or ``TagA || TagB``; of
type SQL92, a condition over the message's properties (:mod:`protocol.sql92`).

A message matches a tag filter when its ``TAGS`` property is one of the listed tags. The broker
checks the ConsumeQueue's tag hash (:func:`protocol.message.tag_hash`, :attr:`TagFilter.hashes`)
first, without reading the record, and confirms on the record's tags (:func:`filter_records`),
so two tags with the same hash never mix. A SQL92 filter (:class:`SqlFilter`) is checked first
on the entry's property digest where the broker keeps one (its ``hashes`` is a
:class:`~protocol.property_index.PropertyNeed`) and decided on the record's properties, read
from its tail without decoding the body.
:func:`parse_filter` reads a subscription of either type.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from protocol.message import (
    DISPATCH_HEAD,
    HEAD_SIZE,
    RecordError,
    decode_properties,
    record_tags,
    tag_hash,
)
from protocol.property_index import PropertyNeed, property_need
from protocol.sql92 import SqlError, SqlFilterExpr, compile_filter

__all__ = [
    "MAX_EXPRESSION_CHARS",
    "SQL92",
    "SQL_FILTER_OFF",
    "TAG",
    "Filter",
    "FilterError",
    "MessageFilter",
    "SqlFilter",
    "TagFilter",
    "as_filter",
    "filter_records",
    "filter_type",
    "parse_filter",
    "parse_tag_expression",
    "record_properties",
]

TAG: Final = "TAG"
SQL92: Final = "SQL92"
"""The two filter types (RocketMQ's ExpressionType names; a missing or empty type is TAG)."""

SQL_FILTER_OFF: Final = (
    "SQL92 filters are off on this broker (enable_property_filter = false: every message read "
    "for one is evaluated, a CPU cost per message); subscribe with a TAG expression, or turn "
    "enable_property_filter on"
)
"""The remark of a SQL92 subscription to a broker with property filters off (every front)."""

MAX_EXPRESSION_CHARS: Final = 1024


class FilterError(ValueError):
    """A tag expression that cannot be parsed (the message says why)."""


@dataclass(frozen=True, slots=True)
class TagFilter:
    tags: frozenset[str]
    hashes: frozenset[int]

    def matches(self, tags: str) -> bool:
        return tags in self.tags

    def accepts_record(self, buf: bytes | bytearray | memoryview, pos: int = 0) -> bool:
        """Whether the (checked) record at ``pos`` matches, on its tags."""
        return record_tags(buf, pos) in self.tags

    def may_match(self, hash_code: int) -> bool:
        """The ConsumeQueue's check: False means the message surely does not match."""
        return hash_code in self.hashes


def parse_tag_expression(text: str) -> TagFilter | None:
    """``*`` or empty -> None (everything); ``TagA || TagB`` -> a filter. Raises
    :class:`FilterError` for an empty alternative or an expression over 1024 characters."""
    expr = text.strip()
    if not expr or expr == "*":
        return None
    if len(expr) > MAX_EXPRESSION_CHARS:
        raise FilterError(f"tag expression is longer than {MAX_EXPRESSION_CHARS} characters")
    tags = [part.strip() for part in expr.split("||")]
    if any(not tag for tag in tags):
        raise FilterError(f"tag expression {text!r} has an empty tag (write 'TagA || TagB')")
    if any(tag == "*" for tag in tags):
        return None
    return TagFilter(frozenset(tags), frozenset(tag_hash(t) for t in tags))


@dataclass(frozen=True, slots=True)
class SqlFilter:
    """A SQL92 subscription, compiled (:func:`protocol.sql92.compile_filter`, cached by text).
    ``hashes`` is what it needs of an entry's property digest (:mod:`protocol.property_index`):
    where the broker keeps digests beside the ConsumeQueue, entries that cannot match are passed
    over without reading their records, as a tag filter's hashes do."""

    expr: SqlFilterExpr
    hashes: PropertyNeed

    @property
    def text(self) -> str:
        return self.expr.text

    def accepts_record(self, buf: bytes | bytearray | memoryview, pos: int = 0) -> bool:
        """Whether the (checked) record at ``pos`` matches, on its properties (a record whose
        properties cannot be read matches nothing)."""
        try:
            props = record_properties(buf, pos)
        except RecordError:
            return False
        return self.expr.matches(props)


MessageFilter = TagFilter | SqlFilter


def record_properties(buf: bytes | bytearray | memoryview, pos: int = 0) -> dict[str, str]:
    """The properties (``TAGS``, ``KEYS`` and the user's) of the (checked) record at ``pos``,
    read from its tail without the body. Raises :class:`~protocol.message.RecordError` when the
    lengths do not add up or the text is not UTF-8."""
    size, _m, _c, _q, _o, _p, _t, blen = DISPATCH_HEAD.unpack_from(buf, pos)
    tail = bytes(buf[pos + HEAD_SIZE + blen : pos + size])
    if len(tail) < 4:
        raise RecordError("record layout does not match its size")
    tl = int.from_bytes(tail[0:2], "big")
    props_at = 2 + tl + 2
    if (
        props_at > len(tail)
        or int.from_bytes(tail[props_at - 2 : props_at], "big") != len(tail) - props_at
    ):
        raise RecordError("record layout does not match its size")
    try:
        return decode_properties(tail[props_at:])
    except UnicodeDecodeError:
        raise RecordError("record properties are not UTF-8") from None


def filter_type(text: str | None) -> str:
    """A subscription's filter type, TAG or SQL92 (any case; None or empty is TAG). Raises
    :class:`FilterError` for another."""
    kind = (text or TAG).strip().upper()
    if kind not in (TAG, SQL92):
        raise FilterError(f"unknown filter type {text!r} (TAG or SQL92)")
    return kind


def parse_filter(kind: str | None, expression: str) -> MessageFilter | None:
    """A subscription's filter: of ``kind`` TAG as :func:`parse_tag_expression` (None for
    everything), of kind SQL92 compiled (cached). Raises :class:`FilterError` saying why, for
    SQL92 with the position: ``SQL92 expression 'a >' at position 3: ...``."""
    if filter_type(kind) == TAG:
        return parse_tag_expression(expression)
    try:
        expr = compile_filter(expression)
        return SqlFilter(expr, property_need(expr))
    except SqlError as exc:
        raise FilterError(f"SQL92 expression {expression!r} {exc}") from None


@dataclass(frozen=True, slots=True)
class Filter:
    """A subscription's filter as a client gives it: ``Filter.tags("TagA || TagB")`` or
    ``Filter.sql("region = 'eu' AND amount > 100")`` (a plain string is a tag expression)."""

    type: str
    expression: str

    @classmethod
    def tags(cls, expression: str = "*") -> Filter:
        """A tag expression; raises :class:`FilterError` when it does not parse."""
        flt = cls(TAG, expression.strip() or "*")
        parse_filter(TAG, flt.expression)
        return flt

    @classmethod
    def sql(cls, expression: str) -> Filter:
        """A SQL92 condition over the message's properties; raises :class:`FilterError` (with
        the position and the reason) when it does not parse."""
        flt = cls(SQL92, expression)
        parse_filter(SQL92, expression)
        return flt


def as_filter(value: str | Filter) -> Filter:
    """``value`` as a checked :class:`Filter` (a string is a tag expression). Raises
    :class:`FilterError`."""
    if isinstance(value, Filter):
        parse_filter(value.type, value.expression)
        return Filter(filter_type(value.type), value.expression)
    return Filter.tags(value)


def filter_records(body: bytes, tag_filter: MessageFilter) -> tuple[bytes, int]:
    """The records of ``body`` (back to back, as a pull reads them) that match, and how many.
    Each record's tags (or properties) are read from its tail (not a full decode): for a tag
    filter this is the confirmation of the ConsumeQueue's tag-hash check, where two tags may
    share a hash."""
    kept: list[bytes] = []
    accepts = tag_filter.accepts_record
    pos = 0
    while pos < len(body):
        size = DISPATCH_HEAD.unpack_from(body, pos)[0]
        if accepts(body, pos):
            kept.append(body[pos : pos + size])
        pos += size
    if len(kept) == 1:
        return kept[0], 1
    return b"".join(kept), len(kept)
