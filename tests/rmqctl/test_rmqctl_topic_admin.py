"""topicList, topicStatus, deleteTopic and deleteSubGroup's rendering (rmqctl/topic_admin.py):
the documents --json prints, the tables, and which brokers count as failed (pure; the commands
against real processes are tests/cluster/test_topic_delete.py)."""

from __future__ import annotations

from protocol.codes import ResponseCode
from protocol.controller_requests.topics import BrokerOutcome, DeleteReport, TopicEntry, TopicList
from protocol.topic_admin import QueueStatus
from protocol.topic_attrs import MessageType, TopicAttrs
from rmqctl.topic_admin import (
    delete_doc,
    delete_table,
    failed_brokers,
    topic_list_doc,
    topic_list_table,
    topic_status_doc,
    topic_status_table,
)


def test_topic_list_counts_queues_groups_and_consumer_groups() -> None:
    listed = TopicList(
        topics=(
            TopicEntry("T", "c1", {"broker-a": 4, "broker-b": 4}),
            TopicEntry("U", "c1", {"broker-a": 1}, {"broker-a": TopicAttrs(4, MessageType.FIFO)}),
        )
    )
    doc = topic_list_doc(listed, {"T": ["g1", "g2"]})
    assert doc["topics"][0] == {
        "topic": "T",
        "cluster": "c1",
        "queues": 8,
        "perm": 6,
        "messageType": "NORMAL",
        "brokers": {"broker-a": 4, "broker-b": 4},
        "consumerGroups": ["g1", "g2"],
    }
    assert doc["topics"][1]["consumerGroups"] == []
    assert (doc["topics"][1]["perm"], doc["topics"][1]["messageType"]) == (4, "FIFO")
    lines = topic_list_table(doc).splitlines()
    assert lines[0].split() == [
        "Cluster",
        "Topic",
        "Queues",
        "Perm",
        "Type",
        "Brokers",
        "Groups",
        "Consumer",
        "Groups",
    ]
    assert lines[1].split() == ["c1", "T", "8", "RW-", "NORMAL", "2", "2", "g1,", "g2"]
    assert lines[2].split() == ["c1", "U", "1", "R--", "FIFO", "1", "0", "-"]


def test_topic_status_shows_an_empty_queue_without_a_time() -> None:
    rows = [
        ("broker-a", QueueStatus(0, 5, 9, 1_700_000_000_000)),
        ("broker-a", QueueStatus(1, 3, 3, 0)),
    ]
    doc = topic_status_doc("T", rows)
    assert doc["queues"][1] == {
        "brokerName": "broker-a",
        "queueId": 1,
        "minOffset": 3,
        "maxOffset": 3,
        "lastUpdateMs": 0,
        "note": None,
    }
    lines = topic_status_table(doc).splitlines()
    assert lines[0] == "Topic: T"
    assert lines[2].split() == ["broker-a", "0", "5", "9", "2023-11-14T22:13:20.000+00:00"]
    assert lines[3].split() == ["broker-a", "1", "3", "3", "-"]


def test_a_broker_that_did_not_delete_is_failed_and_one_that_never_had_it_is_not() -> None:
    report = DeleteReport(
        name="T",
        brokers=(
            BrokerOutcome("broker-a", "10.0.0.1:10911", ResponseCode.SUCCESS, ""),
            BrokerOutcome("broker-b", "10.0.0.2:10911", ResponseCode.TOPIC_NOT_EXIST, "absent"),
            BrokerOutcome("broker-b", "10.0.0.3:10911", ResponseCode.SERVICE_NOT_AVAILABLE, "down"),
        ),
    )
    doc = delete_doc("topic", report, ResponseCode.TOPIC_NOT_EXIST)
    assert doc["topic"] == "T"
    assert [(b["deleted"], b["absent"]) for b in doc["brokers"]] == [
        (True, False),
        (False, True),
        (False, False),
    ]
    assert failed_brokers(doc) == ["broker-b (10.0.0.3:10911)"]
    table = delete_table(doc)
    assert "deleted" in table and "not there" in table
    assert "FAILED: SERVICE_NOT_AVAILABLE down" in table
