"""GET_CONSUME_STATS and GET_CONSUMER_CONNECTION_LIST: consumer progress and group members, pure
encode/decode and the lag arithmetic (docs/protocol.md).

Requests (header fields, no body; ``?`` marks a field that may be left out)::

    GET_CONSUMER_CONNECTION_LIST 203   consumerGroup
    GET_CONSUME_STATS 208              consumerGroup?, topic?

GET_CONSUME_STATS answers SUCCESS with a msgpack body (:class:`ConsumeStats`)::

    {"brokerName": str, "address": str, "role": "MASTER" | "SLAVE",
     "groups": {group: [{"topic", "queueId", "minOffset", "maxOffset",
                         "consumerOffset", "lastConsumeMs"}, ...]},
     "notOpened": {group: [topic, ...]}}

one row per queue of every topic the group committed an offset for, or subscribes to through a
live member, on that broker (only ``consumerGroup``'s rows when given, only ``topic``'s when
given). A group the broker does not know is absent from ``groups``, unless ``topic`` is given
too: then that topic's queues are its rows, with ``consumerOffset`` -1 (a broker group the
consumers never reached yet still counts its messages as lag). ``maxOffset`` is what a
consumer can read there: the queue offset after the last message at or below the confirm offset
(controller mode), so a group that consumed everything it can read has a lag of 0.
``consumerOffset`` is -1 when the group never committed on that queue; ``lastConsumeMs`` (epoch
ms) is when the group last moved its committed offset there, 0 when unknown.

``notOpened`` (left out when empty; absent from a broker of an earlier version) lists per group
the topics left out of ``groups`` because a ConsumeQueue of theirs was not opened since the
broker's start, and the request opened no more of them (a bound on the work of one request:
docs/operations.md, "Consumer progress after a restart"); asked again, the broker opens more.

GET_CONSUMER_CONNECTION_LIST answers SUCCESS with a msgpack list of :class:`ConsumerConnection`
documents ``{"clientId", "address", "topic", "lastHeartbeatMs", "language", "version", "protocol",
"consumeType"}``: the group's live members as this broker sees them (empty when none);
``consumeType`` is pop, push or pull, left out when the member did not say. A reader takes the
last four as "" when left out (a broker of an earlier version).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgpack


class StatsError(ValueError):
    """A consume stats or connection list body is malformed."""


def queue_lag(max_offset: int, consumer_offset: int | None, min_offset: int) -> int:
    """Messages of a queue the group has not consumed yet: from its committed offset (from the
    queue's min offset when it never committed or committed below it, as everything retained is
    then still unread) up to ``max_offset``; never negative."""
    start = min_offset if consumer_offset is None else max(consumer_offset, min_offset)
    return max(0, max_offset - start)


@dataclass(frozen=True, slots=True)
class QueueStats:
    """One queue's figures for one consumer group on one broker."""

    topic: str
    queue_id: int
    min_offset: int
    max_offset: int
    """What a consumer can read (see the module docstring)."""
    consumer_offset: int | None
    """The group's committed offset; None when it never committed on this queue."""
    last_consume_ms: int | None
    """When the group last moved its committed offset here (epoch ms); None when unknown."""
    inflight: int = 0
    """POP deliveries from this queue handed out and not acked or redelivered yet (the
    master's figure; 0 for a queue-bound group and on a slave)."""

    @property
    def lag(self) -> int:
        return queue_lag(self.max_offset, self.consumer_offset, self.min_offset)

    def to_wire(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "queueId": self.queue_id,
            "minOffset": self.min_offset,
            "maxOffset": self.max_offset,
            "consumerOffset": -1 if self.consumer_offset is None else self.consumer_offset,
            "lastConsumeMs": self.last_consume_ms or 0,
            "popInflight": self.inflight,
        }

    @classmethod
    def from_wire(cls, doc: Any) -> QueueStats:
        if not isinstance(doc, Mapping):
            raise StatsError("a queue row is not a map")
        consumer_offset = _int(doc, "consumerOffset")
        last = _int(doc, "lastConsumeMs")
        topic = doc.get("topic")
        if not isinstance(topic, str) or not topic:
            raise StatsError("a queue row has no topic")
        return cls(
            topic=topic,
            queue_id=_int(doc, "queueId"),
            min_offset=_int(doc, "minOffset"),
            max_offset=_int(doc, "maxOffset"),
            consumer_offset=None if consumer_offset < 0 else consumer_offset,
            last_consume_ms=last or None,
            inflight=_int(doc, "popInflight") if "popInflight" in doc else 0,
        )


