"""Re-mapping a static topic queue in one Raft entry (REMAP_STATIC_TOPIC's decisions): the plan
on applied state, the commit (UpdateTopic on the target, then RemapQueueItem), the refusals that
change nothing, and the compare-and-sets that make a raced or stale move change nothing."""

from __future__ import annotations

import msgpack
import pytest

from controller.metadata import (
    EventDecodeError,
    RemapQueueItem,
    ReplicasInfoManager,
    decode_event,
    encode_event,
)
from controller.metadata.static_topic import queue_problems, to_physical
from protocol.codes import ResponseCode as RC
from tests.metadata.support import commit, elect, register_group


def groups(*names: str, masterless: tuple[str, ...] = ()) -> ReplicasInfoManager:
    m = ReplicasInfoManager()
    for name in names:
        register_group(m, 2, name)
        if name not in masterless:
            elect(m, [1, 2], name)
    return m


def test_a_remap_seals_and_appends_in_one_entry_without_gap() -> None:
    m = groups("broker-a", "broker-b")
    assert commit(m, m.create_static_topic("Orders", 2, ["broker-a"])).ok
    plan = m.plan_remap("Orders", 1, "broker-b")
    assert plan.ok and plan.events == () and plan.response is not None
    assert (plan.response.source, plan.response.source_queue) == ("broker-a", 1)
    d = m.remap_queue(plan.response, 40)
    assert [type(e).__name__ for e in d.events] == ["UpdateTopic", "RemapQueueItem"]
    assert commit(m, d).ok
    mapping = m.static_topic("Orders")
    assert mapping is not None
    old, new = mapping[1]
    assert (old.broker_name, old.logical_end) == ("broker-a", 40)
    assert (new.broker_name, new.physical_queue, new.logical_start, new.physical_start) == (
        "broker-b",
        0,
        40,
        0,
    )
    assert new.generation == 1 and new.logical_end is None
    assert queue_problems(mapping[1]) == []
    assert to_physical(mapping[1], 39) == (old, 39)
    assert to_physical(mapping[1], 40) == (new, 0)
    assert m.topic_queues("Orders") == {"broker-a": 2, "broker-b": 1}
    # The group's brokers learn the sealed queue; the target has none.
    assert m.sealed_queues("broker-a") == [("Orders", 1)]
    assert m.sealed_queues("broker-b") == []
    # And back: a second move appends generation 2 on a fresh physical queue of broker-a.
    back = m.plan_remap("Orders", 1, "broker-a")
    assert back.response is not None
    assert commit(m, m.remap_queue(back.response, 7)).ok
    items = m.static_topic("Orders")[1]  # type: ignore[index]
    assert [(i.broker_name, i.physical_queue, i.logical_start) for i in items] == [
        ("broker-a", 1, 0),
        ("broker-b", 0, 40),
        ("broker-a", 2, 47),
    ]
    assert m.sealed_queues("broker-b") == [("Orders", 0)]
    # The state survives a snapshot.
    copy = ReplicasInfoManager()
    copy.restore(m.snapshot())
    assert copy.static_topic("Orders") == m.static_topic("Orders")


@pytest.mark.parametrize(
    ("topic", "queue", "target", "code", "text"),
    [
        ("Nope", 0, "broker-b", RC.TOPIC_NOT_EXIST, "static topic Nope does not exist"),
        ("Plain", 0, "broker-b", RC.TOPIC_NOT_EXIST, "Plain is not a static topic"),
        ("Orders", 2, "broker-b", RC.CONTROLLER_INVALID_REQUEST, "queues 0 to 1, not 2"),
        ("Orders", -1, "broker-b", RC.CONTROLLER_INVALID_REQUEST, "not -1"),
        ("Orders", 0, "broker-z", RC.CONTROLLER_BROKER_METADATA_NOT_EXIST, "broker-z does not"),
        ("Orders", 0, "broker-c", RC.CONTROLLER_MASTER_NOT_AVAILABLE, "broker-c has no master"),
        ("Orders", 0, "broker-a", RC.BAD_REQUEST, "already on broker group broker-a"),
        ("Orders", 0, "", RC.CONTROLLER_INVALID_REQUEST, "target broker group is required"),
    ],
)
def test_bad_remaps_are_refused_and_change_nothing(
    topic: str, queue: int, target: str, code: int, text: str
) -> None:
    m = groups("broker-a", "broker-b", "broker-c", masterless=("broker-c",))
    assert commit(m, m.create_static_topic("Orders", 2, ["broker-a"])).ok
    assert commit(m, m.update_topic(None, "broker-a", "Plain", 4)).ok
    before = m.snapshot()
    d = m.plan_remap(topic, queue, target)
    assert d.code == code and text in d.remark and d.events == (), d
    assert m.snapshot() == before


