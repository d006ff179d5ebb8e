"""The JSON bodies of the classic clients' broker requests (issue 27 item 3). Pure.

HEART_BEAT (34), the client's groups and subscriptions (HeartbeatData)::

    {"clientID": "192.168.0.7@12345",
     "producerDataSet": [{"groupName": "PG"}],
     "consumerDataSet": [{"groupName": "CG",
                          "consumeType": "CONSUME_PASSIVELY",     # PUSH; _ACTIVELY: PULL; _POP
                          "messageModel": "CLUSTERING",           # or BROADCASTING
                          "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                          "subscriptionDataSet": [{"topic": "T", "subString": "a || b",
                                                   "tagsSet": ["a", "b"], "codeSet": [97, 98],
                                                   "subVersion": 1700000000000,
                                                   "expressionType": "TAG",
                                                   "classFilterMode": false}],
                          "unitMode": false}],
     "heartbeatFingerprint": 0, "withoutSub": false}

Java writes the sets as arrays; ali-ons leaves ``expressionType`` out (TAG is meant) and adds
nothing else. Fields not read here are ignored.

GET_CONSUMER_LIST_BY_GROUP (38) answers ``{"consumerIdList": [clientID, ...]}``.
LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42) send ``{"consumerGroup", "clientId",
"onlyThisBroker", "mqSet": [{"topic", "brokerName", "queueId"}]}``; a lock answers
``{"lockOKMQSet": [...]}`` with the queues it locked.

A body that does not parse or has a field of the wrong type raises :class:`BodyError`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, NamedTuple

from protocol.broker_requests.clients import POP, PULL, PUSH

__all__ = [
    "BodyError",
    "ConsumerData",
    "HeartbeatData",
    "LockBatchRequest",
    "MessageQueue",
    "SubscriptionData",
    "classic_consume_type",
    "consume_kind",
    "decode_heartbeat",
    "decode_lock_batch",
    "encode_consumer_list",
    "encode_lock_batch_answer",
]


class BodyError(ValueError):
    """A request body that does not parse or has fields of the wrong type."""


class SubscriptionData(NamedTuple):
    topic: str
    sub_string: str
    tags: tuple[str, ...] = ()
    expression_type: str = "TAG"
    sub_version: int = 0


class ConsumerData(NamedTuple):
    group_name: str
    consume_type: str
    message_model: str
    consume_from_where: str
    subscriptions: tuple[SubscriptionData, ...] = ()
    unit_mode: bool = False


CONSUME_KINDS: dict[str, str] = {
    "CONSUME_PASSIVELY": PUSH,
    "CONSUME_ACTIVELY": PULL,
    "CONSUME_POP": POP,
}
"""ConsumerData.consumeType (RocketMQ's ConsumeType) -> how the member consumes, in the
broker's words (:data:`protocol.broker_requests.clients.CONSUME_TYPES`)."""


def consume_kind(consume_type: str) -> str:
    """A ConsumerData's consumeType as pop, push or pull ("" for a name RocketMQ does not
    have)."""
    return CONSUME_KINDS.get(consume_type, "")


_CLASSIC_NAMES: dict[str, str] = {kind: name for name, kind in CONSUME_KINDS.items()}


def classic_consume_type(kind: str) -> str:
    """The inverse of :func:`consume_kind`: pop, push or pull as RocketMQ names it ("" for
    "" or another value)."""
    return _CLASSIC_NAMES.get(kind, "")


class HeartbeatData(NamedTuple):
    client_id: str
    producer_groups: tuple[str, ...] = ()
    consumers: tuple[ConsumerData, ...] = ()


class MessageQueue(NamedTuple):
    topic: str
    broker_name: str
    queue_id: int


class LockBatchRequest(NamedTuple):
    consumer_group: str
    client_id: str
    queues: tuple[MessageQueue, ...]
    only_this_broker: bool = False


def _load(raw: bytes | bytearray | memoryview, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(bytes(raw).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise BodyError(f"{what} body does not parse: {exc}") from None
    if type(obj) is not dict:
        raise BodyError(f"{what} body is not an object")
    return obj


def _get(obj: object, name: str, kind: type, where: str, default: Any = None) -> Any:
    if type(obj) is not dict:
        raise BodyError(f"{where} is not an object")
    value = obj.get(name)
    if value is None:
        if default is None:
            raise BodyError(f"{where}.{name} is missing")
        value = default
    if type(value) is not kind:
        raise BodyError(f"{where}.{name} is not {kind.__name__}")
    return value


def _str_list(obj: object, name: str, where: str) -> tuple[str, ...]:
    items = _get(obj, name, list, where, [])
    if not all(type(s) is str for s in items):
        raise BodyError(f"{where}.{name} is not a list of strings")
    return tuple(items)


def decode_heartbeat(raw: bytes | bytearray | memoryview) -> HeartbeatData:
    obj = _load(raw, "heartbeat")
    producers = tuple(
        _get(p, "groupName", str, "producerDataSet[]")
        for p in _get(obj, "producerDataSet", list, "heartbeat", [])
    )
    consumers = tuple(
        _consumer_data(c) for c in _get(obj, "consumerDataSet", list, "heartbeat", [])
    )
    return HeartbeatData(
        client_id=_get(obj, "clientID", str, "heartbeat"),
        producer_groups=producers,
        consumers=consumers,
    )


def _consumer_data(c: object) -> ConsumerData:
    where = "consumerDataSet[]"
    subs = tuple(
        SubscriptionData(
            topic=_get(s, "topic", str, "subscriptionDataSet[]"),
            sub_string=_get(s, "subString", str, "subscriptionDataSet[]", "*"),
            tags=_str_list(s, "tagsSet", "subscriptionDataSet[]"),
            expression_type=_get(s, "expressionType", str, "subscriptionDataSet[]", "TAG"),
            sub_version=_get(s, "subVersion", int, "subscriptionDataSet[]", 0),
        )
        for s in _get(c, "subscriptionDataSet", list, where, [])
    )
    return ConsumerData(
        group_name=_get(c, "groupName", str, where),
        consume_type=_get(c, "consumeType", str, where, "CONSUME_PASSIVELY"),
        message_model=_get(c, "messageModel", str, where, "CLUSTERING"),
        consume_from_where=_get(c, "consumeFromWhere", str, where, "CONSUME_FROM_LAST_OFFSET"),
        subscriptions=subs,
        unit_mode=_get(c, "unitMode", bool, where, False),
    )


def encode_consumer_list(client_ids: Iterable[str]) -> bytes:
    return json.dumps({"consumerIdList": list(client_ids)}, separators=(",", ":")).encode()


def decode_lock_batch(raw: bytes | bytearray | memoryview) -> LockBatchRequest:
    """LOCK_BATCH_MQ's and UNLOCK_BATCH_MQ's body."""
    obj = _load(raw, "lock batch")
    queues = tuple(
        MessageQueue(
            topic=_get(q, "topic", str, "mqSet[]"),
            broker_name=_get(q, "brokerName", str, "mqSet[]"),
            queue_id=_get(q, "queueId", int, "mqSet[]"),
        )
        for q in _get(obj, "mqSet", list, "lock batch", [])
    )
    return LockBatchRequest(
        consumer_group=_get(obj, "consumerGroup", str, "lock batch"),
        client_id=_get(obj, "clientId", str, "lock batch"),
        queues=queues,
        only_this_broker=_get(obj, "onlyThisBroker", bool, "lock batch", False),
    )


def encode_lock_batch_answer(locked: Iterable[MessageQueue]) -> bytes:
    return json.dumps(
        {
            "lockOKMQSet": [
                {"brokerName": q.broker_name, "queueId": q.queue_id, "topic": q.topic}
                for q in locked
            ]
        },
        ensure_ascii=False,
        separators=(",", ":"),
    ).encode("utf-8")