@dataclass(frozen=True, slots=True)
class ConsumeStats:
    """One broker's answer to GET_CONSUME_STATS."""

    broker_name: str
    address: str
    role: str
    groups: Mapping[str, tuple[QueueStats, ...]]
    not_opened: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """group -> its topics left out of ``groups``: a queue of theirs not opened yet since the
    broker's start (see the module docstring)."""

    def encode(self) -> bytes:
        doc: dict[str, Any] = {
            "brokerName": self.broker_name,
            "address": self.address,
            "role": self.role,
            "groups": {g: [q.to_wire() for q in rows] for g, rows in self.groups.items()},
        }
        if self.not_opened:
            doc["notOpened"] = {g: list(topics) for g, topics in self.not_opened.items()}
        out: bytes = msgpack.packb(doc)
        return out

    @classmethod
    def decode(cls, body: bytes | None) -> ConsumeStats:
        doc = _unpack(body)
        if not isinstance(doc, Mapping):
            raise StatsError("consume stats body is not a map")
        groups = doc.get("groups")
        if not isinstance(groups, Mapping):
            raise StatsError("consume stats body has no groups map")
        parsed: dict[str, tuple[QueueStats, ...]] = {}
        for group, rows in groups.items():
            if not isinstance(group, str) or not isinstance(rows, list):
                raise StatsError("consume stats groups map is malformed")
            parsed[group] = tuple(QueueStats.from_wire(r) for r in rows)
        not_opened: dict[str, tuple[str, ...]] = {}
        left = doc.get("notOpened", {})
        if not isinstance(left, Mapping):
            raise StatsError("consume stats notOpened is not a map")
        for group, topics in left.items():
            if not (
                isinstance(group, str)
                and isinstance(topics, list)
                and all(isinstance(t, str) and t for t in topics)
            ):
                raise StatsError("consume stats notOpened map is malformed")
            not_opened[group] = tuple(topics)
        return cls(
            broker_name=_str(doc, "brokerName"),
            address=_str(doc, "address"),
            role=_str(doc, "role"),
            groups=parsed,
            not_opened=not_opened,
        )


@dataclass(frozen=True, slots=True)
class ConsumerConnection:
    """A live member of a consumer group as one broker sees it."""

    client_id: str
    address: str
    """The member's address as the broker saw its connection (host:port)."""
    topic: str
    """The topic it subscribes to (as its last heartbeat said)."""
    last_heartbeat_ms: int
    language: str = ""
    """The client's language as it said ("" unknown; a broker of an earlier version)."""
    version: str = ""
    protocol: str = ""
    """How it reaches the broker: remoting (our SDK), gRPC or classic ("" unknown)."""
    consume_type: str = ""
    """pop (it holds no queue: it reads every queue), push or pull (it holds its share of the
    queues); "" when it did not say, or a broker of an earlier version (taken as push or pull)."""

    def to_wire(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "clientId": self.client_id,
            "address": self.address,
            "topic": self.topic,
            "lastHeartbeatMs": self.last_heartbeat_ms,
            "language": self.language,
            "version": self.version,
            "protocol": self.protocol,
        }
        if self.consume_type:  # not said: the document of before
            doc["consumeType"] = self.consume_type
        return doc


def encode_connections(members: Iterable[ConsumerConnection]) -> bytes:
    out: bytes = msgpack.packb([m.to_wire() for m in members])
    return out


def decode_connections(body: bytes | None) -> list[ConsumerConnection]:
    doc = _unpack(body)
    if not isinstance(doc, list):
        raise StatsError("consumer connection list body is not a list")
    out = []
    for item in doc:
        if not isinstance(item, Mapping):
            raise StatsError("a consumer connection is not a map")
        out.append(
            ConsumerConnection(
                client_id=_str(item, "clientId"),
                address=_str(item, "address"),
                topic=_str(item, "topic"),
                last_heartbeat_ms=_int(item, "lastHeartbeatMs"),
                language=_str(item, "language") if "language" in item else "",
                version=_str(item, "version") if "version" in item else "",
                protocol=_str(item, "protocol") if "protocol" in item else "",
                consume_type=_str(item, "consumeType") if "consumeType" in item else "",
            )
        )
    return out


def _unpack(body: bytes | None) -> Any:
    try:
        return msgpack.unpackb(body or b"", raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise StatsError(f"malformed body: {type(exc).__name__}") from None


def _int(doc: Mapping[str, Any], name: str) -> int:
    value = doc.get(name)
    if type(value) is not int:
        raise StatsError(f"field {name!r} must be an integer")
    return value


def _str(doc: Mapping[str, Any], name: str) -> str:
    value = doc.get(name)
    if not isinstance(value, str):
        raise StatsError(f"field {name!r} must be a string")
    return value
