"""Static topics' pure core: mapping items, offset translation across items, re-map checks.

Property tests drive random sequences of re-maps (seal at a random physical max offset, continue
on another group) and check after each step that the items tile the logical range with no gap or
overlap and that translation is a bijection between the mapped logical offsets and the items'
physical offsets.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.metadata.static_topic import (
    LogicalQueue,
    MappingError,
    MappingItem,
    appended,
    check_new_item,
    check_target,
    first_item,
    move_in_progress,
    newest,
    queue_problems,
    seal_end,
    sealed,
    to_logical,
    to_physical,
)
from tests.hypothesis_profiles import examples

GROUPS = ("broker-a", "broker-b", "broker-c")


def remap(items: LogicalQueue, physical_max: int, target: str, queue: int = 0) -> LogicalQueue:
    """Both steps of a re-map, through the checks a controller makes."""
    check_target(items, target, GROUPS)
    last = newest(items)
    end = seal_end(items, last.generation, physical_max)
    items = sealed(items, end)
    assert move_in_progress(items)
    item = MappingItem(
        broker_name=target,
        physical_queue=queue,
        logical_start=end,
        physical_start=0,
        generation=last.generation + 1,
    )
    check_new_item(items, item)
    return appended(items, item)


def test_a_new_queue_maps_logical_to_physical_one_to_one() -> None:
    items = first_item("broker-a", 3)
    assert to_physical(items, 0) == (items[0], 0)
    assert to_physical(items, 41) == (items[0], 41)
    assert to_logical(items, 0, 41) == 41
    assert not move_in_progress(items)
    with pytest.raises(MappingError):
        to_physical(items, -1)


def test_translation_crosses_items_at_the_seal() -> None:
    items = remap(first_item("broker-a", 0), 10, "broker-b", 2)
    old, new = items
    assert old.logical_end == 10 and old.physical_end() == 10
    assert to_physical(items, 9) == (old, 9)
    assert to_physical(items, 10) == (new, 0)
    assert to_physical(items, 15) == (new, 5)
    assert to_logical(items, 1, 5) == 15
    with pytest.raises(MappingError, match="outside"):
        to_logical(items, 0, 10)  # past the seal: not this item's any more
    with pytest.raises(MappingError, match="no item"):
        to_logical(items, 7, 0)


def test_remap_refusals() -> None:
    items = first_item("broker-a", 0)
    with pytest.raises(MappingError, match="does not exist"):
        check_target(items, "broker-z", GROUPS)
    with pytest.raises(MappingError, match="already on broker group broker-a"):
        check_target(items, "broker-a", GROUPS)
    with pytest.raises(MappingError, match="not the newest"):
        seal_end(items, 1, 5)
    items = (
        MappingItem(
            broker_name="broker-a",
            physical_queue=0,
            logical_start=0,
            physical_start=7,
            generation=0,
        ),
    )
    with pytest.raises(MappingError, match="before the item's start"):
        seal_end(items, 0, 6)
    half = sealed(items, seal_end(items, 0, 9))
    assert half[0].logical_end == 2
    with pytest.raises(MappingError, match="move of this queue is in progress"):
        seal_end(half, 0, 12)
    good = MappingItem(
        broker_name="broker-b", physical_queue=0, logical_start=2, physical_start=0, generation=1
    )
    for bad, why in [
        (replace(good, logical_start=3), "start at logical 2"),
        (replace(good, generation=2), "generation 1"),
        (replace(good, broker_name="broker-a"), "already on"),
        (replace(good, logical_end=9), "starts open"),
    ]:
        with pytest.raises(MappingError, match=why):
            check_new_item(half, bad)
    with pytest.raises(MappingError, match="no move in progress"):
        check_new_item(items, good)
    check_new_item(half, good)


def test_items_check_their_own_fields() -> None:
    with pytest.raises(ValueError, match="before logical_start"):
        MappingItem(
            broker_name="a",
            physical_queue=0,
            logical_start=5,
            physical_start=0,
            generation=0,
            logical_end=4,
        )
    with pytest.raises(ValueError, match="physical_queue"):
        MappingItem(
            broker_name="a", physical_queue=1024, logical_start=0, physical_start=0, generation=0
        )
    with pytest.raises(ValueError, match="broker_name"):
        MappingItem(
            broker_name="", physical_queue=0, logical_start=0, physical_start=0, generation=0
        )


# (physical max offset grown since the previous seal, target group index) per re-map
moves = st.lists(st.tuples(st.integers(0, 50), st.integers(0, 2)), max_size=8)


@settings(max_examples=examples(150), deadline=None)
@given(moves=moves)
def test_any_sequence_of_remaps_tiles_the_logical_range_and_translates_bijectively(
    moves: list[tuple[int, int]],
) -> None:
    items = first_item("broker-a", 0)
    written = 0  # messages written to the newest item so far
    for grown, target_index in moves:
        target = GROUPS[target_index]
        if target == newest(items).broker_name:
            with pytest.raises(MappingError):
                check_target(items, target, GROUPS)
            continue
        written = grown
        items = remap(items, newest(items).physical_start + written, target, len(items))
        assert queue_problems(items) == []
    assert queue_problems(items) == []
    # Every logical offset up to a horizon past the newest start maps to exactly one item.
    horizon = newest(items).logical_start + 20
    seen: set[tuple[int, int]] = set()
    for logical in range(horizon):
        item, physical = to_physical(items, logical)
        owners = [i for i in items if i.covers(logical)]
        assert owners == [item]  # no overlap, no gap
        assert to_logical(items, item.generation, physical) == logical
        assert (item.generation, physical) not in seen
        seen.add((item.generation, physical))
    # ...and every physical offset of a sealed item maps back into its own range.
    for item in items:
        end = item.physical_end()
        for physical in range(item.physical_start, end if end is not None else horizon):
            logical = to_logical(items, item.generation, physical)
            assert to_physical(items, logical) == (item, physical)
