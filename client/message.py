"""What the application hands to a producer and gets back from it or from a consumer."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from protocol.message import MessageRecord


class OutgoingMessage(Protocol):
    """Anything with a body, keys, tags and properties (:class:`Message`, or the protocol's)."""

    @property
    def body(self) -> bytes: ...

    @property
    def keys(self) -> str: ...

    @property
    def tags(self) -> str: ...

    @property
    def properties(self) -> Mapping[str, str]: ...


@dataclass(slots=True, kw_only=True)
class Message:
    """One message of a :meth:`Producer.send_batch` (the topic is the batch's)."""

    body: bytes
    keys: str = ""
    tags: str = ""
    properties: dict[str, str] = field(default_factory=dict)


class SendResult(NamedTuple):
    """Where the broker stored a message; only ever built from a SUCCESS answer."""

    msg_id: str
    broker_name: str
    queue_id: int
    queue_offset: int


class ReceivedMessage:
    """A consumed message: its stored record plus the broker group it came from.

    It wraps the decoded record instead of copying its fields, so a pulled message costs one
    small object on top of the record (the consumer's hot path).
    """

    __slots__ = ("broker_name", "record")

    def __init__(self, record: MessageRecord, broker_name: str) -> None:
        self.record = record
        self.broker_name = broker_name

    @property
    def msg_id(self) -> str:
        return self.record.msg_id

    @property
    def topic(self) -> str:
        return self.record.topic

    @property
    def queue_id(self) -> int:
        return self.record.queue_id

    @property
    def queue_offset(self) -> int:
        return self.record.queue_offset

    @property
    def body(self) -> bytes:
        return self.record.body

    @property
    def keys(self) -> str:
        return self.record.keys

    @property
    def tags(self) -> str:
        return self.record.tags

    @property
    def properties(self) -> dict[str, str]:
        return self.record.properties

    @property
    def born_timestamp(self) -> int:
        return self.record.born_timestamp

    @property
    def store_timestamp(self) -> int:
        return self.record.store_timestamp

    def __repr__(self) -> str:
        return (
            f"ReceivedMessage(topic={self.topic!r}, broker_name={self.broker_name!r}, "
            f"queue_id={self.queue_id}, queue_offset={self.queue_offset}, "
            f"body={self.body[:32]!r}{'...' if len(self.body) > 32 else ''})"
        )
