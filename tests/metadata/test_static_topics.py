"""Static topics in the metadata state machine: create, the two-step re-map, refusals that change
nothing, the event codec and the snapshot (version 4, older versions still read)."""

from __future__ import annotations

import msgpack
import pytest

from controller.metadata import (
    AddQueueItem,
    CreateStaticTopic,
    EventDecodeError,
    ReplicasInfoManager,
    SealQueueItem,
    SnapshotError,
    decode_event,
    encode_event,
)
from controller.metadata.static_topic import to_physical
from protocol.codes import ResponseCode as RC
from tests.metadata.support import commit, register_group, two_groups


def test_create_spreads_logical_queues_over_the_groups_with_a_master() -> None:
    m = two_groups()
    register_group(m, 1, "broker-c")  # no master: not placed on
    d = commit(m, m.create_static_topic("Orders", 5))
    assert d.code == RC.SUCCESS, d.remark
    mapping = m.static_topic("Orders")
    assert mapping is not None and len(mapping) == 5
    assert [(q[0].broker_name, q[0].physical_queue) for q in mapping] == [
        ("broker-a", 0),
        ("broker-b", 0),
        ("broker-a", 1),
        ("broker-b", 1),
        ("broker-a", 2),
    ]
    assert all(q[0].logical_start == 0 and q[0].logical_end is None for q in mapping)
    # The physical queues exist as an ordinary topic on each group, for its brokers to hold.
    assert m.topic_queues("Orders") == {"broker-a": 3, "broker-b": 2}
    # A retry answers the same mapping and appends nothing.
    again = m.create_static_topic("Orders", 5)
    assert again.ok and again.events == () and again.response == mapping


def test_create_refusals_change_nothing() -> None:
    m = two_groups()
    assert commit(m, m.update_topic(None, "broker-a", "Plain", 4)).ok
    before = m.snapshot()
    for args, code, text in [
        (("Plain", 4), RC.BAD_REQUEST, "exists as an ordinary topic on broker-a"),
        (("bad name!", 4), RC.CONTROLLER_INVALID_REQUEST, "topic may hold"),
        (("T", 0), RC.CONTROLLER_INVALID_REQUEST, "queues must be in"),
        (("T", 4, ["broker-z"]), RC.CONTROLLER_BROKER_METADATA_NOT_EXIST, "broker-z"),
    ]:
        d = m.create_static_topic(*args)  # type: ignore[arg-type]
        assert d.code == code and text in d.remark and d.events == (), (args, d)
    assert m.snapshot() == before
    assert commit(m, m.create_static_topic("T", 2, ["broker-b"])).ok
    other = m.create_static_topic("T", 3)
    assert other.code == RC.BAD_REQUEST and "already exists with 2 queues" in other.remark
    ordinary = m.update_topic(None, "broker-a", "T", 4)
    assert ordinary.code == RC.BAD_REQUEST and "is static" in ordinary.remark
    # The controllers' own push of the physical queues comes back from a controller-mode broker
    # before it creates them: accepted, as it changes nothing. Any other count is refused.
    same = m.update_topic(None, "broker-b", "T", 2)
    assert same.ok and same.events == () and same.response is not None
    other_group = m.update_topic(None, "broker-a", "T", 2)
    assert other_group.code == RC.BAD_REQUEST and "is static" in other_group.remark
    grow = m.update_topic(None, "broker-b", "T", 3)
    assert grow.code == RC.BAD_REQUEST and "is static" in grow.remark
    empty = ReplicasInfoManager()
    d = empty.create_static_topic("T", 2)
    assert d.code == RC.CONTROLLER_BROKER_METADATA_NOT_EXIST


def test_two_step_remap_moves_a_queue_and_keeps_offsets_continuous() -> None:
    m = two_groups()
    assert commit(m, m.create_static_topic("Orders", 2, ["broker-a"])).ok
    seal = commit(m, m.seal_queue_item("Orders", 1, 40, "broker-b"))
    assert seal.ok and seal.response == 40
    # Between the steps: a move is in progress, no second seal.
    twice = m.seal_queue_item("Orders", 1, 50, "broker-b")
    assert twice.code == RC.BAD_REQUEST and "in progress" in twice.remark
    add = commit(m, m.add_queue_item("Orders", 1, "broker-b"))
    assert add.ok, add.remark
    mapping = m.static_topic("Orders")
    assert mapping is not None
    old, new = mapping[1]
    assert (old.broker_name, old.logical_end) == ("broker-a", 40)
    assert (new.broker_name, new.physical_queue, new.logical_start, new.generation) == (
        "broker-b",
        0,
        40,
        1,
    )
    assert to_physical(mapping[1], 45) == (new, 5)
    assert m.topic_queues("Orders") == {"broker-a": 2, "broker-b": 1}
    assert mapping[0] == m.static_topic("Orders")[0]  # type: ignore[index]
    # Back to broker-a: a fresh physical queue there, never one that holds older data.
    assert commit(m, m.seal_queue_item("Orders", 1, 7, "broker-a")).ok
    assert commit(m, m.add_queue_item("Orders", 1, "broker-a")).ok
    back = m.static_topic("Orders")[1][-1]  # type: ignore[index]
    assert (back.broker_name, back.physical_queue, back.logical_start) == ("broker-a", 2, 47)


