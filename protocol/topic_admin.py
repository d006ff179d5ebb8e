"""Deleting topics and consumer groups, and a topic's queue status, as a broker takes them
(docs/protocol.md, "Deleting topics and groups"). Pure: no sockets, no clock.

Requests (``?`` marks a field that may be left out)::

    DELETE_TOPIC_IN_BROKER 215     header topic, force?, dryRun?; body? {"retireAt": {queueId:
                                   next queue offset}} (the group master's own marks)
    DELETE_SUBSCRIPTIONGROUP 207   header groupName, removeDlq?
    GET_TOPIC_STATS_INFO 202       header topic

Answers: 215's SUCCESS is :class:`TopicRetired` (body ``{"retired": {queueId: next offset}}``,
where the deleted queues ended: a re-created topic's queues continue there, empty); 207's
SUCCESS has no fields; 202's SUCCESS is :class:`TopicStats` (body ``{"queues": [[queueId,
minOffset, maxOffset, lastUpdateMs], ...]}``, ``lastUpdateMs`` the store time of the queue's
newest message, 0 when it has none).

The same codes (216 for a topic, 207 for a group) sent to the controllers delete everywhere:
:mod:`protocol.controller_requests.topics`.

Refusals shared by both: a system topic (``rmq_sys_`` in any case, RocketMQ's
``RMQ_SYS_``/``TBW102`` and the broker's own) or a group's retry and dead-letter topics
(``%RETRY%``/``%DLQ%``: deleteSubGroup removes them) by :func:`topic_delete_refusal`; a system
group by :func:`group_delete_refusal`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from protocol.broker_requests import body_map, pack_map, req_group
from protocol.codes import RequestCode
from protocol.fields import FieldError, opt_bool, req_str
from protocol.one_field import TopicOnly
from protocol.remoting import Header, Scalar
from protocol.retry import group_error

__all__ = [
    "DeleteGroupInBroker",
    "DeleteTopicInBroker",
    "QueueStatus",
    "TopicRetired",
    "TopicStats",
    "TopicStatsQuery",
    "group_delete_refusal",
    "topic_delete_refusal",
]

RETRY_PREFIX: Final = "%RETRY%"
DLQ_PREFIX: Final = "%DLQ%"
_SYSTEM_TOPICS: Final = frozenset({"TBW102", "SCHEDULE_TOPIC_XXXX", "OFFSET_MOVED_EVENT"})
_SYSTEM_GROUP_PREFIXES: Final = ("cid_rmq_sys_", "rmq_sys_")
_SYSTEM_GROUPS: Final = frozenset({"TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "SELF_TEST_C_GROUP"})


def topic_delete_refusal(topic: str) -> str | None:
    """Why ``topic`` may not be deleted by deleteTopic (a system topic, a group's retry or
    dead-letter topic), or None."""
    if topic.lower().startswith("rmq_sys_") or topic in _SYSTEM_TOPICS:
        return f"topic {topic} is a system topic: the brokers need it"
    if topic.startswith(RETRY_PREFIX) or topic.startswith(DLQ_PREFIX):
        return (
            f"topic {topic} belongs to a consumer group: deleteSubGroup removes the retry topic "
            "(and the dead-letter one with --remove-dlq)"
        )
    return None


def group_delete_refusal(group: str) -> str | None:
    """Why consumer group ``group`` may not be deleted (a bad name, a system group), or None."""
    error = group_error(group)
    if error is not None:
        return error
    if group.lower().startswith(_SYSTEM_GROUP_PREFIXES) or group in _SYSTEM_GROUPS:
        return f"group {group} is a system group: the brokers need it"
    return None


def _offset_map(value: Any, what: str) -> dict[int, int]:
    if not isinstance(value, dict):
        raise FieldError(f"{what} must map queue ids to offsets")
    out: dict[int, int] = {}
    for key, offset in value.items():
        try:
            queue_id = int(key)
        except (TypeError, ValueError):
            raise FieldError(f"{what}: queue id {key!r} is not an integer") from None
        if type(offset) is not int or offset < 0 or queue_id < 0:
            raise FieldError(f"{what}: queue {key!r} needs a non-negative integer offset")
        out[queue_id] = offset
    return out


def _str_keys(table: Mapping[int, int]) -> dict[str, int]:
    return {str(q): table[q] for q in sorted(table)}


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteTopicInBroker:
    """DELETE_TOPIC_IN_BROKER: delete ``topic``'s config, ConsumeQueues and offsets here.

    ``force`` deletes it even while a producer sends to it here; ``dry_run`` only answers
    whether it would (the controllers ask every master before they commit a delete).
    ``retire_at`` (from the controllers, the group's master's answer) raises where this
    replica's queues are marked to end, so records of the old topic it receives later are not
    dispatched."""

    code: ClassVar[RequestCode] = RequestCode.DELETE_TOPIC_IN_BROKER

    topic: str
    force: bool = False
    retire_at: dict[int, int] = field(default_factory=dict)
    dry_run: bool = False

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {"topic": self.topic}
        if self.force:
            header["force"] = True
        if self.dry_run:
            header["dryRun"] = True
        body = pack_map({"retireAt": _str_keys(self.retire_at)}) if self.retire_at else None
        return header, body

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> DeleteTopicInBroker:
        retire = body_map(body, "DELETE_TOPIC_IN_BROKER body").get("retireAt", {})
        return cls(
            topic=req_str(header, "topic"),
            force=opt_bool(header, "force"),
            retire_at=_offset_map(retire, "retireAt"),
            dry_run=opt_bool(header, "dryRun"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicRetired:
    """DELETE_TOPIC_IN_BROKER's SUCCESS: where each deleted queue ended (next queue offset)."""

    retired: dict[int, int] = field(default_factory=dict)

    def encode(self) -> tuple[Header, bytes | None]:
        return {}, pack_map({"retired": _str_keys(self.retired)})

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> TopicRetired:
        return cls(
            retired=_offset_map(body_map(body, "retired queues").get("retired", {}), "retired")
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteGroupInBroker:
    """DELETE_SUBSCRIPTIONGROUP to a broker: the group's settings, its offsets on every topic,
    its retry topic and, with ``remove_dlq``, its dead-letter topic."""

    code: ClassVar[RequestCode] = RequestCode.DELETE_SUBSCRIPTIONGROUP

    group: str
    remove_dlq: bool = False

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {"groupName": self.group}
        if self.remove_dlq:
            header["removeDlq"] = True
        return header, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> DeleteGroupInBroker:
        return cls(group=req_group(header, "groupName"), remove_dlq=opt_bool(header, "removeDlq"))


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicStatsQuery(TopicOnly):
    """GET_TOPIC_STATS_INFO: the topic's queues on this broker."""

    code: ClassVar[RequestCode] = RequestCode.GET_TOPIC_STATS_INFO


@dataclass(frozen=True, slots=True)
class QueueStatus:
    queue_id: int
    min_offset: int
    max_offset: int
    last_update_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicStats:
    """GET_TOPIC_STATS_INFO's SUCCESS: one :class:`QueueStatus` per queue, by queue id."""

    queues: tuple[QueueStatus, ...] = ()

    def encode(self) -> tuple[Header, bytes | None]:
        rows = [[q.queue_id, q.min_offset, q.max_offset, q.last_update_ms] for q in self.queues]
        return {}, pack_map({"queues": rows})

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> TopicStats:
        rows = body_map(body, "topic status").get("queues")
        if not isinstance(rows, list):
            raise FieldError("queues must be a list")
        out: list[QueueStatus] = []
        for row in rows:
            if (
                not isinstance(row, list)
                or len(row) != 4
                or not all(type(v) is int and v >= 0 for v in row)
            ):
                raise FieldError("a queue status is [queueId, minOffset, maxOffset, lastUpdateMs]")
            out.append(QueueStatus(*row))
        return cls(queues=tuple(out))
