"""Moving a consumer group's offsets while its members run: INVOKE_BROKER_TO_RESET_OFFSET (222,
an operator or a member to a master) and RESET_CONSUMER_CLIENT_OFFSET (220, the master to the
group's members, oneway). RocketMQ's numbers and header names (ResetOffsetRequestHeader);
docs/operations.md, "Resetting offsets". Pure: no sockets, no clock.

Request (header fields; ``?`` may be left out)::

    INVOKE_BROKER_TO_RESET_OFFSET 222   topic, group, timestamp (epoch ms; -1: the queue's
                                        end, as skipAccumulatedMessage sends), isForce?
                                        (false: a queue only moves back), queueId? (-1: every
                                        queue), offset? (with a queueId: that queue offset,
                                        not a time), logicalOffset? (with an offset: a static
                                        topic's logical offset that this queue's offset holds,
                                        passed on in the notice), notify? (false: no notice,
                                        nothing kept for the next pull; default true)

A static topic's logical queue is reset on every item of it (each item's offset a commit point
of the logical offset): first the items that do not hold the logical offset with notify false,
then the one that holds it with logicalOffset. Its members are told once, by the master of the
item that holds it, after every other item's offset is written, and start again from the
logical offset the notice names (not from offsets read back meanwhile).

It answers SUCCESS with a msgpack map body, per queue what the reset did::

    {"queues": {queueId: {"offset", "previous" (nil: none committed), "min", "max",
                          "outcome": "reset" | "kept" | "min" | "max"}},
     "notified": members told}

``kept``: without isForce the group's committed offset was already before the time's (nothing
is skipped); ``min``: the time (or offset) is at or before the queue's first retained message,
the offset is its min; ``max``: the offset asked is past the queue's end, the offset is its end.

Notice (oneway, broker to member)::

    RESET_CONSUMER_CLIENT_OFFSET 220    topic, group, brokerName; body a msgpack map
                                        {"offsets": {queueId: offset},
                                         "logical"?: {queueId: logical offset}}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Literal, TypeGuard

from protocol.broker_requests import body_map, pack_map, req_group
from protocol.codes import RequestCode
from protocol.fields import FieldError, opt_bool, opt_int, opt_int_or_none, req_int, req_str
from protocol.remoting import Header, Scalar

__all__ = [
    "FUTURE_SLACK_MS",
    "OUTCOMES",
    "TO_MAX",
    "OffsetsReset",
    "QueueReset",
    "ResetNotice",
    "ResetOffset",
]

TO_MAX: Final = -1
"""The timestamp that means each queue's end (skipAccumulatedMessage)."""
FUTURE_SLACK_MS: Final = 1000
"""A time up to this far past the clock that checks it is taken as now (``now`` read on another
host); further is refused as in the future (by rmqctl, and by the broker on its clock)."""

Outcome = Literal["reset", "kept", "min", "max"]
OUTCOMES: Final[tuple[Outcome, ...]] = ("reset", "kept", "min", "max")


