"""Topics in the controllers' replicated state: UpdateTopic decided, applied, read, cleaned."""

from __future__ import annotations

from controller.metadata import ReplicasInfoManager, UpdateTopic
from protocol.codes import ResponseCode as RC
from tests.metadata.support import CLUSTER, GROUP, alive_none, commit, group_with_master


def test_a_new_topic_is_one_event_and_answered_once_applied() -> None:
    manager = group_with_master()
    decision = manager.update_topic(CLUSTER, GROUP, "T", 4)
    assert decision.events == (UpdateTopic(broker_name=GROUP, topic="T", queues=4),)
    assert manager.topic_queues("T") == {}  # nothing changes before the event is applied
    reply = commit(manager, decision)
    assert reply.ok and reply.response is not None and reply.response.queues == 4
    assert manager.topic_queues("T") == {GROUP: 4}
    assert manager.group_topics(GROUP) == {"T": 4}


def test_an_unchanged_topic_appends_nothing_and_a_bigger_count_grows_it() -> None:
    manager = group_with_master()
    commit(manager, manager.update_topic(CLUSTER, GROUP, "T", 4))
    same = manager.update_topic(None, GROUP, "T", 4)
    assert same.ok and not same.events
    assert commit(manager, manager.update_topic(CLUSTER, GROUP, "T", 8)).ok
    assert manager.topic_queues("T") == {GROUP: 8}


def test_shrinking_is_refused_when_decided_and_when_applied() -> None:
    manager = group_with_master()
    commit(manager, manager.update_topic(CLUSTER, GROUP, "T", 8))
    assert manager.update_topic(CLUSTER, GROUP, "T", 4).code == RC.BAD_REQUEST
    outcome = manager.apply(UpdateTopic(broker_name=GROUP, topic="T", queues=4))
    assert outcome.code == RC.BAD_REQUEST
    assert manager.topic_queues("T") == {GROUP: 8}


def test_unknown_group_other_cluster_and_bad_fields_are_refused() -> None:
    manager = group_with_master()
    assert (
        manager.update_topic(CLUSTER, "nope", "T", 1).code
        == RC.CONTROLLER_BROKER_METADATA_NOT_EXIST
    )
    assert manager.update_topic("other", GROUP, "T", 1).code == RC.CONTROLLER_INVALID_REQUEST
    assert manager.update_topic(CLUSTER, GROUP, "a b", 1).code == RC.CONTROLLER_INVALID_REQUEST
    assert manager.update_topic(CLUSTER, GROUP, "T", 0).code == RC.CONTROLLER_INVALID_REQUEST
    event = UpdateTopic(broker_name="nope", topic="T", queues=1)
    assert ReplicasInfoManager().apply(event).code == RC.CONTROLLER_BROKER_METADATA_NOT_EXIST


def test_topics_outlive_the_master_and_go_with_a_cleaned_group() -> None:
    manager = group_with_master()
    commit(manager, manager.update_topic(CLUSTER, GROUP, "T", 2))
    # Every broker dead, the master cleared: the topic is still known.
    cleared = manager.elect_master(GROUP, alive_replicas={})
    commit(manager, cleared)
    info = manager.replica_info(GROUP)
    assert info is not None and info.master_broker_id is None
    assert manager.topic_queues("T") == {GROUP: 2}
    clean = manager.clean_broker_data(CLUSTER, GROUP, None, alive=alive_none)
    assert commit(manager, clean).ok
    assert manager.topic_queues("T") == {}
    assert manager.invariant_violations() == []
