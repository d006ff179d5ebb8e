"""DeleteTopic in the controllers' replicated state (rmqctl deleteTopic): decided, applied on
every controller alike, refused without changing anything, and its one encoding."""

from __future__ import annotations

import msgpack
import pytest

from controller.metadata import DeleteTopic, EventDecodeError, decode_event, encode_event
from protocol.codes import ResponseCode as RC
from tests.metadata.support import CLUSTER, GROUP, commit, group_with_master, two_groups


def test_delete_forgets_the_topic_on_every_group_once_applied() -> None:
    m = two_groups()
    commit(m, m.update_topic(CLUSTER, "broker-a", "T", 4))
    commit(m, m.update_topic(CLUSTER, "broker-b", "T", 2))
    commit(m, m.update_topic(CLUSTER, "broker-a", "Other", 1))
    decision = m.delete_topic("T")
    assert decision.events == (DeleteTopic(topic="T"),)
    assert decision.response == {"broker-a": 4, "broker-b": 2}
    assert m.topic_queues("T") == {"broker-a": 4, "broker-b": 2}  # nothing before it applies
    assert commit(m, decision).ok
    assert m.topic_queues("T") == {}
    assert m.group_topics("broker-a") == {"Other": 1}


def test_a_recreated_topic_is_a_new_one() -> None:
    m = group_with_master()
    commit(m, m.update_topic(CLUSTER, GROUP, "T", 8))
    commit(m, m.delete_topic("T"))
    # Fewer queues than before: no "shrinking" refusal, the old topic is gone.
    assert commit(m, m.update_topic(CLUSTER, GROUP, "T", 2)).ok
    assert m.topic_queues("T") == {GROUP: 2}


def test_refusals_change_nothing() -> None:
    m = group_with_master()
    commit(m, m.update_topic(CLUSTER, GROUP, "T", 4))
    before = m.snapshot()
    unknown = m.delete_topic("Nope")
    assert unknown.code == RC.TOPIC_NOT_EXIST and not unknown.events
    assert "Nope does not exist" in unknown.remark
    for system in ("rmq_sys_REVIVE_LOG", "RMQ_SYS_TRANS_HALF_TOPIC", "TBW102"):
        refused = m.delete_topic(system)
        assert refused.code == RC.SYSTEM_RESOURCE and "system topic" in refused.remark
    for owned in ("%RETRY%g1", "%DLQ%g1"):
        refused = m.delete_topic(owned)
        assert refused.code == RC.SYSTEM_RESOURCE and "deleteSubGroup" in refused.remark
    assert m.delete_topic("a b").code == RC.CONTROLLER_INVALID_REQUEST
    assert m.snapshot() == before


def test_a_delete_decided_twice_applies_once_and_the_second_is_rejected_everywhere() -> None:
    """Two deletes decided against the same state: the second is rejected when applied, on
    every controller alike (it changes nothing)."""
    m = group_with_master()
    commit(m, m.update_topic(CLUSTER, GROUP, "T", 4))
    first, second = m.delete_topic("T"), m.delete_topic("T")
    assert commit(m, first).ok
    after = m.snapshot()
    late = commit(m, second)
    assert late.code == RC.TOPIC_NOT_EXIST and late.response is None
    assert m.snapshot() == after


def test_a_static_topic_loses_its_mapping_items() -> None:
    m = two_groups()
    assert commit(m, m.create_static_topic("S", 4)).ok
    assert m.static_topic("S") is not None
    assert commit(m, m.delete_topic("S")).ok
    assert m.static_topic("S") is None
    assert m.topic_queues("S") == {}
    # The same name may be created again, as an ordinary topic or a static one.
    assert commit(m, m.create_static_topic("S", 2)).ok


def test_the_state_after_a_delete_survives_a_snapshot() -> None:
    m = two_groups()
    commit(m, m.update_topic(CLUSTER, "broker-a", "T", 4))
    commit(m, m.create_static_topic("S", 2))
    commit(m, m.delete_topic("T"))
    commit(m, m.delete_topic("S"))
    restored = type(m).from_snapshot(m.snapshot())
    assert restored.snapshot() == m.snapshot()
    assert restored.topic_queues("T") == {} and restored.static_topic("S") is None


def test_the_event_has_one_encoding() -> None:
    event = DeleteTopic(topic="T-1")
    data = encode_event(event)
    assert data == bytes.fromhex("920fa3542d31")  # [15, "T-1"]
    assert data == msgpack.packb([15, "T-1"], use_bin_type=True)
    assert decode_event(data) == event
    assert encode_event(decode_event(data)) == data


@pytest.mark.parametrize(
    "fields",
    [[15], [15, "T", 1], [15, ""], [15, "a b"], [15, 7], [15, "T" * 128]],
)
def test_malformed_delete_events_raise_event_decode_error(fields: list[object]) -> None:
    with pytest.raises(EventDecodeError):
        decode_event(msgpack.packb(fields, use_bin_type=True))


def test_a_groups_own_topics_go_only_when_the_metadata_holds_them() -> None:
    m = group_with_master()
    commit(m, m.update_topic(CLUSTER, GROUP, "%DLQ%g1", 1))
    none = m.delete_group_topics(["%RETRY%g1"])
    assert none.ok and none.events == () and none.response == []
    both = m.delete_group_topics(["%RETRY%g1", "%DLQ%g1"])
    assert both.events == (DeleteTopic(topic="%DLQ%g1"),) and both.response == ["%DLQ%g1"]
    assert commit(m, both).ok
    assert m.topic_queues("%DLQ%g1") == {}
