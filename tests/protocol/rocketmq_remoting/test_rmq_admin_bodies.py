"""Golden bodies of the admin requests (protocol/rocketmq_remoting/admin_bodies.py), in the
field names of RocketMQ's KVTable, TopicConfigSerializeWrapper, SubscriptionGroupWrapper,
TopicStatsTable, ConsumeStats and ConsumerConnection, with fastjson's MessageQueue keys."""

from __future__ import annotations

import json

import pytest

from protocol.rocketmq_remoting.admin_bodies import (
    ConnectionRow,
    ConsumeRow,
    CreateTopicHeader,
    QueueOffsets,
    decode_mq_table,
    encode_consume_stats,
    encode_consumer_connection,
    encode_kv_table,
    encode_subscription_groups,
    encode_topic_configs,
    encode_topic_stats,
    parse_subscription_group,
    parse_topic,
)
from protocol.rocketmq_remoting.bodies import (
    BodyError,
    classic_consume_type,
    consume_kind,
    decode_heartbeat,
)
from protocol.rocketmq_remoting.headers import HeaderError
from protocol.topic_attrs import MessageType, TopicAttrs
from tests.support.classic import consumer_heartbeat


def test_kv_table() -> None:
    assert encode_kv_table({"commitLogMaxOffset": "12"}) == b'{"table":{"commitLogMaxOffset":"12"}}'


def test_topic_configs() -> None:
    assert encode_topic_configs({"T": 4}, timestamp_ms=1700000000000) == (
        b'{"topicConfigTable":{"T":{"topicName":"T","readQueueNums":4,"writeQueueNums":4,'
        b'"perm":6,"topicFilterType":"SINGLE_TAG","topicSysFlag":0,"order":false,'
        b'"attributes":{}}},"dataVersion":{"stateVersion":0,"timestamp":1700000000000,'
        b'"counter":0}}'
    )
    # A read-only FIFO topic: its perm and its message.type attribute, as RocketMQ writes them.
    fifo = {"T": TopicAttrs(4, MessageType.FIFO)}
    assert encode_topic_configs({"T": 4}, timestamp_ms=1700000000000, attrs=fifo) == (
        b'{"topicConfigTable":{"T":{"topicName":"T","readQueueNums":4,"writeQueueNums":4,'
        b'"perm":4,"topicFilterType":"SINGLE_TAG","topicSysFlag":0,"order":false,'
        b'"attributes":{"message.type":"FIFO"}}},"dataVersion":{"stateVersion":0,'
        b'"timestamp":1700000000000,"counter":0}}'
    )


def test_subscription_groups() -> None:
    body = encode_subscription_groups({"G": {"retryMaxTimes": 3}}, timestamp_ms=5, counter=1)
    assert body == (
        b'{"subscriptionGroupTable":{"G":{"retryMaxTimes":3,"groupName":"G",'
        b'"consumeEnable":true}},"dataVersion":{"stateVersion":0,"timestamp":5,"counter":1}}'
    )


def test_topic_stats_with_message_queue_keys() -> None:
    body = encode_topic_stats([QueueOffsets("T", "b", 0, 1, 5), QueueOffsets("T", "b", 1, 0, 0)])
    assert body == (
        b'{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:'
        b'{"minOffset":1,"maxOffset":5,"lastUpdateTimestamp":0},'
        b'{"brokerName":"b","queueId":1,"topic":"T"}:'
        b'{"minOffset":0,"maxOffset":0,"lastUpdateTimestamp":0}}}'
    )
    table = decode_mq_table(body.decode()[len('{"offsetTable":') : -1])
    assert table == {
        ("T", "b", 0): {"minOffset": 1, "maxOffset": 5, "lastUpdateTimestamp": 0},
        ("T", "b", 1): {"minOffset": 0, "maxOffset": 0, "lastUpdateTimestamp": 0},
    }
    assert encode_topic_stats([]) == b'{"offsetTable":{}}'


