"""Static topics' mapping model: logical queues as sequences of mapping items, and the pure
translation between logical offsets and (item, physical offset) that controllers, clients and
the pipeline share.

A static topic has N logical queues. Each logical queue is a sequence of mapping items, oldest
first; an item says "logical offsets from ``logical_start`` on live in physical queue
``physical_queue`` of broker group ``broker_name``, where logical ``logical_start`` is physical
``physical_start``". Every item but the newest is sealed at ``logical_end`` (exclusive); the
newest is open (``logical_end`` None) or, while a re-map is between its two steps, sealed too.

Invariants of one logical queue (:func:`queue_problems`):

- generations ascend by one from the first; the item of generation 0 starts at logical 0 (an
  older item whose data retention deleted is dropped, so the first remaining one may start
  later: at the dropped one's end);
- each item starts where the previous one was sealed (no gap, no overlap);
- every item but the newest is sealed.

So the mapped logical range is [first.logical_start, newest.logical_end) or
[first.logical_start, ∞), and translation (:func:`to_physical`, :func:`to_logical`) is a
bijection between it and the union of the items' physical ranges. A reader below the first
item's start (its position was in a dropped item) goes on from that start (:func:`first_offset`).

Reading (docs/static-topics.md, "Logical reads"): a reader at logical offset ``L`` pulls the
item :func:`read_at` names, from the physical offset it gives, never past a sealed item's
physical end; the positions a consumer group commits for a consumed logical offset are physical
offsets on every item (:func:`commit_points`: those it passed at their end, the one holding it,
newer ones at their start), and the logical offset it resumes from is read back from them
(:func:`resume_offset`). Every physical queue of a static topic belongs to exactly one item, so
these positions never collide.

Plain functions on frozen values: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, Final

MAX_OFFSET: Final = 2**63 - 1
MAX_PHYSICAL_QUEUES: Final = 1024


class MappingError(ValueError):
    """A translation outside the mapped range, or a re-map step that may not happen now."""


def check_offset(what: str, value: object) -> int:
    if type(value) is not int:
        raise TypeError(f"{what} must be an integer, not {type(value).__name__}")
    if not 0 <= value <= MAX_OFFSET:
        raise ValueError(f"{what} must be in [0, {MAX_OFFSET}], not {value}")
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class MappingItem:
    """One stretch of a logical queue on one physical queue of one broker group."""

    broker_name: str
    physical_queue: int
    logical_start: int
    physical_start: int
    generation: int
    logical_end: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.broker_name, str) or not self.broker_name:
            raise ValueError("broker_name must be a non-empty string")
        if type(self.physical_queue) is not int or not (
            0 <= self.physical_queue < MAX_PHYSICAL_QUEUES
        ):
            raise ValueError(f"physical_queue must be in [0, {MAX_PHYSICAL_QUEUES})")
        check_offset("logical_start", self.logical_start)
        check_offset("physical_start", self.physical_start)
        check_offset("generation", self.generation)
        if self.logical_end is not None:
            check_offset("logical_end", self.logical_end)
            if self.logical_end < self.logical_start:
                raise ValueError(
                    f"logical_end {self.logical_end} is before logical_start {self.logical_start}"
                )

    @property
    def sealed(self) -> bool:
        return self.logical_end is not None

    def covers(self, logical: int) -> bool:
        """Whether logical offset ``logical`` lives in this item."""
        return self.logical_start <= logical and (
            self.logical_end is None or logical < self.logical_end
        )

    def physical_end(self) -> int | None:
        """The first physical offset past this item (None while open)."""
        if self.logical_end is None:
            return None
        return self.physical_start + (self.logical_end - self.logical_start)


LogicalQueue = tuple[MappingItem, ...]


def queue_problems(items: Sequence[MappingItem]) -> list[str]:
    """Broken invariants of one logical queue; [] when it is sound."""
    if not items:
        return ["a logical queue has at least one item"]
    problems: list[str] = []
    if items[0].generation == 0 and items[0].logical_start != 0:
        problems.append("the item of generation 0 must start at logical offset 0")
    for before, after in pairwise(items):
        if before.logical_end is None:
            problems.append(f"item of generation {before.generation} is not the newest: sealed")
        elif after.logical_start != before.logical_end:
            problems.append(
                f"item of generation {after.generation} starts at {after.logical_start}, "
                f"not where the previous one ends ({before.logical_end})"
            )
        if after.generation != before.generation + 1:
            problems.append("generations must ascend by one")
    return problems


def newest(items: Sequence[MappingItem]) -> MappingItem:
    return items[-1]


def first_offset(items: Sequence[MappingItem]) -> int:
    """The first mapped logical offset: 0, or later once older items were dropped."""
    return items[0].logical_start


def to_physical(items: Sequence[MappingItem], logical: int) -> tuple[MappingItem, int]:
    """The item holding logical offset ``logical`` and the physical offset it has there."""
    if type(logical) is not int or logical < 0:
        raise MappingError(f"logical offset {logical!r} is not mapped")
    for item in reversed(items):
        if item.covers(logical):
            return item, item.physical_start + (logical - item.logical_start)
        if item.logical_start <= logical:
            break
    raise MappingError(f"logical offset {logical} is not mapped")


def to_logical(items: Sequence[MappingItem], generation: int, physical: int) -> int:
    """The logical offset of physical offset ``physical`` in the item of ``generation``."""
    for item in items:
        if item.generation == generation:
            logical = item.logical_start + (physical - item.physical_start)
            if physical < item.physical_start or not item.covers(logical):
                raise MappingError(
                    f"physical offset {physical} is outside the item of generation {generation}"
                )
            return logical
    raise MappingError(f"no item of generation {generation}")


def logical_of(item: MappingItem, physical: int) -> int:
    """The logical offset of physical offset ``physical`` of ``item``, clamped to the item's
    range (a physical offset before its start is its start; one at or past a sealed item's
    physical end is its logical end)."""
    logical = item.logical_start + max(physical - item.physical_start, 0)
    if item.logical_end is not None and logical > item.logical_end:
        return item.logical_end
    return logical


def read_at(items: Sequence[MappingItem], logical: int) -> tuple[MappingItem, int] | None:
    """Where a reader at ``logical`` pulls: the item holding it and the physical offset there.
    None when ``logical`` is the end of a sealed newest item (a move in progress: the next item
    is not known yet, so there is nothing to read until it is). MappingError past that end or
    for a negative offset."""
    last = newest(items)
    if last.logical_end is not None and logical == last.logical_end:
        return None
    return to_physical(items, logical)


def commit_points(items: Sequence[MappingItem], logical: int) -> list[tuple[MappingItem, int]]:
    """The physical offsets that record "every message below logical ``logical`` is consumed":
    each item gets ``logical`` translated there, clamped to the item: its physical end when it
    ends before ``logical``, its physical start when it starts after (so a group whose position
    is in an item that is later dropped still has one on the next). Newest item first."""
    points = []
    for item in reversed(items):
        end = max(logical, item.logical_start)
        if item.logical_end is not None:
            end = min(end, item.logical_end)
        points.append((item, item.physical_start + (end - item.logical_start)))
    return points


def holding_item(items: Sequence[MappingItem], logical: int) -> MappingItem:
    """Of the items :func:`commit_points` writes for ``logical``, the one that holds it: the
    newest that starts at or before it (the first item for an offset before every item; the
    newest for one past every item). A reset tells the group's members through this item's
    master, after every other item's offset is written."""
    for item in reversed(items):
        if item.logical_start <= logical:
            return item
    return items[0]


