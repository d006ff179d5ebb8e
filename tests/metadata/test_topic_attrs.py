"""A topic's permission and message type in the controllers' replicated state: UpdateTopic's
``perm`` and ``message_type``, decided, applied, encoded, snapshotted; events and snapshots
written before they existed read as the default (6, NORMAL)."""

from __future__ import annotations

import msgpack
import pytest

from controller.metadata import (
    EventDecodeError,
    ReplicasInfoManager,
    UpdateTopic,
    decode_event,
    encode_event,
)
from protocol.codes import ResponseCode as RC
from protocol.topic_attrs import MessageType, TopicAttrs
from tests.metadata.support import CLUSTER, GROUP, commit, group_with_master


def test_perm_and_type_are_decided_applied_and_kept_by_a_later_grow() -> None:
    manager = group_with_master()
    made = manager.update_topic(CLUSTER, GROUP, "T", 4, None, "FIFO")
    assert made.events == (
        UpdateTopic(broker_name=GROUP, topic="T", queues=4, message_type="FIFO"),
    )
    reply = commit(manager, made)
    assert reply.response is not None and reply.response.message_type == "FIFO"
    assert reply.response.perm == 6
    assert manager.topic_attrs(GROUP, "T") == TopicAttrs(6, MessageType.FIFO)
    # The same again appends nothing; a read-only permission is one event with perm alone.
    assert not manager.update_topic(CLUSTER, GROUP, "T", 4, None, "FIFO").events
    ro = manager.update_topic(CLUSTER, GROUP, "T", 4, 4, None)
    assert ro.events == (UpdateTopic(broker_name=GROUP, topic="T", queues=4, perm=4),)
    commit(manager, ro)
    # Growing the queues without naming them keeps both.
    commit(manager, manager.update_topic(CLUSTER, GROUP, "T", 8))
    assert manager.topic_attrs(GROUP, "T") == TopicAttrs(4, MessageType.FIFO)
    assert manager.group_topics(GROUP) == {"T": 8}
    # Back to the default: nothing kept for it.
    commit(manager, manager.update_topic(CLUSTER, GROUP, "T", 8, 6, "NORMAL"))
    assert manager.topic_attrs(GROUP, "T").default
    assert manager.invariant_violations() == []


def test_bad_perm_and_type_are_refused_when_decided_and_when_built() -> None:
    manager = group_with_master()
    bad_type = manager.update_topic(CLUSTER, GROUP, "T", 1, None, "ORDERED")
    assert bad_type.code == RC.CONTROLLER_INVALID_REQUEST
    assert "ORDERED" in (bad_type.remark or "")
    assert manager.update_topic(CLUSTER, GROUP, "T", 1, 8, None).code == (
        RC.CONTROLLER_INVALID_REQUEST
    )
    with pytest.raises(ValueError):
        UpdateTopic(broker_name=GROUP, topic="T", queues=1, message_type="fifo")
    with pytest.raises(ValueError):
        UpdateTopic(broker_name=GROUP, topic="T", queues=1, perm=-1)


def test_delete_forgets_the_attributes() -> None:
    manager = group_with_master()
    commit(manager, manager.update_topic(CLUSTER, GROUP, "T", 2, 2, "DELAY"))
    commit(manager, manager.delete_topic("T"))
    commit(manager, manager.update_topic(CLUSTER, GROUP, "T", 2))
    assert manager.topic_attrs(GROUP, "T").default


def test_event_encoding_round_trip_and_the_old_four_field_form() -> None:
    event = UpdateTopic(broker_name=GROUP, topic="T", queues=3, perm=4, message_type="MIXED")
    data = encode_event(event)
    assert msgpack.unpackb(data) == [6, GROUP, "T", 3, 4, "MIXED"]
    assert decode_event(data) == event
    plain = UpdateTopic(broker_name=GROUP, topic="T", queues=3)
    # Written as before the fields existed; such an event keeps the topic's attributes.
    assert msgpack.unpackb(encode_event(plain)) == [6, GROUP, "T", 3]
    assert decode_event(msgpack.packb([6, GROUP, "T", 3])) == plain
    one = UpdateTopic(broker_name=GROUP, topic="T", queues=3, message_type="FIFO")
    assert msgpack.unpackb(encode_event(one)) == [6, GROUP, "T", 3, None, "FIFO"]
    assert decode_event(encode_event(one)) == one
    for bad in ([6, GROUP, "T", 3, None, None], [6, GROUP, "T", 3, 4], [6, GROUP, "T", 3, 9, None]):
        with pytest.raises(EventDecodeError):
            decode_event(msgpack.packb(bad))


def test_snapshot_round_trip_keeps_them_and_an_old_snapshot_reads_the_default() -> None:
    manager = group_with_master()
    commit(manager, manager.update_topic(CLUSTER, GROUP, "A", 2))
    commit(manager, manager.update_topic(CLUSTER, GROUP, "B", 2, 4, "TRANSACTION"))
    data = manager.snapshot()
    restored = ReplicasInfoManager()
    restored.restore(data)
    assert restored.snapshot() == data
    assert restored.topic_attrs(GROUP, "B") == TopicAttrs(4, MessageType.TRANSACTION)
    assert restored.topic_attrs(GROUP, "A").default
    # The topics as written before: [topic, queues] only. B reads as 6, NORMAL.
    doc = msgpack.unpackb(data)
    topics = doc[2][0][8]
    assert topics == [["A", 2], ["B", 2, 4, "TRANSACTION"]]
    topics[1] = ["B", 2]
    old = ReplicasInfoManager()
    old.restore(msgpack.packb(doc))
    assert old.topic_attrs(GROUP, "B").default and old.group_topics(GROUP) == {"A": 2, "B": 2}
    # A written default, or a bad type, is not a snapshot.
    for bad in (["B", 2, 6, "NORMAL"], ["B", 2, 4, "ORDERED"], ["B", 2, 4]):
        topics[1] = bad
        with pytest.raises(ValueError):
            ReplicasInfoManager().restore(msgpack.packb(doc))