def test_a_move_in_progress_and_a_masterless_source_are_refused() -> None:
    m = groups("broker-a", "broker-b")
    assert commit(m, m.create_static_topic("Orders", 2, ["broker-a"])).ok
    assert commit(m, m.seal_queue_item("Orders", 0, 3, "broker-b")).ok  # the two-step form
    d = m.plan_remap("Orders", 0, "broker-b")
    assert d.code == RC.BAD_REQUEST and "a move of Orders queue 0 is in progress" in d.remark
    # broker-a loses its master: nothing can be fenced there.
    assert commit(m, m.elect_master("broker-a", alive_replicas={})).code != RC.SUCCESS
    info = m.replica_info("broker-a")
    assert info is not None and info.master_broker_id is None
    d = m.plan_remap("Orders", 1, "broker-b")
    assert d.code == RC.CONTROLLER_MASTER_NOT_AVAILABLE
    assert "broker-a (holding Orders queue 1) has no master" in d.remark


def test_a_new_source_master_since_the_fence_rejects_the_move_on_every_controller() -> None:
    m = groups("broker-a", "broker-b")
    assert commit(m, m.create_static_topic("Orders", 1, ["broker-a"])).ok
    plan = m.plan_remap("Orders", 0, "broker-b").response
    assert plan is not None
    d = m.remap_queue(plan, 10)
    # The fenced master died; broker 2 is elected before the move commits.
    elect(m, [2], "broker-a")
    settled = commit(m, d)
    assert settled.code == RC.CONTROLLER_FENCED_MASTER_EPOCH
    assert "master of broker-a changed during the move" in settled.remark
    items = m.static_topic("Orders")[0]  # type: ignore[index]
    assert len(items) == 1 and items[0].logical_end is None  # old mapping, still open
    assert m.sealed_queues("broker-a") == []


def test_two_moves_decided_on_one_state_apply_once() -> None:
    m = groups("broker-a", "broker-b", "broker-c")
    assert commit(m, m.create_static_topic("Orders", 1, ["broker-a"])).ok
    to_b = m.plan_remap("Orders", 0, "broker-b").response
    to_c = m.plan_remap("Orders", 0, "broker-c").response
    assert to_b is not None and to_c is not None
    first, second = m.remap_queue(to_b, 5), m.remap_queue(to_c, 6)
    assert commit(m, first).ok
    late = commit(m, second)
    assert late.code == RC.BAD_REQUEST and "not the newest item" in late.remark
    assert [i.broker_name for i in m.static_topic("Orders")[0]] == ["broker-a", "broker-b"]  # type: ignore[index]
    # Decided again on the new state: refused before anything is proposed.
    again = m.remap_queue(to_c, 6)
    assert again.code == RC.BAD_REQUEST and again.events == ()


def test_a_seal_below_the_item_start_is_refused() -> None:
    m = groups("broker-a", "broker-b")
    assert commit(m, m.create_static_topic("Orders", 1, ["broker-a"])).ok
    plan = m.plan_remap("Orders", 0, "broker-b").response
    assert plan is not None
    assert commit(m, m.remap_queue(plan, 9)).ok
    back = m.plan_remap("Orders", 0, "broker-a").response
    assert back is not None
    ok = m.remap_queue(back, 0)  # nothing written on broker-b: sealed where it starts
    assert commit(m, ok).ok
    items = m.static_topic("Orders")[0]  # type: ignore[index]
    assert [(i.logical_start, i.logical_end) for i in items] == [(0, 9), (9, 9), (9, None)]
    assert queue_problems(items) == []


def test_the_remap_event_round_trips_and_malformed_ones_are_refused() -> None:
    ev = RemapQueueItem(
        topic="T",
        queue_id=3,
        generation=2,
        logical_end=99,
        source_master_epoch=4,
        broker_name="broker-b",
        physical_queue=1,
    )
    assert decode_event(encode_event(ev)) == ev
    for bad in [
        [13, "T", 3, 2, 99, 4, "broker-b"],
        [13, "T", 3, 2, -1, 4, "broker-b", 1],
        [13, "T", 3, 2, 99, 4, "", 1],
        [13, "T", 3, 2, 99, 4, "broker-b", 1024],
        [13, "a b", 3, 2, 99, 4, "broker-b", 1],
    ]:
        with pytest.raises(EventDecodeError):
            decode_event(msgpack.packb(bad))
