"""Consumer retry and dead-letter queues: names, a group's settings and the retry decision.

Pure code: no clock, no I/O. The broker, the SDK and ``rmqctl`` share it, so a setting is
parsed and checked the same way everywhere.

A nacked message goes back to its broker (CONSUMER_SEND_MSG_BACK). The broker asks
:func:`next_step` what to do with it: re-publish it to the group's retry topic
(:func:`retry_topic`, ``%RETRY%<group>``) after the back-off of its reconsume count, or, once
the count reached the group's ``retry_max_times``, append it to the group's dead-letter topic
(:func:`dlq_topic`, ``%DLQ%<group>``) at once. The copies carry RocketMQ's properties
(``RETRY_TOPIC``, ``ORIGIN_MESSAGE_ID``, ``RECONSUME_TIME``; ``DLQ_ORIGIN_TOPIC`` and
``DLQ_ORIGIN_MESSAGE_ID`` in the DLQ) and two of our own (the last failure reason, and the
mark of a message re-sent from a DLQ).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

RETRY_GROUP_TOPIC_PREFIX: Final = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX: Final = "%DLQ%"

PROP_RETRY_TOPIC: Final = "RETRY_TOPIC"
"""The topic the message was first published to (RocketMQ's name)."""
PROP_ORIGIN_MESSAGE_ID: Final = "ORIGIN_MESSAGE_ID"
"""The id of the first stored copy of the message (RocketMQ's name)."""
PROP_RECONSUME_TIME: Final = "RECONSUME_TIME"
"""How many times the message was sent back (RocketMQ's name): 1 on the first retry copy."""
PROP_MAX_RECONSUME_TIMES: Final = "MAX_RECONSUME_TIMES"
PROP_DLQ_ORIGIN_TOPIC: Final = "DLQ_ORIGIN_TOPIC"
PROP_DLQ_ORIGIN_MESSAGE_ID: Final = "DLQ_ORIGIN_MESSAGE_ID"
PROP_FAILURE_REASON: Final = "CONSUME_FAILURE_REASON"
"""Ours: the reason the consumer gave with its last nack (cut to :data:`MAX_REASON_CHARS`)."""
PROP_DLQ_RESENT_FROM: Final = "DLQ_RESENT_FROM"
"""Ours: on a message re-sent from a DLQ, the id of the DLQ message it came from."""

MAX_REASON_CHARS: Final = 512
MAX_GROUP_CHARS: Final = 120
MAX_RETRY_TIMES: Final = 10_000
MAX_DELAY_LEVELS: Final = 64
MAX_DELAY_MS: Final = 40 * 24 * 3600 * 1000
"""The timing wheel's reach: a back-off level may not be longer."""

DEFAULT_RETRY_MAX_TIMES: Final = 16
DEFAULT_DELAY_LEVELS: Final = "10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
"""RocketMQ's levels 3..18, the ones its retries use."""

_GROUP_RE: Final = re.compile(r"[A-Za-z0-9_|.\-]+")
_LEVEL_RE: Final = re.compile(r"(\d+)(ms|s|m|h|d)")
_UNIT_MS: Final = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


class RetryConfigError(ValueError):
    """A subscription group setting that cannot be stored (the message says which and why)."""


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group


def group_error(group: str) -> str | None:
    """Why ``group`` cannot name a consumer group (it also names its retry and DLQ topics)."""
    if not group or len(group) > MAX_GROUP_CHARS:
        return f"consumer group must be 1..{MAX_GROUP_CHARS} characters"
    if _GROUP_RE.fullmatch(group) is None:
        return f"consumer group {group!r} may hold only letters, digits and _ | . -"
    return None


def parse_delay_levels(text: str) -> tuple[int, ...]:
    """``"10s 30s 1m"`` -> (10000, 30000, 60000). Units: ms, s, m, h, d; separated by spaces
    or commas; at least one level, each at most 40 days."""
    parts = [p for p in re.split(r"[\s,]+", text.strip()) if p]
    if not parts:
        raise RetryConfigError("retry delays: at least one level is needed, e.g. '10s 30s 1m'")
    if len(parts) > MAX_DELAY_LEVELS:
        raise RetryConfigError(f"retry delays: at most {MAX_DELAY_LEVELS} levels")
    levels = []
    for part in parts:
        match = _LEVEL_RE.fullmatch(part)
        if match is None:
            raise RetryConfigError(
                f"retry delays: {part!r} is not a delay (a whole number and one of "
                "ms, s, m, h, d: '500ms', '10s', '2m', '1h')"
            )
        ms = int(match.group(1)) * _UNIT_MS[match.group(2)]
        if ms > MAX_DELAY_MS:
            raise RetryConfigError(f"retry delays: {part!r} is longer than 40 days")
        levels.append(ms)
    return tuple(levels)


def format_delay_levels(levels: Sequence[int]) -> str:
    """The inverse of :func:`parse_delay_levels`, in the largest unit that divides each."""
    out = []
    for ms in levels:
        for unit in ("d", "h", "m", "s"):
            if ms and ms % _UNIT_MS[unit] == 0:
                out.append(f"{ms // _UNIT_MS[unit]}{unit}")
                break
        else:
            out.append(f"{ms}ms")
    return " ".join(out)


DEFAULT_LEVELS_MS: Final = parse_delay_levels(DEFAULT_DELAY_LEVELS)


@dataclass(frozen=True, slots=True)
class SubscriptionGroupConfig:
    """A consumer group's retry settings (RocketMQ's SubscriptionGroupConfig, the part we use)."""

    group: str
    retry_max_times: int = DEFAULT_RETRY_MAX_TIMES
    retry_delays_ms: tuple[int, ...] = DEFAULT_LEVELS_MS
    consume_retry: bool = True
    """Whether the group's members also consume its retry topic (and nacks are accepted)."""
    consume_orderly: bool = False
    """A FIFO group (RocketMQ's ``consumeMessageOrderly``): its members consume each queue in
    order and retry a failed message in place, after the back-off of its attempt, up to
    ``retry_max_times`` (nothing goes to the retry topic); past it a send-back goes to the DLQ."""

    def to_dict(self) -> dict[str, object]:
        return {
            "groupName": self.group,
            "retryMaxTimes": self.retry_max_times,
            "retryDelays": format_delay_levels(self.retry_delays_ms),
            "consumeRetryEnable": self.consume_retry,
            "consumeMessageOrderly": self.consume_orderly,
        }


FIELDS: Final = frozenset(
    {"groupName", "retryMaxTimes", "retryDelays", "consumeRetryEnable", "consumeMessageOrderly"}
)
"""The keys of a group's settings on the wire and in ``subscriptionGroup.json``."""


def config_from_dict(
    doc: Mapping[str, object], base: SubscriptionGroupConfig | None = None
) -> SubscriptionGroupConfig:
    """Check and build a group's settings from ``doc`` (the keys of :data:`FIELDS`;
    ``groupName`` required). Keys left out keep ``base``'s value (the defaults without one).
    Raises :class:`RetryConfigError` naming the first bad key."""
    unknown = sorted(str(k) for k in doc if k not in FIELDS)
    if unknown:
        raise RetryConfigError(
            f"unknown subscription group setting(s): {', '.join(unknown)} "
            f"(known: {', '.join(sorted(FIELDS))})"
        )
    group = doc.get("groupName")
    if not isinstance(group, str):
        raise RetryConfigError("groupName must be a string")
    bad_group = group_error(group)
    if bad_group is not None:
        raise RetryConfigError(bad_group)
    if base is None or base.group != group:
        base = SubscriptionGroupConfig(group)
    times = doc.get("retryMaxTimes", base.retry_max_times)
    if type(times) is not int or not 0 <= times <= MAX_RETRY_TIMES:
        raise RetryConfigError(f"retryMaxTimes must be an integer 0..{MAX_RETRY_TIMES}")
    delays = doc.get("retryDelays")
    if delays is None:
        levels = base.retry_delays_ms
    elif isinstance(delays, str):
        levels = parse_delay_levels(delays)
    else:
        raise RetryConfigError("retryDelays must be a string such as '10s 30s 1m'")
    consume = doc.get("consumeRetryEnable", base.consume_retry)
    if not isinstance(consume, bool):
        raise RetryConfigError("consumeRetryEnable must be a boolean")
    orderly = doc.get("consumeMessageOrderly", base.consume_orderly)
    if not isinstance(orderly, bool):
        raise RetryConfigError("consumeMessageOrderly must be a boolean")
    return SubscriptionGroupConfig(group, times, levels, consume, orderly)


# -- the decision ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Retry:
    """Re-publish to the retry topic, due ``delay_ms`` from now, as reconsume ``count``."""

    delay_ms: int
    count: int


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """Append to the DLQ now; ``count`` is how many times the message was retried."""

    count: int


def backoff_ms(config: SubscriptionGroupConfig, reconsumed: int) -> int:
    """The delay before retry number ``reconsumed + 1``: level ``reconsumed``, the last level
    for every retry past the schedule's end."""
    levels = config.retry_delays_ms
    return levels[min(max(reconsumed, 0), len(levels) - 1)]


def next_step(
    config: SubscriptionGroupConfig, reconsumed: int, client_max: int | None = None
) -> Retry | DeadLetter:
    """What to do with a message nacked after ``reconsumed`` retries. ``client_max`` (the
    consumer's own maximum, when it sends one) lowers the group's ``retry_max_times``."""
    limit = config.retry_max_times
    if client_max is not None and 0 <= client_max < limit:
        limit = client_max
    if reconsumed >= limit:
        return DeadLetter(reconsumed)
    return Retry(backoff_ms(config, reconsumed), reconsumed + 1)


def reconsume_times(properties: Mapping[str, str]) -> int:
    """A stored message's reconsume count (0 when absent or unreadable)."""
    try:
        return max(0, int(properties.get(PROP_RECONSUME_TIME, "0")))
    except ValueError:
        return 0


def clip_reason(reason: str) -> str:
    """A reason fit for a property: one line, at most :data:`MAX_REASON_CHARS` characters."""
    flat = " ".join(reason.replace("\x01", " ").replace("\x02", " ").split())
    return flat[:MAX_REASON_CHARS]


# -- the copies' properties -------------------------------------------------------------------
_NOT_COPIED: Final = frozenset(
    {
        "KEYS",
        "TAGS",
        # Scheduled delivery's (protocol.timer): a retry copy is scheduled afresh.
        "TIMER_DELIVER_MS",
        "TIMER_DELAY_MS",
        "TIMER_DELAY_SEC",
        "__STARTDELIVERTIME",
        "TIMER_OUT_MS",
        "TIMER_ENQUEUE_MS",
        "TIMER_DEQUEUE_MS",
        "TIMER_SOURCE_OFFSET",
        "TIMER_DEL_UNIQKEY",
        "REAL_TOPIC",
        "REAL_QID",
    }
)
_RETRY_STATE: Final = frozenset(
    {
        PROP_RETRY_TOPIC,
        PROP_RECONSUME_TIME,
        PROP_MAX_RECONSUME_TIMES,
        PROP_DLQ_ORIGIN_TOPIC,
        PROP_DLQ_ORIGIN_MESSAGE_ID,
        PROP_FAILURE_REASON,
    }
)


def origin_message_id(properties: Mapping[str, str], stored_id: str) -> str:
    """The id of the message's first copy: its ``ORIGIN_MESSAGE_ID``, else the id the
    producer was given (``UNIQ_KEY``, kept by scheduled delivery), else its stored id."""
    return properties.get(PROP_ORIGIN_MESSAGE_ID) or properties.get("UNIQ_KEY") or stored_id


def sent_back_properties(
    properties: Mapping[str, str],
    *,
    origin_topic: str,
    origin_id: str,
    step: Retry | DeadLetter,
    reason: str,
) -> dict[str, str]:
    """The properties of a nacked message's retry or DLQ copy (keys and tags travel apart)."""
    props = {k: v for k, v in properties.items() if k not in _NOT_COPIED}
    props.pop(PROP_FAILURE_REASON, None)
    props[PROP_RETRY_TOPIC] = origin_topic
    props[PROP_ORIGIN_MESSAGE_ID] = origin_id
    props[PROP_RECONSUME_TIME] = str(step.count)
    if reason:
        props[PROP_FAILURE_REASON] = reason
    if isinstance(step, DeadLetter):
        props[PROP_DLQ_ORIGIN_TOPIC] = origin_topic
        props[PROP_DLQ_ORIGIN_MESSAGE_ID] = origin_id
    return props


def dlq_origin_topic(properties: Mapping[str, str]) -> str:
    """The topic a DLQ message came from ("" when it carries none)."""
    return properties.get(PROP_DLQ_ORIGIN_TOPIC) or properties.get(PROP_RETRY_TOPIC) or ""


def resent_properties(properties: Mapping[str, str], dlq_msg_id: str) -> dict[str, str]:
    """The properties of a DLQ message re-sent to its topic: the application's kept, the retry
    state (count, reason, origin topic) dropped, ``DLQ_RESENT_FROM`` added. The first copy's
    id stays in ``ORIGIN_MESSAGE_ID``."""
    props = {k: v for k, v in properties.items() if k not in _NOT_COPIED and k not in _RETRY_STATE}
    props[PROP_DLQ_RESENT_FROM] = dlq_msg_id
    return props