def test_consume_stats() -> None:
    body = encode_consume_stats([ConsumeRow("T", "b", 2, 9, 7, 1700000000000)])
    assert body == (
        b'{"offsetTable":{{"brokerName":"b","queueId":2,"topic":"T"}:'
        b'{"brokerOffset":9,"consumerOffset":7,"pullOffset":7,"lastTimestamp":1700000000000}},'
        b'"consumeTps":0.0}'
    )


def test_consumer_connection() -> None:
    body = encode_consumer_connection([ConnectionRow("c1", "127.0.0.1:5", "T")])
    assert body == (
        b'{"connectionSet":[{"clientId":"c1","clientAddr":"127.0.0.1:5","language":"OTHER",'
        b'"version":0}],"subscriptionTable":{"T":{"topic":"T"}}}'
    )


def test_consumer_connection_says_the_groups_consume_type() -> None:
    body = encode_consumer_connection([ConnectionRow("c1", "h:5", "T")], "CONSUME_POP")
    assert json.loads(body)["consumeType"] == "CONSUME_POP"


@pytest.mark.parametrize(
    ("classic", "kind"),
    [
        ("CONSUME_PASSIVELY", "push"),
        ("CONSUME_ACTIVELY", "pull"),
        ("CONSUME_POP", "pop"),
    ],
)
def test_a_classic_consumer_datas_consume_type(classic: str, kind: str) -> None:
    beat = decode_heartbeat(consumer_heartbeat("c1", "G", "T", consume_type=classic))
    (consumer,) = beat.consumers
    assert consume_kind(consumer.consume_type) == kind
    assert classic_consume_type(kind) == classic


def test_an_unknown_or_missing_classic_consume_type() -> None:
    assert consume_kind("CONSUME_LATER") == "" and classic_consume_type("") == ""
    assert classic_consume_type("lite") == ""
    body = json.dumps({"clientID": "c1", "consumerDataSet": [{"groupName": "G"}]}).encode()
    (consumer,) = decode_heartbeat(body).consumers
    assert consume_kind(consumer.consume_type) == "push"  # RocketMQ's clients always send it


def test_create_topic_header() -> None:
    fields = {"topic": "T", "readQueueNums": "8", "writeQueueNums": "8", "perm": "6"}
    assert CreateTopicHeader.parse(fields) == CreateTopicHeader("T", 8, 6)
    assert CreateTopicHeader.parse({"topic": "T"}) == CreateTopicHeader("T", None)
    # mqadmin's -p and -a: the permission and the message.type attribute.
    fifo = {**fields, "perm": "4", "attributes": "+message.type=FIFO"}
    assert CreateTopicHeader.parse(fifo) == CreateTopicHeader("T", 8, 4, "FIFO")
    with pytest.raises(HeaderError, match=r"perm '9' is not 0\.\.7"):
        CreateTopicHeader.parse({**fields, "perm": "9"})
    with pytest.raises(HeaderError, match="message type 'ORDERED' is not one of"):
        CreateTopicHeader.parse({**fields, "attributes": "+message.type=ORDERED"})
    with pytest.raises(HeaderError, match="attribute 'retention' is not known"):
        CreateTopicHeader.parse({**fields, "attributes": "+retention=1"})
    with pytest.raises(HeaderError, match="readQueueNums 4 differs from writeQueueNums 8"):
        CreateTopicHeader.parse({**fields, "readQueueNums": "4"})
    with pytest.raises(HeaderError, match="readQueueNums 0 is out of range"):
        CreateTopicHeader.parse({**fields, "readQueueNums": "0", "writeQueueNums": "0"})
    with pytest.raises(HeaderError, match="topic is missing"):
        parse_topic({})


def test_subscription_group_body() -> None:
    body = b'{"groupName":"G","retryMaxTimes":2,"consumeEnable":true,"retryQueueNums":1}'
    assert parse_subscription_group(body) == {"groupName": "G", "retryMaxTimes": 2}
    with pytest.raises(BodyError, match="consumeEnable false"):
        parse_subscription_group(b'{"groupName":"G","consumeEnable":false}')
    with pytest.raises(BodyError, match="not JSON"):
        parse_subscription_group(b"{")
    with pytest.raises(BodyError, match="not a JSON object"):
        parse_subscription_group(b"[]")
