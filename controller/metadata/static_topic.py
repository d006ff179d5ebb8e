"""Static topics: the re-map steps the controllers' state machine applies to a logical queue.

The model (mapping items, their invariants) and the translation between logical and physical
offsets live in :mod:`protocol.static_topic`, which clients and the pipeline read with too; this
module re-exports them.

A re-map is two events: seal the newest item at the physical max offset the group reports
(:func:`seal_end`), then append the item on the target group starting at that logical offset
(:func:`check_new_item`). Between them the queue has a move in progress and takes no other seal.

Plain functions on frozen values: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace

from protocol.static_topic import (
    MAX_OFFSET,
    MAX_PHYSICAL_QUEUES,
    LogicalQueue,
    MappingError,
    MappingItem,
    check_offset,
    newest,
    queue_problems,
    to_logical,
    to_physical,
)

__all__ = [
    "MAX_OFFSET",
    "MAX_PHYSICAL_QUEUES",
    "LogicalQueue",
    "MappingError",
    "MappingItem",
    "appended",
    "check_new_item",
    "check_offset",
    "check_target",
    "first_item",
    "move_in_progress",
    "newest",
    "queue_problems",
    "seal_end",
    "sealed",
    "to_logical",
    "to_physical",
    "without_oldest",
]


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


def move_in_progress(items: Sequence[MappingItem]) -> bool:
    """The newest item is sealed and its successor not appended yet."""
    return newest(items).sealed


def seal_end(items: Sequence[MappingItem], generation: int, physical_max: int) -> int:
    """Step 1 of a re-map: the logical end of the newest item sealed at ``physical_max`` (its
    group's max offset of the physical queue). MappingError when the item is not the newest,
    is sealed already (a move in progress) or the offset is before its start."""
    check_offset("physical max offset", physical_max)
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


def without_oldest(items: Sequence[MappingItem], generation: int) -> LogicalQueue:
    """The queue with its oldest item, of ``generation``, dropped (retention deleted its data).
    MappingError when the oldest item is another generation or the only (the newest) one: a
    queue always keeps its newest item, and a sealed one is never reopened."""
    oldest = items[0]
    if oldest.generation != generation:
        raise MappingError(
            f"generation {generation} is not the oldest item (generation {oldest.generation})"
        )
    if len(items) == 1:
        raise MappingError("the newest item is never dropped")
    return tuple(items[1:])