def test_remap_refusals_change_nothing() -> None:
    m = two_groups()
    assert commit(m, m.create_static_topic("Orders", 2, ["broker-a"])).ok
    before = m.snapshot()
    for args, code, text in [
        (("Orders", 0, 5, "broker-z"), RC.BAD_REQUEST, "broker group broker-z does not exist"),
        (("Orders", 0, 5, "broker-a"), RC.BAD_REQUEST, "already on broker group broker-a"),
        (("Orders", 2, 5, "broker-b"), RC.CONTROLLER_INVALID_REQUEST, "queues 0 to 1"),
        (("Nope", 0, 5, "broker-b"), RC.TOPIC_NOT_EXIST, "does not exist"),
        (("Orders", 0, -1, "broker-b"), RC.BAD_REQUEST, "physical max offset"),
    ]:
        d = m.seal_queue_item(*args)
        assert d.code == code and text in d.remark and d.events == (), (args, d)
    no_move = m.add_queue_item("Orders", 0, "broker-b")
    assert no_move.code == RC.BAD_REQUEST and "no move in progress" in no_move.remark
    assert m.snapshot() == before


def test_a_stale_seal_is_rejected_identically_on_apply() -> None:
    m = two_groups()
    assert commit(m, m.create_static_topic("Orders", 1, ["broker-a"])).ok
    first = m.seal_queue_item("Orders", 0, 10, "broker-b")
    racing = m.seal_queue_item("Orders", 0, 12, "broker-b")  # decided on the same state
    assert commit(m, first).ok
    late = commit(m, racing)
    assert late.code == RC.BAD_REQUEST and "in progress" in late.remark
    assert m.static_topic("Orders")[0][0].logical_end == 10  # type: ignore[index]
    # An item for a group that vanished before it committed changes nothing either.
    event = AddQueueItem(
        topic="Orders",
        queue_id=0,
        generation=1,
        broker_name="broker-gone",
        physical_queue=0,
        physical_start=0,
    )
    assert m.apply(event).code == RC.CONTROLLER_BROKER_METADATA_NOT_EXIST
    assert len(m.static_topic("Orders")[0]) == 1  # type: ignore[index]


def test_events_round_trip_and_malformed_ones_are_refused() -> None:
    events = [
        CreateStaticTopic(topic="T", placements=(("broker-a", 0), ("broker-b", 0))),
        SealQueueItem(topic="T", queue_id=1, generation=0, logical_end=99),
        AddQueueItem(
            topic="T",
            queue_id=1,
            generation=1,
            broker_name="broker-a",
            physical_queue=1,
            physical_start=0,
        ),
    ]
    for ev in events:
        assert decode_event(encode_event(ev)) == ev
    for bad in [
        [10, "T", [["broker-a", 0], ["broker-a", 0]]],
        [10, "T", []],
        [10, "T", [["broker-a", 1024]]],
        [11, "T", 0, 0],
        [12, "T", 0, 0, "broker-a", 0, 0],
        [12, "T", 0, 1, "broker-a", 0, -1],
    ]:
        with pytest.raises(EventDecodeError):
            decode_event(msgpack.packb(bad))


def test_static_topics_survive_a_snapshot_as_version_4_and_older_versions_still_read() -> None:
    m = two_groups()
    assert commit(m, m.update_topic(None, "broker-a", "Plain", 2)).ok
    v2 = m.snapshot()
    assert msgpack.unpackb(v2)[1] == 2  # no static topic: written as before
    assert commit(m, m.create_static_topic("Orders", 3)).ok
    assert commit(m, m.seal_queue_item("Orders", 0, 5, "broker-b")).ok
    assert commit(m, m.add_queue_item("Orders", 0, "broker-b")).ok
    data = m.snapshot()
    assert msgpack.unpackb(data)[1] == 4
    restored = ReplicasInfoManager.from_snapshot(data)
    assert restored.static_topic("Orders") == m.static_topic("Orders")
    assert restored.snapshot() == data
    old = ReplicasInfoManager.from_snapshot(v2)
    assert old.static_topic("Orders") is None and old.topic_queues("Plain") == {"broker-a": 2}
    # A snapshot whose items leave a gap is refused and the state left alone.
    doc = msgpack.unpackb(data)
    doc[4][0][1][0][1][2] = 6  # the second item of queue 0 starts past the seal at 5
    with pytest.raises(SnapshotError, match="not where the previous one ends"):
        restored.restore(msgpack.packb(doc))
    assert restored.snapshot() == data
