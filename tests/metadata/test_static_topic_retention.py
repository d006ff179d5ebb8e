"""Retention of old static topic items, pure: DropQueueItem drops a logical queue's oldest item
(a compare-and-set on its generation, never the newest), survives the codec and snapshots, and
reads go on from the first remaining item; a group that items are mapped to is not cleaned.

The property test re-maps a queue a few times, drops a random number of its oldest items, and
checks the invariants hold, every offset from the first remaining item on translates as before,
and a group whose committed position was in a dropped item resumes at the first remaining
item's start.
"""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.metadata import (
    CleanBrokerData,
    DropQueueItem,
    EventDecodeError,
    ReplicasInfoManager,
    decode_event,
    encode_event,
)
from controller.metadata.static_topic import LogicalQueue, without_oldest
from protocol.codes import ResponseCode as RC
from protocol.static_topic import (
    MappingError,
    commit_points,
    first_offset,
    item_doc,
    parse_queue,
    queue_problems,
    read_at,
    resume_offset,
    to_physical,
)
from tests.hypothesis_profiles import examples
from tests.metadata.support import alive_none, commit, remapped_queues, two_groups


def moved_twice() -> ReplicasInfoManager:
    """Orders queue 0: broker-a [0, 5), broker-b [5, 9), broker-a (physical queue 1) from 9."""
    m = two_groups()
    assert commit(m, m.create_static_topic("Orders", 1, ["broker-a"])).ok
    assert commit(m, m.seal_queue_item("Orders", 0, 5, "broker-b")).ok
    assert commit(m, m.add_queue_item("Orders", 0, "broker-b")).ok
    assert commit(m, m.seal_queue_item("Orders", 0, 4, "broker-a")).ok
    assert commit(m, m.add_queue_item("Orders", 0, "broker-a")).ok
    return m


def queue0(m: ReplicasInfoManager) -> LogicalQueue:
    mapping = m.static_topic("Orders")
    assert mapping is not None
    return mapping[0]


def test_the_oldest_sealed_item_is_dropped_and_reads_start_after_it() -> None:
    m = moved_twice()
    items = queue0(m)
    assert [(i.broker_name, i.generation) for (i,) in [(x,) for x in items]] == [
        ("broker-a", 0),
        ("broker-b", 1),
        ("broker-a", 2),
    ]
    assert [(t, q, i.generation) for t, q, i in m.droppable_items()] == [("Orders", 0, 0)]
    d = commit(m, m.drop_queue_item("Orders", 0, 0))
    assert d.ok and d.response == items[0]
    kept = queue0(m)
    assert kept == items[1:] and queue_problems(kept) == []
    assert first_offset(kept) == 5
    # Translation of what remains is unchanged; below it nothing is mapped.
    assert to_physical(kept, 7) == to_physical(items, 7) == (items[1], 2)
    assert read_at(kept, 9) == (items[2], 0)
    with pytest.raises(MappingError):
        read_at(kept, 4)
    # The next oldest is droppable in its turn; the newest never is.
    assert commit(m, m.drop_queue_item("Orders", 0, 1)).ok
    assert queue0(m) == items[2:] and m.droppable_items() == []
    last = m.drop_queue_item("Orders", 0, 2)
    assert last.code == RC.BAD_REQUEST and "never dropped" in last.remark


def test_a_stale_or_bad_drop_changes_nothing_on_every_controller() -> None:
    m = moved_twice()
    before = m.snapshot()
    for args, code, text in [
        (("Orders", 0, 1), RC.BAD_REQUEST, "not the oldest item"),
        (("Nope", 0, 0), RC.TOPIC_NOT_EXIST, "does not exist"),
        (("Orders", 3, 0), RC.CONTROLLER_INVALID_REQUEST, "queues 0 to 0"),
    ]:
        d = m.drop_queue_item(*args)
        assert d.code == code and text in d.remark and d.events == (), (args, d)
    # Two decisions on the same state: the second one's event is rejected on apply.
    first, second = m.drop_queue_item("Orders", 0, 0), m.drop_queue_item("Orders", 0, 0)
    assert commit(m, first).ok
    after = m.snapshot()
    stale = m.apply(second.events[0])
    assert stale.code == RC.BAD_REQUEST and "not the oldest item" in stale.remark
    assert m.snapshot() == after != before


def test_the_drop_event_round_trips_and_survives_a_snapshot() -> None:
    event = DropQueueItem(topic="Orders", queue_id=3, generation=7)
    assert decode_event(encode_event(event)) == event
    for bad in ([14, "Orders", 3], [14, "Orders", 3, -1], [14, "bad name!", 0, 0]):
        with pytest.raises(EventDecodeError):
            decode_event(msgpack.packb(bad))
    m = moved_twice()
    assert commit(m, m.drop_queue_item("Orders", 0, 0)).ok
    data = m.snapshot()
    restored = ReplicasInfoManager.from_snapshot(data)
    assert restored.static_topic("Orders") == m.static_topic("Orders")
    assert restored.snapshot() == data
    # The first remaining item may start past 0; an item of generation 0 may not.
    docs = [item_doc(i) for i in queue0(m)]
    assert parse_queue(docs) == queue0(m)
    with pytest.raises(ValueError, match="generation 0 must start at logical offset 0"):
        parse_queue([{**docs[0], "generation": 0, "logicalStart": 5}])


def test_a_group_that_items_are_mapped_to_is_not_cleaned() -> None:
    m = moved_twice()
    ids = frozenset({1})
    for broker_ids in (None, ids):
        d = m.clean_broker_data(None, "broker-b", broker_ids, alive=alive_none,
                                clean_living_broker=True)  # fmt: skip
        assert d.code == RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA and d.events == ()
        assert "holds static topic items (Orders queue 0)" in d.remark
    # Applied anyway (decided before the items were there): rejected the same way.
    refused = m.apply(CleanBrokerData(broker_name="broker-b", broker_ids=None))
    assert refused.code == RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA
    assert m.replica_info("broker-b") is not None
    # Once retention dropped the items there, the group may go.
    assert commit(m, m.drop_queue_item("Orders", 0, 0)).ok
    assert commit(m, m.drop_queue_item("Orders", 0, 1)).ok
    gone = m.clean_broker_data(None, "broker-b", None, alive=alive_none, clean_living_broker=True)
    assert commit(m, gone).ok and m.replica_info("broker-b") is None


@st.composite
def dropped_queues(draw: st.DrawFn) -> tuple[LogicalQueue, int]:
    """A queue re-mapped a few times, and how many of its oldest items retention dropped."""
    items = draw(remapped_queues(min_sealed=1))
    return items, draw(st.integers(0, len(items) - 1))


@settings(max_examples=examples(200), deadline=None)
@given(dropped_queues())
def test_after_drops_the_rest_translates_as_before_and_lost_positions_resume_at_the_start(
    case: tuple[LogicalQueue, int],
) -> None:
    items, drops = case
    kept = items
    for _ in range(drops):
        kept = without_oldest(kept, kept[0].generation)
    assert queue_problems(kept) == []
    first = first_offset(kept)
    assert first == items[drops].logical_start
    for logical in range(first, first + 20):
        assert to_physical(kept, logical) == to_physical(items, logical)
    for consumed in range(first + 20):
        # What a group committed before the drops, as the remaining items' groups hold it.
        committed = {i.generation: p for i, p in commit_points(items, consumed)}
        remaining = {i.generation: committed[i.generation] for i in kept}
        assert resume_offset(kept, remaining) == max(consumed, first)
