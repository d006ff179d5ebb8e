"""Static topics: logical queues as sequences of mapping items, and offset translation.

A static topic has N logical queues. Each logical queue is a sequence of mapping items, oldest
first; an item says "logical offsets from ``logical_start`` on live in physical queue
``physical_queue`` of broker group ``broker_name``, where logical ``logical_start`` is physical
``physical_start``". Every item but the newest is sealed at ``logical_end`` (exclusive); the
newest is open (``logical_end`` None) or, while a re-map is between its two steps, sealed too.

Invariants of one logical queue (:func:`queue_problems`):

- the first item starts at logical 0, generations ascend by one from the first;
- each item starts where the previous one was sealed (no gap, no overlap);
- every item but the newest is sealed.

So the mapped logical range is [0, newest.logical_end) or [0, ∞), and translation
(:func:`to_physical`, :func:`to_logical`) is a bijection between it and the union of the items'
physical ranges.

A re-map is two events: seal the newest item at the physical max offset the group reports
(:func:`seal_end`), then append the item on the target group starting at that logical offset
(:func:`check_new_item`). Between them the queue has a move in progress and takes no other seal.

Plain functions on frozen values: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from itertools import pairwise
from typing import Final

MAX_OFFSET: Final = 2**63 - 1
MAX_PHYSICAL_QUEUES: Final = 1024


class MappingError(ValueError):
    """A translation outside the mapped range, or a re-map step that may not happen now."""


def _check_offset(what: str, value: object) -> int:
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
        _check_offset("logical_start", self.logical_start)
        _check_offset("physical_start", self.physical_start)
        _check_offset("generation", self.generation)
        if self.logical_end is not None:
            _check_offset("logical_end", self.logical_end)
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


def first_item(broker_name: str, physical_queue: int) -> LogicalQueue:
    """A new logical queue: one open item at logical 0 = physical 0, generation 0."""
    return (
        MappingItem(
            broker_name=broker_name,
            physical_queue=physical_queue,
            logical_start=0,
            physical_start=0,
            generation=0,
        ),
    )


def queue_problems(items: Sequence[MappingItem]) -> list[str]:
    """Broken invariants of one logical queue; [] when it is sound."""
    if not items:
        return ["a logical queue has at least one item"]
    problems: list[str] = []
    if items[0].logical_start != 0:
        problems.append("the first item must start at logical offset 0")
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


def move_in_progress(items: Sequence[MappingItem]) -> bool:
    """The newest item is sealed and its successor not appended yet."""
    return newest(items).sealed


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


def seal_end(items: Sequence[MappingItem], generation: int, physical_max: int) -> int:
    """Step 1 of a re-map: the logical end of the newest item sealed at ``physical_max`` (its
    group's max offset of the physical queue). MappingError when the item is not the newest,
    is sealed already (a move in progress) or the offset is before its start."""
    _check_offset("physical max offset", physical_max)
    item = newest(items)
    if item.generation != generation:
        raise MappingError(
            f"generation {generation} is not the newest item (generation {item.generation})"
        )
    if item.sealed:
        raise MappingError(f"a move of this queue is in progress (sealed at {item.logical_end})")
    if physical_max < item.physical_start:
        raise MappingError(
            f"physical max offset {physical_max} is before the item's start {item.physical_start}"
        )
    return item.logical_start + (physical_max - item.physical_start)


def sealed(items: Sequence[MappingItem], logical_end: int) -> LogicalQueue:
    """The queue with its newest item sealed at ``logical_end`` (checked by :func:`seal_end`)."""
    return (*items[:-1], replace(newest(items), logical_end=logical_end))


def check_target(items: Sequence[MappingItem], target: str, groups: Collection[str]) -> None:
    """A re-map's target: a known group, not the one the newest item is on."""
    if target not in groups:
        raise MappingError(f"broker group {target} does not exist")
    if target == newest(items).broker_name:
        raise MappingError(f"the queue is already on broker group {target}")


def check_new_item(items: Sequence[MappingItem], item: MappingItem) -> None:
    """Step 2 of a re-map: ``item`` may follow the sealed newest item."""
    last = newest(items)
    if last.logical_end is None:
        raise MappingError("no move in progress: the newest item is not sealed")
    if item.sealed:
        raise MappingError("a new item starts open")
    if item.generation != last.generation + 1:
        raise MappingError(
            f"the new item must be generation {last.generation + 1}, not {item.generation}"
        )
    if item.logical_start != last.logical_end:
        raise MappingError(
            f"the new item must start at logical {last.logical_end}, not {item.logical_start}"
        )
    if item.broker_name == last.broker_name:
        raise MappingError(f"the queue is already on broker group {item.broker_name}")


def appended(items: Sequence[MappingItem], item: MappingItem) -> LogicalQueue:
    return (*items, item)
