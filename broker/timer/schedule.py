"""Scheduled messages: which sends ask for a delivery time, the due time each gets, how one is
stored under the timer topic and read back (the timer service's scheduling rules).

A send is admitted once, against one clock reading (:func:`admit`): a message carrying a
broker-only timer property is refused, a delivery time that is malformed, negative or beyond
``timer_max_delay_ms`` is refused, and the due times the wheel is given come from that same
reading.
"""

from __future__ import annotations

from typing import Final

from broker.timer.records import RESERVED_PROPERTIES
from protocol.message import (
    PROP_KEYS,
    PROP_TAGS,
    Message,
    MessageRecord,
    RecordError,
    decode_record,
    message_copy,
)
from protocol.timer import (
    PROP_REAL_QUEUE_ID,
    PROP_REAL_TOPIC,
    PROP_TIMER_OUT_MS,
    REQUEST_PROPERTIES,
    TIMER_TOPIC,
)
from storage.errors import StoreError
from storage.store import MessageStore
from storage.timer.request import requested_delivery_ms
from storage.timer.wheel import InvalidDeliveryTimeError, TimingWheel, WheelConfig

__all__ = [
    "ScheduleRefused",
    "admit",
    "due_for",
    "read_scheduled",
    "reserved_property",
    "scheduled_copy",
    "scheduling",
]

_REQUEST_SET: Final = frozenset(REQUEST_PROPERTIES)
STRIP_ON_DELIVERY: Final = frozenset({PROP_REAL_TOPIC, PROP_REAL_QUEUE_ID, PROP_KEYS, PROP_TAGS})
"""What a delivered message no longer carries of its scheduled record's properties."""


class ScheduleRefused(Exception):
    """A send refused by its scheduling properties (nothing stored): ``remark`` says why."""

    def __init__(self, remark: str) -> None:
        super().__init__(remark)
        self.remark = remark


def scheduling(msg: Message) -> bool:
    """Whether ``msg`` asks for a delivery time (one of the request properties is set)."""
    props = msg.properties
    return bool(props) and not _REQUEST_SET.isdisjoint(props)


def reserved_property(msg: Message) -> str | None:
    """The first broker-only timer property ``msg`` carries, None if it carries none."""
    props = msg.properties
    if not props or RESERVED_PROPERTIES.isdisjoint(props):
        return None
    return next(k for k in props if k in RESERVED_PROPERTIES)


def due_for(wheel: TimingWheel | None, config: WheelConfig, requested_ms: int, now: int) -> int:
    """The due time a message asking for ``requested_ms`` at ``now`` gets; raises
    :class:`InvalidDeliveryTimeError` when it is negative or beyond the maximum delay, or
    when scheduled delivery is off (no wheel)."""
    if wheel is None:
        raise InvalidDeliveryTimeError(
            "scheduled delivery is off on this broker (timer_enable = false)"
        )
    if requested_ms < 0:
        raise InvalidDeliveryTimeError(f"delivery time {requested_ms} is negative")
    due = wheel.due_time(requested_ms, now)
    max_delay = config.max_delay_ms
    if due - now > max_delay:
        raise InvalidDeliveryTimeError(
            f"delivery time {requested_ms} is {due - now} ms ahead, more than the maximum "
            f"delay of {max_delay} ms (timer_max_delay_ms)"
        )
    return due


def admit(
    wheel: TimingWheel | None, config: WheelConfig, messages: list[Message], now: int
) -> list[int | None]:
    """The due time each message of a send gets at ``now`` (None: an ordinary message).
    Raises :class:`ScheduleRefused` for a broker-only timer property or a malformed, negative
    or too distant delivery time (the whole send is refused)."""
    for msg in messages:
        reserved = reserved_property(msg)
        if reserved is not None:
            raise ScheduleRefused(
                f"property {reserved} is reserved for the broker's scheduled delivery"
            )
    out: list[int | None] = []
    try:
        for msg in messages:
            asked = requested_delivery_ms(msg.properties, now) if msg.properties else None
            out.append(None if asked is None else due_for(wheel, config, asked, now))
    except InvalidDeliveryTimeError as exc:
        raise ScheduleRefused(f"invalid delivery time: {exc}") from None
    return out


def scheduled_copy(msg: Message, topic: str, queue_id: int, due_ms: int) -> Message:
    """What is stored under the timer topic for ``msg``: its real topic and queue and its due
    time in properties, the request properties dropped (the due time is what counts)."""
    props = {k: v for k, v in msg.properties.items() if k not in _REQUEST_SET}
    props[PROP_REAL_TOPIC] = topic
    props[PROP_REAL_QUEUE_ID] = str(queue_id)
    props[PROP_TIMER_OUT_MS] = str(due_ms)
    return message_copy(msg, TIMER_TOPIC, props)


def read_scheduled(store: MessageStore, offset: int) -> MessageRecord | None:
    """The record stored at CommitLog ``offset``, None when there is none there (outside the
    log, unreadable, or ``offset`` is not a record's start)."""
    if not store.min_offset <= offset < store.max_offset:
        return None
    try:
        view = store.read_raw(offset, 1)
        record = decode_record(view, 0)
    except (StoreError, RecordError):
        return None
    if record.physical_offset != offset:
        return None
    return record
