"""Logical reads of static topics, pure: where a reader at a logical offset pulls, the
positions a group commits for a consumed logical offset and the offset it resumes from, and the
wire form of mapping items.

The property test re-maps a queue at random physical offsets, then reads the whole logical range
the way the SDK consumer does (pull the item :func:`read_at` names, stop at a sealed item's
physical end, translate back with :func:`logical_of`) and checks every logical offset comes once,
in order; and that committing any logical offset and resuming gives it back.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.static_topic import (
    LogicalQueue,
    MappingError,
    commit_points,
    holding_item,
    item_doc,
    logical_max,
    logical_of,
    parse_queue,
    physical_ranges,
    read_at,
    resume_offset,
)
from tests.hypothesis_profiles import examples
from tests.metadata.support import mapping_item, remapped_queues

MOVED: LogicalQueue = (
    mapping_item("broker-a", 1, 0, 0, 5),
    mapping_item("broker-b", 0, 5, 1, 12),
    mapping_item("broker-a", 2, 12, 2, None),
)


def test_read_at_names_the_item_and_physical_offset() -> None:
    assert read_at(MOVED, 0) == (MOVED[0], 0)
    assert read_at(MOVED, 4) == (MOVED[0], 4)
    assert read_at(MOVED, 5) == (MOVED[1], 0)
    assert read_at(MOVED, 11) == (MOVED[1], 6)
    assert read_at(MOVED, 12) == (MOVED[2], 0)
    assert read_at(MOVED, 1000) == (MOVED[2], 988)
    with pytest.raises(MappingError):
        read_at(MOVED, -1)


def test_a_move_in_progress_has_nothing_to_read_at_the_seal_and_nothing_past_it() -> None:
    moving = (mapping_item("broker-a", 0, 0, 0, 7),)
    assert read_at(moving, 6) == (moving[0], 6)
    assert read_at(moving, 7) is None
    with pytest.raises(MappingError):
        read_at(moving, 8)


def test_logical_of_clamps_to_the_item() -> None:
    old = mapping_item("broker-a", 0, 0, 0, 5, physical_start=10)
    assert logical_of(old, 12) == 2
    assert logical_of(old, 3) == 0  # before the item's start (retention moved the queue on)
    assert logical_of(old, 99) == 5  # past a sealed end (a message appended after the seal)
    assert logical_of(MOVED[2], 7) == 19


def test_commit_points_close_every_item_the_reader_passed() -> None:
    # Items it has not reached get their start: the group has a position there too.
    assert commit_points(MOVED, 3) == [(MOVED[2], 0), (MOVED[1], 0), (MOVED[0], 3)]
    assert commit_points(MOVED, 5) == [(MOVED[2], 0), (MOVED[1], 0), (MOVED[0], 5)]
    assert commit_points(MOVED, 14) == [(MOVED[2], 2), (MOVED[1], 7), (MOVED[0], 5)]


def test_the_item_holding_a_reset_is_the_one_whose_commit_point_is_inside_it() -> None:
    # A reset tells the members through this item's master, after the others' are written.
    assert holding_item(MOVED, 0) is MOVED[0]
    assert holding_item(MOVED, 4) is MOVED[0]
    assert holding_item(MOVED, 5) is MOVED[1]  # an item's start is the newer item's
    assert holding_item(MOVED, 12) is MOVED[2]
    assert holding_item(MOVED, 1000) is MOVED[2]
    assert holding_item(MOVED[1:], 2) is MOVED[1]  # before every item left: the first
    for logical in range(0, 20):
        holder = holding_item(MOVED, logical)
        physical = dict((i.generation, p) for i, p in commit_points(MOVED, logical))
        # Resuming from the commit points gives the offset back, and only the holder's
        # point can be strictly inside its item.
        assert resume_offset(MOVED, physical) == logical
        for i in MOVED:
            if i is not holder:
                assert physical[i.generation] in (i.physical_start, i.physical_end())


def test_resume_from_the_newest_item_with_a_committed_offset_past_its_start() -> None:
    assert resume_offset(MOVED, {}) is None
    assert resume_offset(MOVED, {0: 5}) == 5
    assert resume_offset(MOVED, {0: 5, 1: 3}) == 8
    assert resume_offset(MOVED, {0: 5, 1: 7, 2: 4}) == 16
    # An old item's offset past its end (a late message there) stops at the end.
    assert resume_offset(MOVED, {0: 9}) == 5
    # Newer items at their start: the item holding the offset decides.
    assert resume_offset(MOVED, {0: 3, 1: 0, 2: 0}) == 3
    assert resume_offset(MOVED, {0: 0, 1: 0, 2: 0}) == 0
    # Item 0 dropped (retention deleted it) while the group was in it: the first remaining
    # item's start.
    assert resume_offset(MOVED[1:], {1: 0, 2: 0}) == 5


def test_a_logical_range_splits_into_the_items_physical_ranges() -> None:
    assert physical_ranges(MOVED, 2, 4) == [(MOVED[0], 2, 4)]
    assert physical_ranges(MOVED, 3, 14) == [(MOVED[0], 3, 5), (MOVED[1], 0, 7), (MOVED[2], 0, 2)]
    assert physical_ranges(MOVED, 5, 5) == []
    shifted = (
        mapping_item("broker-a", 0, 0, 0, 4, physical_start=10),
        mapping_item("broker-b", 0, 4, 1, None),
    )
    assert physical_ranges(shifted, 1, 6) == [(shifted[0], 11, 14), (shifted[1], 0, 2)]


def test_logical_max_is_the_newest_items_max_translated() -> None:
    assert logical_max(MOVED, 0) == 12
    assert logical_max(MOVED, 30) == 42
    assert logical_max((mapping_item("broker-a", 0, 0, 0, 7),), 9) == 7


def test_items_round_trip_the_wire_and_bad_documents_are_refused() -> None:
    docs = [item_doc(i) for i in MOVED]
    assert parse_queue(docs) == MOVED
    with pytest.raises(ValueError, match="non-empty"):
        parse_queue([])
    with pytest.raises(ValueError, match="no generation"):
        parse_queue([{k: v for k, v in docs[0].items() if k != "generation"}])
    with pytest.raises(ValueError, match="not where the previous one ends"):
        parse_queue([docs[0], {**docs[1], "logicalStart": 6}])
    with pytest.raises(ValueError, match="physical_queue"):
        parse_queue([{**docs[0], "physicalQueue": "x"}])
    with pytest.raises(ValueError, match="map"):
        parse_queue([3])


@st.composite
def moved_queues(draw: st.DrawFn) -> tuple[LogicalQueue, int]:
    """A queue re-mapped a few times, and the newest item's physical max offset."""
    return draw(remapped_queues()), draw(st.integers(0, 6))


@settings(max_examples=examples(200), deadline=None)
@given(moved_queues())
def test_reading_a_moved_queue_yields_every_logical_offset_once_in_order(
    case: tuple[LogicalQueue, int],
) -> None:
    items, newest_max = case
    end = logical_max(items, newest_max)
    seen: list[int] = []
    logical = 0
    while logical < end:
        where = read_at(items, logical)
        assert where is not None
        it, physical = where
        # The broker holds physical offsets up to the item's end (the newest: its max).
        stop = it.physical_end()
        if stop is None:
            stop = newest_max
        batch = list(range(physical, stop))
        assert batch, "a reader never stalls inside the mapped range"
        seen.extend(logical_of(it, p) for p in batch)
        logical = logical_of(it, stop)
    assert seen == list(range(end))
    for consumed in range(end + 1):
        committed = {i.generation: p for i, p in commit_points(items, consumed)}
        assert resume_offset(items, committed) == consumed
