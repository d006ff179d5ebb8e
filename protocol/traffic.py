"""A broker's traffic report: the body of its BROKER_HEARTBEAT (904).

Messages put per second on this broker over its recent window (``traffic_window_ms``), in all
and for its busiest topics, per queue. A measurement, re-sent with every heartbeat: the
controllers keep the newest one per broker in memory only (docs/static-topics.md, "Placement
and re-balancing by traffic").

Wire form (msgpack)::

    {"windowMs": int, "msgPerSec": float,
     "topics": {topic: {"msgPerSec": float, "queues": {queueId (int): float}}}}

``msgPerSec`` at the top counts every topic, also those left out of ``topics`` (at most
:data:`MAX_TOPICS` topics, each with at most :data:`MAX_QUEUES` queues). A body that breaks any
of this decodes to :class:`TrafficError`; the heartbeat is answered all the same (liveness never
depends on a measurement) and the report is dropped.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgpack

MAX_TOPICS = 256
"""Most topics one report may name."""
MAX_QUEUES = 1024
"""Most queues per topic (a topic's queue count is at most 1024)."""
MAX_BODY_BYTES = 1 << 20


class TrafficError(ValueError):
    """A traffic report that is not one."""


@dataclass(frozen=True, slots=True)
class TopicRate:
    msg_per_sec: float
    queues: Mapping[int, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TrafficReport:
    window_ms: int
    msg_per_sec: float
    """Every topic's puts together."""
    topics: Mapping[str, TopicRate] = field(default_factory=dict)
    """The busiest topics, per queue."""

    def encode(self) -> bytes:
        doc = {
            "windowMs": self.window_ms,
            "msgPerSec": self.msg_per_sec,
            "topics": {
                t: {"msgPerSec": r.msg_per_sec, "queues": dict(r.queues)}
                for t, r in self.topics.items()
            },
        }
        out: bytes = msgpack.packb(doc)
        return out


def _rate(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TrafficError(f"{what} must be a number")
    rate = float(value)
    if not math.isfinite(rate) or rate < 0:
        raise TrafficError(f"{what} must be a finite number >= 0")
    return rate


def decode_report(body: bytes) -> TrafficReport:
    """The report in a heartbeat body; TrafficError naming the first thing wrong."""
    if len(body) > MAX_BODY_BYTES:
        raise TrafficError(f"traffic report of {len(body)} bytes (at most {MAX_BODY_BYTES})")
    try:
        doc = msgpack.unpackb(body, strict_map_key=False)
    except (ValueError, msgpack.UnpackException) as exc:
        raise TrafficError(f"traffic report is not msgpack: {exc}") from None
    if not isinstance(doc, dict):
        raise TrafficError("traffic report must be a map")
    window = doc.get("windowMs")
    if type(window) is not int or window <= 0:
        raise TrafficError("windowMs must be an integer > 0")
    total = _rate(doc.get("msgPerSec"), "msgPerSec")
    raw_topics = doc.get("topics", {})
    if not isinstance(raw_topics, dict) or len(raw_topics) > MAX_TOPICS:
        raise TrafficError(f"topics must be a map of at most {MAX_TOPICS} topics")
    topics: dict[str, TopicRate] = {}
    for name, entry in raw_topics.items():
        if not isinstance(name, str) or not name or not isinstance(entry, dict):
            raise TrafficError("topics must map topic names to {msgPerSec, queues}")
        raw_queues = entry.get("queues", {})
        if not isinstance(raw_queues, dict) or len(raw_queues) > MAX_QUEUES:
            raise TrafficError(f"{name}: queues must be a map of at most {MAX_QUEUES} queues")
        queues: dict[int, float] = {}
        for queue_id, rate in raw_queues.items():
            if type(queue_id) is not int or not 0 <= queue_id < MAX_QUEUES:
                raise TrafficError(f"{name}: queue ids must be integers 0 to {MAX_QUEUES - 1}")
            queues[queue_id] = _rate(rate, f"{name} queue {queue_id}")
        topics[name] = TopicRate(_rate(entry.get("msgPerSec"), f"{name} msgPerSec"), queues)
    return TrafficReport(window, total, topics)
