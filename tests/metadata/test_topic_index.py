"""The metadata's topic index (issue 34): ``topic_queues`` reads the groups that have the topic,
not every group, and the index follows UpdateTopic, DeleteTopic, CleanBrokerData and restore.

Before it, a route lookup scanned every group for the topic: with 100 times the groups a lookup
cost 100 times as much (203 us a lookup among 2,000 groups against 2.4 us among 20). The test
counts the groups one lookup reads (the manager's group table, wrapped to count its reads): the
same one group among 20 and among 2,000; the times are printed, not asserted."""

from __future__ import annotations

import time

from controller.metadata import ApplyBrokerId, ReplicasInfoManager, encode_event
from controller.metadata.events import CleanBrokerData, DeleteTopic, UpdateTopic
from controller.state_machine import MetadataStateMachine
from tests.metadata.support import CountingDict


def with_groups(groups: int, topics_each: int = 1) -> MetadataStateMachine:
    sm = MetadataStateMachine()
    index = 0
    for g in range(groups):
        index += 1
        event = ApplyBrokerId(
            cluster="C", broker_name=f"g{g:05d}", broker_id=1, register_code=f"c{g}", address="a:1"
        )
        sm.apply(index, encode_event(event))
        for t in range(topics_each):
            index += 1
            sm.apply(
                index,
                encode_event(UpdateTopic(broker_name=f"g{g:05d}", topic=f"T{g}-{t}", queues=8)),
            )
    return sm


def groups_read(manager: ReplicasInfoManager, topic: str) -> int:
    """The groups one topic_queues(topic) reads."""
    counting = CountingDict(manager._groups)
    manager._groups = counting
    try:
        manager.topic_queues(topic)
        return counting.reads
    finally:
        manager._groups = dict(counting)


def per_lookup(manager: ReplicasInfoManager, topic: str) -> float:
    """Seconds per topic_queues(topic), the least of 5 runs of 200."""
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(200):
            manager.topic_queues(topic)
        best = min(best, (time.perf_counter() - t0) / 200)
    return best


def test_a_topic_lookup_costs_the_same_with_a_hundred_times_the_groups() -> None:
    small, large = with_groups(20).manager, with_groups(2000).manager
    print(
        f"topic_queues: {per_lookup(small, 'T3-0') * 1e6:.2f} us among 20 groups, "
        f"{per_lookup(large, 'T3-0') * 1e6:.2f} us among 2,000"
    )
    assert small.topic_queues("T3-0") == large.topic_queues("T3-0") == {"g00003": 8}
    # The one group that has the topic, whatever the groups: the scan read every group.
    read = (groups_read(small, "T3-0"), groups_read(large, "T3-0"))
    assert read == (1, 1), f"groups one lookup read among 20 and among 2,000: {read}"


def test_the_index_follows_creates_deletes_cleans_and_restores() -> None:
    sm = with_groups(4, topics_each=2)
    m = sm.manager
    index = 100

    def apply(event: object) -> None:
        nonlocal index
        index += 1
        sm.apply(index, encode_event(event))  # type: ignore[arg-type]
        assert m.invariant_violations() == []

    apply(UpdateTopic(broker_name="g00001", topic="T0-0", queues=4))  # a second group has it
    assert m.topic_queues("T0-0") == {"g00000": 8, "g00001": 4}
    apply(DeleteTopic(topic="T0-0"))
    assert m.topic_queues("T0-0") == {}
    apply(CleanBrokerData(broker_name="g00002"))  # the whole group
    assert m.topic_queues("T2-0") == {}
    apply(CleanBrokerData(broker_name="g00003", broker_ids=frozenset({1})))  # its only broker
    assert m.topic_queues("T3-1") == {}
    restored = ReplicasInfoManager.from_snapshot(m.snapshot())
    assert restored.invariant_violations() == []
    assert restored.topic_queues("T1-1") == {"g00001": 8}
    assert restored.topic_queues("T0-1") == {"g00000": 8}
