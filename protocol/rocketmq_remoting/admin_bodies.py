"""The headers and JSON bodies of the admin requests mqadmin and the RocketMQ Dashboard send to a
broker (issue 27 item 4), in RocketMQ's field names. Pure.

Bodies (the Java classes they stand for, field names from apache/rocketmq):

- GET_BROKER_RUNTIME_INFO (28): KVTable ``{"table": {name: string}}``.
- GET_ALL_TOPIC_CONFIG (21): TopicConfigSerializeWrapper ``{"topicConfigTable": {topic:
  {"topicName", "readQueueNums", "writeQueueNums", "perm", "topicFilterType", "topicSysFlag",
  "order", "attributes"}}, "dataVersion": {"timestamp", "counter", "stateVersion"}}``.
- GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201): SubscriptionGroupWrapper ``{"subscriptionGroupTable":
  {group: SubscriptionGroupConfig}, "dataVersion"}``.
- GET_TOPIC_STATS_INFO (202): TopicStatsTable ``{"offsetTable": {MessageQueue: {"minOffset",
  "maxOffset", "lastUpdateTimestamp"}}}``.
- GET_CONSUME_STATS (208): ConsumeStats ``{"offsetTable": {MessageQueue: {"brokerOffset",
  "consumerOffset", "pullOffset", "lastTimestamp"}}, "consumeTps"}``.
- GET_CONSUMER_CONNECTION_LIST (203): ConsumerConnection ``{"connectionSet": [{"clientId",
  "clientAddr", "language", "version"}], "subscriptionTable": {topic: {"topic", ...}},
  "consumeType"}`` (consumeType when known: CONSUME_PASSIVELY, CONSUME_ACTIVELY or
  CONSUME_POP).

The two offset tables are keyed by a MessageQueue object, which RocketMQ's fastjson writes as
the key itself: ``{{"brokerName":"b","queueId":0,"topic":"T"}:{...}}`` (not standard JSON;
RocketMQ's Java tools decode it as written). :func:`decode_mq_table` reads it back (tests).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from protocol.rocketmq_remoting.bodies import BodyError
from protocol.rocketmq_remoting.headers import HeaderError, opt_int_in
from protocol.topic_attrs import (
    ATTR_MESSAGE_TYPE,
    MessageType,
    TopicAttrs,
    parse_attributes,
    parse_perm,
)

__all__ = [
    "PERM_READ_WRITE",
    "ConnectionRow",
    "ConsumeRow",
    "CreateTopicHeader",
    "QueueOffsets",
    "decode_mq_table",
    "encode_consume_stats",
    "encode_consumer_connection",
    "encode_kv_table",
    "encode_subscription_groups",
    "encode_topic_configs",
    "encode_topic_stats",
    "parse_subscription_group",
    "parse_topic",
]

PERM_READ_WRITE = 6
"""PermName.PERM_READ | PermName.PERM_WRITE."""
_INT32_MAX = 2**31 - 1


def _dumps(obj: object) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _data_version(timestamp_ms: int, counter: int) -> dict[str, int]:
    return {"stateVersion": 0, "timestamp": timestamp_ms, "counter": counter}


# -- headers ---------------------------------------------------------------------------------


def parse_topic(fields: Mapping[str, str]) -> str:
    """GET_TOPIC_STATS_INFO's header: the topic."""
    topic = fields.get("topic")
    if not topic:
        raise HeaderError("header field topic is missing")
    return topic


class CreateTopicHeader(NamedTuple):
    """UPDATE_AND_CREATE_TOPIC's header (CreateTopicRequestHeader): the fields we act on."""

    topic: str
    queues: int | None
    """writeQueueNums (readQueueNums when only it is given); None: the broker's default."""
    perm: int | None = None
    """``perm`` (PermName bits); None: keep the topic's."""
    message_type: str | None = None
    """``attributes``' ``+message.type=...`` (mqadmin's ``-a``); None: keep the topic's."""

    @classmethod
    def parse(cls, fields: Mapping[str, str]) -> CreateTopicHeader:
        topic = parse_topic(fields)
        read = opt_int_in(fields, "readQueueNums", 1, _INT32_MAX)
        write = opt_int_in(fields, "writeQueueNums", 1, _INT32_MAX)
        if read is not None and write is not None and read != write:
            raise HeaderError(
                f"readQueueNums {read} differs from writeQueueNums {write}: "
                "a topic here has one queue count for both"
            )
        try:
            perm = parse_perm(fields["perm"]) if fields.get("perm") else None
            attrs = parse_attributes(fields.get("attributes") or "")
        except ValueError as exc:
            raise HeaderError(str(exc)) from None
        return cls(
            topic=topic,
            queues=write if write is not None else read,
            perm=perm,
            message_type=attrs.get(ATTR_MESSAGE_TYPE),
        )


