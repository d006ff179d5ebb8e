"""HEART_BEAT, UNREGISTER_CLIENT and GET_CONSUMER_LIST_BY_GROUP: group membership for
client-side rebalance, and the connections of transactional producers (docs/protocol.md,
docs/transactions.md). Pure: no sockets, no clock.

Requests (header fields; ``?`` may be left out)::

    HEART_BEAT 34                    consumerGroup, clientId, topic?   (a consumer)
                                     producerGroup, clientId           (a transactional
                                                                        producer: no
                                                                        consumerGroup)
                                     either with language?, version?, protocol?,
                                     clientAddress? (who the client is, for
                                     producerConnection and consumerConnection: a
                                     front relaying its clients' heartbeats sends
                                     theirs; left out: our SDK's remoting protocol,
                                     language and version unknown, the connection's
                                     address)
                                     a consumer also consumeType?: pop (it POPs:
                                     holds no queue), push or pull (it takes a
                                     share of the queues); left out: not said
                                     (taken as queue-holding)
    UNREGISTER_CLIENT 35             consumerGroup, clientId
    GET_CONSUMER_LIST_BY_GROUP 38    consumerGroup

A heartbeat's SUCCESS (:class:`HeartbeatAnswer`) says ``consumeRetry`` (whether the member
reads the group's retry topic) and, for a FIFO group, ``consumeOrderly``, ``retryMaxTimes``
and ``retryDelays``; a producer's has no fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import msgpack

from protocol.codes import RequestCode
from protocol.fields import FieldError, opt_bool, opt_int_or_none, opt_str, req_str
from protocol.one_field import GroupOnly
from protocol.remoting import Header, Scalar

__all__ = [
    "CONSUME_TYPES",
    "POP",
    "PULL",
    "PUSH",
    "ConsumerList",
    "ConsumerListQuery",
    "Heartbeat",
    "HeartbeatAnswer",
    "UnregisterClient",
    "consume_type",
]

POP = "pop"
"""A consumer that POPs (docs/pop.md): it holds no queue, every such member reads every queue."""
PUSH = "push"
"""A consumer that takes its share of the queues and has their messages pushed to it."""
PULL = "pull"
"""A consumer that takes its share of the queues and pulls them itself."""
CONSUME_TYPES: tuple[str, ...] = (POP, PUSH, PULL)


def consume_type(value: str) -> str:
    """``value`` if it is a consume type this broker knows, else "" (not said: a member taken as
    holding queues, as before consume types were sent)."""
    return value if value in CONSUME_TYPES else ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Heartbeat:
    """HEART_BEAT: ``client_id`` is alive in consumer group ``group`` (consuming ``topic``),
    or, with ``producer``, in transactional producer group ``group`` (its connection is where
    the broker's check-backs go)."""

    code: ClassVar[RequestCode] = RequestCode.HEART_BEAT

    group: str
    client_id: str
    topic: str = ""
    producer: bool = False
    language: str = ""
    version: str = ""
    protocol: str = ""
    client_address: str = ""
    consume_type: str = ""
    """A consumer's :data:`CONSUME_TYPES` member ("" not said)."""

    def encode(self) -> tuple[Header, bytes | None]:
        if self.producer:
            header: Header = {"clientId": self.client_id, "producerGroup": self.group}
        else:
            header = {"clientId": self.client_id, "consumerGroup": self.group}
            if self.topic:
                header["topic"] = self.topic
            if self.consume_type:
                header["consumeType"] = self.consume_type
        for name, value in (
            ("language", self.language),
            ("version", self.version),
            ("protocol", self.protocol),
            ("clientAddress", self.client_address),
        ):
            if value:
                header[name] = value
        return header, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> Heartbeat:
        producer = "consumerGroup" not in header and "producerGroup" in header
        return cls(
            group=req_str(header, "producerGroup" if producer else "consumerGroup"),
            client_id=req_str(header, "clientId"),
            topic="" if producer else opt_str(header, "topic"),
            producer=producer,
            language=opt_str(header, "language"),
            version=opt_str(header, "version"),
            protocol=opt_str(header, "protocol"),
            client_address=opt_str(header, "clientAddress"),
            consume_type="" if producer else opt_str(header, "consumeType"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatAnswer:
    """A consumer heartbeat's SUCCESS: whether the member reads the group's retry topic, and
    for a FIFO group (``orderly``) how it retries in place."""

    consume_retry: bool
    orderly: bool = False
    retry_max_times: int | None = None
    retry_delays: str | None = None

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {"consumeRetry": self.consume_retry}
        if self.orderly:
            header["consumeOrderly"] = True
            if self.retry_max_times is not None:
                header["retryMaxTimes"] = self.retry_max_times
            if self.retry_delays is not None:
                header["retryDelays"] = self.retry_delays
        return header, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> HeartbeatAnswer:
        orderly = opt_bool(header, "consumeOrderly")
        delays = header.get("retryDelays")
        if delays is not None and not isinstance(delays, str):
            raise FieldError("header field 'retryDelays' must be a string")
        return cls(
            consume_retry=opt_bool(header, "consumeRetry", True),
            orderly=orderly,
            retry_max_times=opt_int_or_none(header, "retryMaxTimes") if orderly else None,
            retry_delays=delays if orderly else None,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class UnregisterClient:
    """UNREGISTER_CLIENT: ``client_id`` leaves consumer group ``group``."""

    code: ClassVar[RequestCode] = RequestCode.UNREGISTER_CLIENT

    group: str
    client_id: str

    def encode(self) -> tuple[Header, bytes | None]:
        return {"clientId": self.client_id, "consumerGroup": self.group}, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> UnregisterClient:
        return cls(group=req_str(header, "consumerGroup"), client_id=req_str(header, "clientId"))


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerListQuery(GroupOnly):
    """GET_CONSUMER_LIST_BY_GROUP: the client ids of ``group``'s live members that hold queues
    (POP members left out; a msgpack array in the answer's body)."""

    code: ClassVar[RequestCode] = RequestCode.GET_CONSUMER_LIST_BY_GROUP


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerList:
    """GET_CONSUMER_LIST_BY_GROUP's SUCCESS: the client ids of the group's live members, the
    body's msgpack array."""

    client_ids: tuple[str, ...]

    def encode(self) -> tuple[Header, bytes | None]:
        body: bytes = msgpack.packb(list(self.client_ids))
        return {}, body

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> ConsumerList:
        try:
            ids = msgpack.unpackb(body or b"\x90", raw=False)
        except Exception:  # msgpack raises several unrelated types on garbage
            raise FieldError("consumer list is not msgpack") from None
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise FieldError("consumer list must be an array of client ids")
        return cls(client_ids=tuple(ids))
