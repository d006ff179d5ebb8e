"""What the application hands to a producer and gets back from it or from a consumer."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import NamedTuple, Protocol

from protocol.fifo import PROP_MESSAGE_GROUP
from protocol.message import MessageRecord
from protocol.retry import (
    PROP_ORIGIN_MESSAGE_ID,
    PROP_RETRY_TOPIC,
    RETRY_GROUP_TOPIC_PREFIX,
    reconsume_times,
)
from protocol.timer import (
    PROP_START_DELIVER_TIME,
    PROP_TIMER_DELAY_MS,
    PROP_TIMER_DELAY_SEC,
    PROP_TIMER_DELIVER_MS,
)

_ASKING: tuple[tuple[str, int | None], ...] = (
    (PROP_TIMER_DELIVER_MS, None),
    (PROP_START_DELIVER_TIME, None),
    (PROP_TIMER_DELAY_MS, 1),
    (PROP_TIMER_DELAY_SEC, 1000),
)
"""The delivery-time properties in the order the broker honours them; the unit of a delay."""

DeliverAt = int | datetime
"""A delivery time: epoch milliseconds, or an aware datetime (a naive one is local time)."""
Delay = float | timedelta
"""A delivery delay: seconds, or a timedelta."""


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
    deliver_at: DeliverAt | None = None
    """Deliver at this time (scheduled message); see :meth:`Producer.send`."""
    delay: Delay | None = None
    """Deliver after this delay (scheduled message); see :meth:`Producer.send`."""
    message_group: str | None = None
    """Its FIFO message group; see :meth:`Producer.send` and :meth:`Producer.send_batch`."""


class SendResult(NamedTuple):
    """Where the broker stored a message; only ever built from a SUCCESS answer.

    A scheduled message (``deliver_at`` or ``delay``) has ``queue_offset`` -1: it gets one in
    ``queue_id`` only when it is delivered. Its ``msg_id`` recalls it (:meth:`Producer.recall`)
    until then, and the delivered copy carries it in the ``UNIQ_KEY`` property."""

    msg_id: str
    broker_name: str
    queue_id: int
    queue_offset: int
    deliver_at_ms: int | None = None
    """A scheduled message: the delivery time asked for (epoch ms); None otherwise."""

    @property
    def scheduled(self) -> bool:
        return self.deliver_at_ms is not None


class ReceivedMessage:
    """A consumed message: its stored record plus the broker group it came from.

    It wraps the decoded record instead of copying its fields, so a pulled message costs one
    small object on top of the record (the consumer's hot path).

    A retried message (a copy the broker re-published to the group's retry topic after a
    nack) shows the topic it was first published to as :attr:`topic`, and how many times it
    was retried as :attr:`reconsume_times`; :attr:`stored_topic` is where this copy is stored.

    A message of a static topic read by logical queue (docs/static-topics.md) shows its logical
    queue and logical offset as :attr:`queue_id` and :attr:`queue_offset`; :attr:`broker_name`,
    :attr:`physical_queue_id` and :attr:`physical_queue_offset` say where it is stored.
    """

    __slots__ = ("broker_name", "logical_offset", "logical_queue", "record")

    def __init__(
        self,
        record: MessageRecord,
        broker_name: str,
        logical_queue: int | None = None,
        logical_offset: int | None = None,
    ) -> None:
        self.record = record
        self.broker_name = broker_name
        #: a static topic's logical queue and offset (None: read by physical queue)
        self.logical_queue = logical_queue
        self.logical_offset = logical_offset

    @property
    def msg_id(self) -> str:
        return self.record.msg_id

    @property
    def topic(self) -> str:
        """The topic the message was published to (for a retried message, its first one)."""
        topic = self.record.topic
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return self.record.properties.get(PROP_RETRY_TOPIC) or topic
        return topic

    @property
    def stored_topic(self) -> str:
        """The topic this copy is stored under (``%RETRY%<group>`` for a retried message)."""
        return self.record.topic

    @property
    def reconsume_times(self) -> int:
        """How many times the message was sent back and retried (0 the first time)."""
        return reconsume_times(self.record.properties)

    @property
    def origin_msg_id(self) -> str:
        """The id of the message's first copy (its own id unless it is a retry)."""
        return self.record.properties.get(PROP_ORIGIN_MESSAGE_ID) or self.record.msg_id

    @property
    def message_group(self) -> str | None:
        """Its FIFO message group (None: it has none)."""
        return self.record.properties.get(PROP_MESSAGE_GROUP) or None

    @property
    def queue_id(self) -> int:
        """The queue it was read from: the logical queue of a static topic read by logical
        queue, else the physical queue."""
        return self.record.queue_id if self.logical_queue is None else self.logical_queue

    @property
    def queue_offset(self) -> int:
        """Its offset in :attr:`queue_id` (logical or physical, like the queue)."""
        return self.record.queue_offset if self.logical_offset is None else self.logical_offset

    @property
    def physical_queue_id(self) -> int:
        """The queue it is stored in on :attr:`broker_name`."""
        return self.record.queue_id

    @property
    def physical_queue_offset(self) -> int:
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
            f"ReceivedMessage(topic={self.stored_topic!r}, broker_name={self.broker_name!r}, "
            f"queue_id={self.queue_id}, queue_offset={self.queue_offset}, "
            f"body={self.body[:32]!r}{'...' if len(self.body) > 32 else ''})"
        )


def delivery_properties(
    deliver_at: DeliverAt | None, delay: Delay | None, now_ms: int
) -> tuple[dict[str, str], int | None]:
    """The properties asking the broker for ``deliver_at`` or ``delay`` (at most one), and the
    delivery time they mean (epoch ms; None for neither). Bounds are the broker's to check: a
    negative delay goes as it is and is refused there."""
    if deliver_at is not None and delay is not None:
        raise ValueError("give deliver_at or delay, not both")
    if deliver_at is not None:
        if isinstance(deliver_at, datetime):
            at = int(deliver_at.timestamp() * 1000)
        elif isinstance(deliver_at, int) and not isinstance(deliver_at, bool):
            at = deliver_at
        else:
            raise TypeError(f"deliver_at must be epoch ms or a datetime, not {deliver_at!r}")
        return {PROP_TIMER_DELIVER_MS: str(at)}, at
    if delay is not None:
        if isinstance(delay, timedelta):
            ms = round(delay.total_seconds() * 1000)
        elif isinstance(delay, int | float) and not isinstance(delay, bool):
            ms = round(delay * 1000)
        else:
            raise TypeError(f"delay must be seconds or a timedelta, not {delay!r}")
        return {PROP_TIMER_DELAY_MS: str(ms)}, now_ms + ms
    return {}, None


def asked_delivery_time(properties: Mapping[str, str], now_ms: int) -> int | None:
    """The delivery time ``properties`` set directly by the caller ask for (epoch ms), None if
    they ask for none; a malformed value counts as none here (the broker refuses it)."""
    for name, unit in _ASKING:
        text = properties.get(name)
        if text is not None:
            try:
                value = int(text)
            except ValueError:
                return None
            return value if unit is None else now_ms + value * unit
    return None