def resume_offset(items: Sequence[MappingItem], committed: Mapping[int, int]) -> int | None:
    """The logical offset a group resumes from, given its committed physical offsets in
    ``committed`` (generation -> offset, those it has; each clamped to its item): the newest
    item's whose offset is past the item's start, else the oldest item's that has one (a
    position at an item's start, or on the first remaining item after older ones were
    dropped); None when no item has one. Reading newest first, the first offset past its
    item's start decides: the older items need not be asked."""
    oldest: int | None = None
    for item in reversed(items):
        physical = committed.get(item.generation)
        if physical is None:
            continue
        logical = logical_of(item, physical)
        if logical > item.logical_start:
            return logical
        oldest = logical
    return oldest


def logical_max(items: Sequence[MappingItem], physical_max: int) -> int:
    """The logical max offset (one past the last message) of a queue whose newest item's
    physical queue has max offset ``physical_max``."""
    return logical_of(newest(items), physical_max)


def physical_ranges(
    items: Sequence[MappingItem], start: int, end: int
) -> list[tuple[MappingItem, int, int]]:
    """The logical range [``start``, ``end``) as physical ranges (item, first, end exclusive),
    oldest item first, leaving out items it does not reach. A range below the queue's logical
    max translates the same under every later mapping (a re-map seals at or past that max)."""
    out = []
    for item in items:
        lo = max(start, item.logical_start)
        hi = end if item.logical_end is None else min(end, item.logical_end)
        if lo < hi:
            delta = item.physical_start - item.logical_start
            out.append((item, lo + delta, hi + delta))
    return out


def item_doc(item: MappingItem) -> dict[str, Any]:
    """An item on the wire (routes, GET_STATIC_TOPIC_MAPPING), docs/protocol.md."""
    return {
        "brokerName": item.broker_name,
        "physicalQueue": item.physical_queue,
        "logicalStart": item.logical_start,
        "physicalStart": item.physical_start,
        "generation": item.generation,
        "logicalEnd": item.logical_end,
    }


def parse_queue(docs: object) -> LogicalQueue:
    """A logical queue's items from their wire documents (:func:`item_doc`), oldest first.
    ValueError when a document is malformed or the items break the invariants."""
    if not isinstance(docs, list | tuple) or not docs:
        raise ValueError("a logical queue's items must be a non-empty list")
    items = []
    for doc in docs:
        if not isinstance(doc, dict):
            raise ValueError(f"a mapping item must be a map, not {type(doc).__name__}")
        try:
            items.append(
                MappingItem(
                    broker_name=doc["brokerName"],
                    physical_queue=doc["physicalQueue"],
                    logical_start=doc["logicalStart"],
                    physical_start=doc["physicalStart"],
                    generation=doc["generation"],
                    logical_end=doc.get("logicalEnd"),
                )
            )
        except KeyError as exc:
            raise ValueError(f"a mapping item has no {exc.args[0]}") from None
        except TypeError as exc:
            raise ValueError(str(exc)) from None
    problems = queue_problems(items)
    if problems:
        raise ValueError("; ".join(problems))
    return tuple(items)
