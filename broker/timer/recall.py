"""Recalling a scheduled message before it is due: the checks and the recall record.

:func:`recall_marker` decides whether a recall of ``msg_id`` for ``topic`` is taken (the
message is a pending scheduled message of that topic) and builds the record that cancels it;
the timer service appends that record (replicas cancel from the CommitLog too) and cancels the
entry in its wheel in the same step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from broker.timer.schedule import read_scheduled
from protocol.codes import ResponseCode
from protocol.message import Message, RecordError, make_msg_id, parse_msg_id
from protocol.refusal import RequestRefused
from protocol.timer import PROP_REAL_TOPIC, PROP_TIMER_DEL_UNIQKEY, PROP_TIMER_OUT_MS, TIMER_TOPIC
from storage.store import MessageStore
from storage.timer.wheel import TimingWheel

__all__ = ["RECALL_BODY", "Recall", "RecallError", "recall_marker"]

RECALL_BODY: Final = b"recall"


class RecallError(RequestRefused):
    """A recall refused: ``code`` and ``remark`` go into the answer."""


@dataclass(frozen=True, slots=True)
class Recall:
    """A recall taken: the scheduled message's due time and CommitLog offset, and the record
    to append."""

    due_ms: int
    offset: int
    marker: Message


def recall_marker(
    wheel: TimingWheel | None, store: MessageStore, topic: str, msg_id: str
) -> Recall:
    """Check a recall of ``msg_id`` (a scheduled message of ``topic``) against the store and
    the wheel; raises :class:`RecallError` with the answer's code when it is refused."""
    if wheel is None:
        raise RecallError(
            ResponseCode.SERVICE_NOT_AVAILABLE,
            "scheduled delivery is off on this broker (timer_enable = false)",
        )
    try:
        _host, offset = parse_msg_id(msg_id)
    except RecordError:
        raise RecallError(ResponseCode.BAD_REQUEST, f"malformed message id {msg_id!r}") from None
    record = read_scheduled(store, offset)
    if record is None:
        raise RecallError(
            ResponseCode.QUERY_NOT_FOUND,
            f"no message {msg_id} on this broker (unknown id or deleted)",
        )
    props = record.properties
    if (
        record.topic != TIMER_TOPIC
        or PROP_TIMER_DEL_UNIQKEY in props
        or props.get(PROP_REAL_TOPIC) != topic
    ):
        raise RecallError(
            ResponseCode.MESSAGE_ILLEGAL,
            f"message {msg_id} is not a scheduled message of topic {topic}",
        )
    try:
        due = int(props[PROP_TIMER_OUT_MS])
    except (KeyError, ValueError):
        raise RecallError(
            ResponseCode.MESSAGE_ILLEGAL, f"message {msg_id} has no valid {PROP_TIMER_OUT_MS}"
        ) from None
    if not wheel.pending(due, offset):
        raise RecallError(
            ResponseCode.QUERY_NOT_FOUND,
            f"scheduled message {msg_id} was already delivered or recalled",
        )
    marker = Message(
        topic=TIMER_TOPIC,
        body=RECALL_BODY,
        properties={
            PROP_TIMER_DEL_UNIQKEY: make_msg_id(record.store_host, offset),
            PROP_TIMER_OUT_MS: str(due),
            PROP_REAL_TOPIC: topic,
        },
    )
    return Recall(due, offset, marker)
