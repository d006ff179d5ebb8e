"""Tag expressions of subscriptions: ``*`` (everything) or ``TagA || TagB`` (pure parsing).

A message matches when its ``TAGS`` property is one of the listed tags. The broker checks the
ConsumeQueue's tag hash (:func:`protocol.message.tag_hash`) first where it has one and confirms
on the record, so two tags with the same hash never mix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from protocol.message import DISPATCH_HEAD, HEAD_SIZE, decode_record, read_tail, tag_hash

__all__ = [
    "MAX_EXPRESSION_CHARS",
    "FilterError",
    "TagFilter",
    "filter_records",
    "parse_tag_expression",
]

MAX_EXPRESSION_CHARS: Final = 1024


class FilterError(ValueError):
    """A tag expression that cannot be parsed (the message says why)."""


@dataclass(frozen=True, slots=True)
class TagFilter:
    tags: frozenset[str]
    hashes: frozenset[int]

    def matches(self, tags: str) -> bool:
        return tags in self.tags

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


def filter_records(body: bytes, tag_filter: TagFilter) -> tuple[bytes, int]:
    """The records of ``body`` (back to back, as a pull reads them) whose tags match, and how
    many: the tag hash in each record's tail first, the tags themselves to confirm."""
    kept: list[bytes] = []
    pos = 0
    while pos < len(body):
        size, _m, _c, _q, _o, _p, _t, blen = DISPATCH_HEAD.unpack_from(body, pos)
        _topic, hash_code = read_tail(body[pos + HEAD_SIZE + blen : pos + size])
        if tag_filter.may_match(hash_code):
            raw = body[pos : pos + size]
            if tag_filter.matches(decode_record(raw).tags):
                kept.append(raw)
        pos += size
    return b"".join(kept), len(kept)