def parse_subscription_group(body: bytes | bytearray | memoryview) -> dict[str, object]:
    """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP's SubscriptionGroupConfig body, as the settings our
    subscription groups take (``groupName``, ``retryMaxTimes``, ``consumeMessageOrderly``: the
    fields the two share by name). RocketMQ's other fields are not applied; ``consumeEnable``
    false is refused (a group here cannot be stopped from consuming)."""
    try:
        doc = json.loads(bytes(body))
    except (ValueError, UnicodeDecodeError) as exc:
        raise BodyError(f"SubscriptionGroupConfig body is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise BodyError("SubscriptionGroupConfig body is not a JSON object")
    if doc.get("consumeEnable") is False:
        raise BodyError("consumeEnable false is not supported: a group here always consumes")
    return {k: doc[k] for k in ("groupName", "retryMaxTimes", "consumeMessageOrderly") if k in doc}


# -- bodies ----------------------------------------------------------------------------------


def encode_kv_table(table: Mapping[str, str]) -> bytes:
    """KVTable: ``{"table": {...}}`` of string values."""
    return _dumps({"table": dict(table)}).encode()


def encode_topic_configs(
    queues: Mapping[str, int],
    *,
    timestamp_ms: int,
    counter: int = 0,
    attrs: Mapping[str, TopicAttrs] | None = None,
) -> bytes:
    """TopicConfigSerializeWrapper of topics with their queue counts (read and write alike),
    permission and ``message.type`` attribute (``attrs``: those not the default)."""
    table = {}
    for name, n in sorted(queues.items()):
        a = (attrs or {}).get(name)
        table[name] = {
            "topicName": name,
            "readQueueNums": n,
            "writeQueueNums": n,
            "perm": PERM_READ_WRITE if a is None else a.perm,
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": 0,
            "order": False,
            "attributes": {}
            if a is None or a.message_type is MessageType.NORMAL
            else {ATTR_MESSAGE_TYPE: a.message_type.value},
        }
    doc = {"topicConfigTable": table, "dataVersion": _data_version(timestamp_ms, counter)}
    return _dumps(doc).encode()


def encode_subscription_groups(
    groups: Mapping[str, Mapping[str, object]], *, timestamp_ms: int, counter: int = 0
) -> bytes:
    """SubscriptionGroupWrapper: each group's settings (our names, which RocketMQ shares for
    groupName, retryMaxTimes and consumeMessageOrderly) with ``consumeEnable`` true."""
    table = {g: {**dict(s), "groupName": g, "consumeEnable": True} for g, s in groups.items()}
    doc = {"subscriptionGroupTable": table, "dataVersion": _data_version(timestamp_ms, counter)}
    return _dumps(doc).encode()


def _mq_key(topic: str, broker_name: str, queue_id: int) -> str:
    # fastjson's order: the MessageQueue's properties sorted by name.
    return _dumps({"brokerName": broker_name, "queueId": queue_id, "topic": topic})


def _mq_table(rows: Iterable[tuple[str, str, int, Mapping[str, object]]]) -> str:
    return "{" + ",".join(f"{_mq_key(t, b, q)}:{_dumps(dict(v))}" for t, b, q, v in rows) + "}"


class QueueOffsets(NamedTuple):
    """One queue's row of a TopicStatsTable."""

    topic: str
    broker_name: str
    queue_id: int
    min_offset: int
    max_offset: int
    last_update_ms: int = 0


def encode_topic_stats(rows: Iterable[QueueOffsets]) -> bytes:
    table = _mq_table(
        (
            r.topic,
            r.broker_name,
            r.queue_id,
            {
                "minOffset": r.min_offset,
                "maxOffset": r.max_offset,
                "lastUpdateTimestamp": r.last_update_ms,
            },
        )
        for r in rows
    )
    return ('{"offsetTable":' + table + "}").encode()


class ConsumeRow(NamedTuple):
    """One queue's row of a ConsumeStats (OffsetWrapper)."""

    topic: str
    broker_name: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    last_timestamp: int = 0


def encode_consume_stats(rows: Iterable[ConsumeRow], consume_tps: float = 0.0) -> bytes:
    """ConsumeStats; ``pullOffset`` is the committed offset (we keep no pull position)."""
    table = _mq_table(
        (
            r.topic,
            r.broker_name,
            r.queue_id,
            {
                "brokerOffset": r.broker_offset,
                "consumerOffset": r.consumer_offset,
                "pullOffset": r.consumer_offset,
                "lastTimestamp": r.last_timestamp,
            },
        )
        for r in rows
    )
    return ('{"offsetTable":' + table + ',"consumeTps":' + _dumps(consume_tps) + "}").encode()


class ConnectionRow(NamedTuple):
    """One member of a consumer group (Connection)."""

    client_id: str
    client_addr: str
    topic: str
    language: str = "OTHER"
    version: int = 0


def encode_consumer_connection(rows: Iterable[ConnectionRow], consume_type: str = "") -> bytes:
    """ConsumerConnection: the members, the topics they subscribe and the group's
    ``consume_type`` (RocketMQ's ConsumeType name; left out when "": not known); messageModel
    and consumeFromWhere are left out: the broker does not keep them."""
    members = list(rows)
    doc: dict[str, Any] = {
        "connectionSet": [
            {
                "clientId": m.client_id,
                "clientAddr": m.client_addr,
                "language": m.language,
                "version": m.version,
            }
            for m in members
        ],
        "subscriptionTable": {m.topic: {"topic": m.topic} for m in members if m.topic},
    }
    if consume_type:
        doc["consumeType"] = consume_type
    return _dumps(doc).encode()


def decode_mq_table(text: str) -> dict[tuple[str, str, int], dict[str, Any]]:
    """An offset table written with MessageQueue keys, as ``{(topic, brokerName, queueId):
    value}`` (the inverse of the encoders above, for tests and tools)."""
    decoder = json.JSONDecoder()
    out: dict[tuple[str, str, int], dict[str, Any]] = {}
    pos = text.index("{") + 1
    while True:
        while text[pos] in " ,":
            pos += 1
        if text[pos] == "}":
            return out
        key, pos = decoder.raw_decode(text, pos)
        if text[pos] != ":":
            raise BodyError(f"offset table: ':' expected at {pos}")
        value, pos = decoder.raw_decode(text, pos + 1)
        out[(key["topic"], key["brokerName"], int(key["queueId"]))] = value
