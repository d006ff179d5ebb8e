"""Tag expressions of subscriptions: ``*`` (everything) or ``TagA || TagB`` (pure parsing).

A message matches when its ``TAGS`` property is one of the listed tags. The broker checks the
ConsumeQueue's tag hash (:func:`protocol.message.tag_hash`, :attr:`TagFilter.hashes`) first,
without reading the record, and confirms on the record's tags (:func:`filter_records`), so two
tags with the same hash never mix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from protocol.message import DISPATCH_HEAD, record_tags, tag_hash

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
    many. Each record's tags are read from its tail (not a full decode): this is the
    confirmation of the ConsumeQueue's tag-hash check, where two tags may share a hash."""
    kept: list[bytes] = []
    tags = tag_filter.tags
    pos = 0
    while pos < len(body):
        size = DISPATCH_HEAD.unpack_from(body, pos)[0]
        if record_tags(body, pos) in tags:
            kept.append(body[pos : pos + size])
        pos += size
    if len(kept) == 1:
        return kept[0], 1
    return b"".join(kept), len(kept)
