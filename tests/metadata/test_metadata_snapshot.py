"""Determinism: the same events give the same state on every controller, and snapshots are
canonical bytes that restore to the same state."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from hypothesis import event as label
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.metadata import (
    AlterSyncStateSet,
    ApplyBrokerId,
    CleanBrokerData,
    Decision,
    ElectMaster,
    Event,
    ReplicaInfo,
    ReplicasInfoManager,
    SnapshotError,
    UpdateBrokerAddress,
    UpdateTopic,
    decode_event,
    encode_event,
)
from controller.metadata.snapshot import (
    SNAPSHOT_MAGIC,
    SNAPSHOT_VERSION,
    SNAPSHOT_VERSION_NO_TOPICS,
)
from tests.hypothesis_profiles import examples
from tests.metadata.support import CLUSTER, alive_none, group_with_master, info, register_group

NAMES = ("broker-a", "broker-b")
small_ids = st.integers(1, 5)
small_epochs = st.integers(0, 6)
id_sets = st.frozensets(small_ids, min_size=1, max_size=4)

raw_events: st.SearchStrategy[Event] = st.one_of(
    st.builds(
        ApplyBrokerId,
        cluster=st.just(CLUSTER),
        broker_name=st.sampled_from(NAMES),
        broker_id=small_ids,
        register_code=st.sampled_from(("c1", "c2", "c3")),
        address=st.sampled_from(("", "h:1", "h:2")),
    ),
    st.builds(
        UpdateBrokerAddress,
        cluster=st.just(CLUSTER),
        broker_name=st.sampled_from(NAMES),
        broker_id=small_ids,
        address=st.sampled_from(("h:1", "h:2", "h:3")),
    ),
    st.builds(
        ElectMaster,
        broker_name=st.sampled_from(NAMES),
        new_master_broker_id=st.none() | small_ids,
        master_epoch=small_epochs,
        sync_state_set_epoch=small_epochs,
    ),
    st.builds(
        AlterSyncStateSet,
        broker_name=st.sampled_from(NAMES),
        master_broker_id=small_ids,
        master_epoch=small_epochs,
        sync_state_set_epoch=small_epochs,
        new_sync_state_set=id_sets,
    ),
    st.builds(CleanBrokerData, broker_name=st.sampled_from(NAMES), broker_ids=st.none() | id_sets),
    st.builds(
        UpdateTopic,
        broker_name=st.sampled_from(NAMES),
        topic=st.sampled_from(("T1", "T2")),
        queues=st.integers(1, 4),
    ),
)


def _decide(manager: ReplicasInfoManager, data: Any) -> Decision[Any] | Event:
    """One request of a random kind with random arguments, mostly close to the current state."""
    name = data.draw(st.sampled_from(NAMES))
    alive_ids = data.draw(st.frozensets(small_ids, max_size=5))

    def alive(broker_name: str, broker_id: int) -> bool:
        return broker_id in alive_ids

    current = manager.replica_info(name)
    kinds = ("next", "next", "apply", "register", "alter", "alter", "alter", "elect", "elect")
    kind = data.draw(st.sampled_from((*kinds, "clean", "raw")))
    if kind == "next":
        response = manager.get_next_broker_id(CLUSTER, name).response
        assert response is not None
        code = data.draw(st.sampled_from(("c1", "c2", "c3")))
        return manager.apply_broker_id(CLUSTER, name, response.next_broker_id, code, "h:0")
    if kind == "apply":
        code = data.draw(st.sampled_from(("c1", "c2", "c3")))
        return manager.apply_broker_id(CLUSTER, name, data.draw(small_ids), code)
    if kind == "register":
        addr = data.draw(st.sampled_from(("h:1", "h:2")))
        return manager.register_broker(CLUSTER, name, data.draw(small_ids), addr, alive=alive)
    if kind == "alter":
        master = current.master_broker_id if current and current.master_broker_id else 1
        master_epoch = current.master_epoch if current else 0
        ss_epoch = current.sync_state_set_epoch if current else 0
        if data.draw(st.integers(0, 3)) == 0:
            master_epoch = data.draw(small_epochs)
        registered = sorted(r.broker_id for r in current.replicas) if current else [1]
        new_set = data.draw(st.frozensets(st.sampled_from(registered))) | {master}
        if current and new_set == current.sync_state_set and len(registered) > 1:
            new_set = frozenset(registered)
        if data.draw(st.booleans()):
            alive_ids = alive_ids | new_set
        return manager.alter_sync_state_set(name, master, master_epoch, new_set, ss_epoch, alive)
    if kind == "elect":
        if current and data.draw(st.booleans()):
            alive_ids = alive_ids | {r.broker_id for r in current.replicas}
        view = {
            broker_id: info(data.draw(st.integers(0, 2)), data.draw(st.integers(0, 2)))
            for broker_id in alive_ids
        }
        return manager.elect_master(
            name,
            alive_replicas=view,
            designated_broker_id=data.draw(st.none() | st.none() | st.none() | small_ids),
            enable_elect_unclean_master=data.draw(st.booleans()),
        )
    if kind == "clean":
        ids = data.draw(st.none() | id_sets)
        return manager.clean_broker_data(
            None, name, ids, alive=alive, clean_living_broker=data.draw(st.booleans())
        )
    event: Event = data.draw(raw_events)
    return event


@settings(max_examples=examples(150), deadline=None)
@given(st.data())
def test_the_same_events_give_the_same_state_and_snapshots_round_trip(data: Any) -> None:
    leader = ReplicasInfoManager()  # validates, appends, applies
    follower = ReplicasInfoManager()  # applies what it receives through the codec
    log: list[bytes] = []
    epochs: dict[str, tuple[int, int]] = {}
    steps = data.draw(st.integers(1, 60))
    cut = data.draw(st.integers(0, steps))
    late: ReplicasInfoManager | None = None
    for step in range(steps):
        if step == cut:
            late = ReplicasInfoManager.from_snapshot(leader.snapshot())
            late_from = len(log)
        decided = _decide(leader, data)
        batch = decided.events if isinstance(decided, Decision) else (decided,)
        if isinstance(decided, Decision):
            label(f"decision: {decided.code.name}")
        for event in batch:
            encoded = encode_event(event)
            log.append(encoded)
            outcome = leader.apply(event)
            label(f"{type(event).__name__}: {outcome.code.name}")
            if isinstance(decided, Decision):
                # Validated against this very state, so it must apply.
                assert outcome.ok, (event, outcome)
            assert follower.apply(decode_event(encoded)) == outcome
            assert leader.snapshot() == follower.snapshot()
        assert leader.invariant_violations() == []
        if isinstance(decided, Decision) and isinstance(decided.response, ReplicaInfo):
            # An election's answer is the group as it now is.
            assert decided.response == leader.replica_info(decided.response.broker_name)
        for group in leader.replica_infos():
            previous = epochs.get(group.broker_name, (0, 0))
            assert (group.master_epoch, group.sync_state_set_epoch) >= previous
            assert group.master_epoch >= previous[0]
            assert group.sync_state_set_epoch >= previous[1]
            epochs[group.broker_name] = (group.master_epoch, group.sync_state_set_epoch)
        epochs = {k: v for k, v in epochs.items() if k in leader.broker_names()}
        snapshot = leader.snapshot()
        assert ReplicasInfoManager.from_snapshot(snapshot).snapshot() == snapshot
    if late is None:
        late = ReplicasInfoManager.from_snapshot(leader.snapshot())
        late_from = len(log)
    for encoded in log[late_from:]:
        late.apply(decode_event(encoded))
    assert late.snapshot() == leader.snapshot()
    assert late.replica_infos() == leader.replica_infos()


def test_snapshot_bytes_do_not_depend_on_the_order_groups_were_created() -> None:
    one = ReplicasInfoManager()
    register_group(one, 2, name="broker-a")
    register_group(one, 1, name="broker-b")
    two = ReplicasInfoManager()
    register_group(two, 1, name="broker-b")
    register_group(two, 2, name="broker-a")
    assert one.snapshot() == two.snapshot()


def test_an_empty_state_round_trips() -> None:
    empty = ReplicasInfoManager()
    assert ReplicasInfoManager.from_snapshot(empty.snapshot()).snapshot() == empty.snapshot()


def _packed(obj: Any) -> bytes:
    data: bytes = msgpack.packb(obj, use_bin_type=True)
    return data


GOOD_GROUP = ["broker-a", CLUSTER, 3, 1, 1, [1], 1, [[1, "h:1", "c1"], [2, "h:2", "c2"]]]


def _with(index: int, value: Any) -> bytes:
    group = list(GOOD_GROUP)
    group[index] = value
    return _packed([SNAPSHOT_MAGIC, SNAPSHOT_VERSION_NO_TOPICS, [group]])


def _with_topics(topics: Any) -> bytes:
    return _packed([SNAPSHOT_MAGIC, SNAPSHOT_VERSION, [[*GOOD_GROUP, topics]]])


def test_the_good_group_used_below_restores() -> None:
    manager = ReplicasInfoManager.from_snapshot(
        _packed([SNAPSHOT_MAGIC, SNAPSHOT_VERSION_NO_TOPICS, [GOOD_GROUP]])
    )
    assert manager.invariant_violations() == []


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xc1",
        _packed(None),
        _packed(["other", 1, []]),
        _packed([SNAPSHOT_MAGIC, 3, []]),
        _packed([SNAPSHOT_MAGIC, True, []]),
        _packed([SNAPSHOT_MAGIC, SNAPSHOT_VERSION, {}]),
        _packed([SNAPSHOT_MAGIC, SNAPSHOT_VERSION_NO_TOPICS, [GOOD_GROUP, GOOD_GROUP]]),  # dup
        _packed([SNAPSHOT_MAGIC, SNAPSHOT_VERSION, [GOOD_GROUP]]),  # version 2 needs topics
        _packed([SNAPSHOT_MAGIC, SNAPSHOT_VERSION_NO_TOPICS, [[*GOOD_GROUP, []]]]),
        _with_topics([["T", 0]]),
        _with_topics([["T", 1025]]),
        _with_topics([["bad name", 1]]),
        _with_topics([["B", 1], ["A", 1]]),  # not ascending
        _with_topics([["A", 1], ["A", 2]]),
        _with_topics([["A"]]),
        _with(0, ""),
        _with(2, 2),  # nextAssignBrokerId not past the ids
        _with(3, 3),  # master not registered
        _with(3, 2),  # master not in the SyncStateSet
        _with(4, -1),
        _with(5, [1, 9]),  # SyncStateSet member not registered
        _with(5, [1, 1]),
        _with(7, []),  # a group without brokers
        _with(7, [[2, "h", "c"], [1, "h", "c"]]),
        _with(7, [[1, "h"]]),
        _with(7, [[1, 5, "c"]]),
    ],
)
def test_invalid_snapshots_raise_snapshot_error_and_leave_the_state_alone(data: bytes) -> None:
    manager = group_with_master()
    before = manager.snapshot()
    with pytest.raises(SnapshotError):
        manager.restore(data)
    assert manager.snapshot() == before


@settings(max_examples=examples(200))
@given(st.binary(max_size=100))
def test_random_bytes_only_ever_raise_snapshot_error(data: bytes) -> None:
    manager = ReplicasInfoManager()
    try:
        manager.restore(data)
    except SnapshotError:
        pass


def test_a_restored_state_keeps_assigning_ids_where_it_left_off() -> None:
    manager = ReplicasInfoManager()
    register_group(manager, 3)
    clean = manager.clean_broker_data(CLUSTER, "broker-a", {3}, alive=alive_none)
    for event in clean.events:
        manager.apply(event)
    restored = ReplicasInfoManager.from_snapshot(manager.snapshot())
    response = restored.get_next_broker_id(CLUSTER, "broker-a").response
    assert response is not None and response.next_broker_id == 4


def test_a_state_without_topics_is_written_as_version_1() -> None:
    manager = group_with_master()
    assert msgpack.unpackb(manager.snapshot())[1] == SNAPSHOT_VERSION_NO_TOPICS


def test_topics_survive_a_snapshot_as_version_2() -> None:
    manager = group_with_master()
    assert manager.apply(UpdateTopic(broker_name="broker-a", topic="T", queues=4)).ok
    data = manager.snapshot()
    assert msgpack.unpackb(data)[1] == SNAPSHOT_VERSION
    restored = ReplicasInfoManager.from_snapshot(data)
    assert restored.topic_queues("T") == {"broker-a": 4}
    assert restored.snapshot() == data


def test_a_version_1_snapshot_written_before_topics_still_restores() -> None:
    manager = ReplicasInfoManager.from_snapshot(
        _packed([SNAPSHOT_MAGIC, SNAPSHOT_VERSION_NO_TOPICS, [GOOD_GROUP]])
    )
    assert manager.broker_names() == ["broker-a"]
    assert manager.group_topics("broker-a") == {}