@dataclass(frozen=True, slots=True, kw_only=True)
class ResetOffset:
    """INVOKE_BROKER_TO_RESET_OFFSET: move ``group``'s offsets of ``topic`` on this broker to
    the first message stored at or after ``timestamp`` (:data:`TO_MAX`: to each queue's end),
    or with ``queue_id`` and ``offset`` that one queue to that offset. Without ``force`` a
    queue whose committed offset is before the target keeps it (a reset then only rewinds)."""

    code: ClassVar[RequestCode] = RequestCode.INVOKE_BROKER_TO_RESET_OFFSET

    topic: str
    group: str
    timestamp: int = TO_MAX
    force: bool = False
    queue_id: int = -1
    offset: int | None = None
    logical_offset: int | None = None
    notify: bool = True

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {
            "topic": self.topic,
            "group": self.group,
            "timestamp": self.timestamp,
            "isForce": self.force,
        }
        if self.queue_id >= 0:
            header["queueId"] = self.queue_id
        if self.offset is not None:
            header["offset"] = self.offset
        if self.logical_offset is not None:
            header["logicalOffset"] = self.logical_offset
        if not self.notify:
            header["notify"] = False
        return header, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> ResetOffset:
        topic = req_str(header, "topic")
        group = req_group(header, "group")
        timestamp = req_int(header, "timestamp")
        if timestamp < TO_MAX:
            raise FieldError(f"timestamp must be epoch ms or -1 (the end), not {timestamp}")
        queue_id = opt_int(header, "queueId", -1)
        if queue_id < -1:
            raise FieldError(f"queueId must be >= 0, or -1 for every queue, not {queue_id}")
        offset = opt_int_or_none(header, "offset")
        if offset is not None:
            if queue_id < 0:
                raise FieldError("an offset needs a queueId")
            if offset < 0:
                raise FieldError(f"offset must be >= 0, not {offset}")
        logical = opt_int_or_none(header, "logicalOffset")
        if logical is not None:
            if offset is None:
                raise FieldError("a logicalOffset needs a queueId and an offset")
            if logical < 0:
                raise FieldError(f"logicalOffset must be >= 0, not {logical}")
        return cls(
            topic=topic,
            group=group,
            timestamp=timestamp,
            force=opt_bool(header, "isForce"),
            queue_id=queue_id,
            offset=offset,
            logical_offset=logical,
            notify=opt_bool(header, "notify", True),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueReset:
    """What a reset did to one queue (see the module docstring for ``outcome``)."""

    offset: int
    previous: int | None
    min_offset: int
    max_offset: int
    outcome: Outcome

    def to_dict(self) -> dict[str, Any]:
        return {
            "offset": self.offset,
            "previous": self.previous,
            "min": self.min_offset,
            "max": self.max_offset,
            "outcome": self.outcome,
        }


def _queue_reset(doc: Any) -> QueueReset:
    if not isinstance(doc, dict):
        raise FieldError("a queue of the reset answer must be a map")
    ints = [doc.get(k) for k in ("offset", "min", "max")]
    previous = doc.get("previous")
    outcome = doc.get("outcome")
    if any(type(v) is not int for v in ints) or not (previous is None or type(previous) is int):
        raise FieldError("offset, min and max must be integers, previous an integer or nil")
    if outcome not in OUTCOMES:
        raise FieldError(f"outcome must be one of {', '.join(OUTCOMES)}, not {outcome!r}")
    offset, min_offset, max_offset = ints
    assert isinstance(offset, int) and isinstance(min_offset, int)
    assert isinstance(max_offset, int)
    return QueueReset(
        offset=offset,
        previous=previous,
        min_offset=min_offset,
        max_offset=max_offset,
        outcome=outcome,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetsReset:
    """The answer to :class:`ResetOffset`: per queue id what the reset did, and how many of
    the group's live members the broker told."""

    queues: dict[int, QueueReset]
    notified: int = 0

    def encode(self) -> tuple[Header, bytes | None]:
        doc = {
            "queues": {q: r.to_dict() for q, r in sorted(self.queues.items())},
            "notified": self.notified,
        }
        return {}, pack_map(doc)

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None) -> OffsetsReset:
        doc = body_map(body, "reset answer")
        queues = doc.get("queues", {})
        notified = doc.get("notified", 0)
        if not isinstance(queues, dict) or type(notified) is not int:
            raise FieldError("the reset answer needs a map of queues and a count notified")
        if any(type(q) is not int for q in queues):
            raise FieldError("the reset answer's queue ids must be integers")
        return cls(queues={q: _queue_reset(r) for q, r in queues.items()}, notified=notified)


@dataclass(frozen=True, slots=True, kw_only=True)
class ResetNotice:
    """RESET_CONSUMER_CLIENT_OFFSET: the master of ``broker_name`` moved ``group``'s offsets
    of ``topic``: queue id -> its new offset. A member drops what it pulled of those queues
    and goes on from there. ``logical``: for a static topic's item, queue id -> the logical
    offset its member goes on from (see the module docstring)."""

    code: ClassVar[RequestCode] = RequestCode.RESET_CONSUMER_CLIENT_OFFSET

    topic: str
    group: str
    broker_name: str
    offsets: dict[int, int]
    logical: dict[int, int] = field(default_factory=dict)

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {"topic": self.topic, "group": self.group, "brokerName": self.broker_name}
        doc: dict[str, Any] = {"offsets": dict(sorted(self.offsets.items()))}
        if self.logical:
            doc["logical"] = dict(sorted(self.logical.items()))
        return header, pack_map(doc)

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None) -> ResetNotice:
        doc = body_map(body, "reset notice")
        offsets = doc.get("offsets")
        if not _offset_map(offsets):
            raise FieldError("the reset notice needs offsets: a map of queue id to offset >= 0")
        logical = doc.get("logical", {})
        if not _offset_map(logical) or not logical.keys() <= offsets.keys():
            raise FieldError(
                "the reset notice's logical offsets must map queue ids of its offsets to "
                "offsets >= 0"
            )
        return cls(
            topic=req_str(header, "topic"),
            group=req_group(header, "group"),
            broker_name=req_str(header, "brokerName"),
            offsets=offsets,
            logical=logical,
        )


def _offset_map(value: object) -> TypeGuard[dict[int, int]]:
    return isinstance(value, dict) and all(
        type(q) is int and q >= 0 and type(o) is int and o >= 0 for q, o in value.items()
    )
