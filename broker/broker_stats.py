"""BrokerStats: a broker's recent rates (messages per second) from counters that only grow.

Pure: the broker hands it, about once a second, the time and its counters (messages put and
served per topic, the offsets each consumer group committed per topic); it keeps the samples of
the last :data:`WINDOW_MS` and reports each counter's rate between the oldest of them and the
newest (brokerStatus' put and get TPS, statsAll's per topic and group TPS). A counter that went
down (a topic deleted and created again, an offset reset back) counts from zero.
Memory: :data:`SAMPLES` copies of the counters.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

K = TypeVar("K", bound=Hashable)

WINDOW_MS = 10_000
"""The rates are over about this long (the samples' span once the broker ran this long)."""
SAMPLE_MS = 1_000
SAMPLES = WINDOW_MS // SAMPLE_MS + 1


@dataclass(frozen=True, slots=True)
class Counters:
    """One sample: messages put and served per topic, offsets committed per (group, topic)."""

    put: Mapping[str, int] = field(default_factory=dict)
    got: Mapping[str, int] = field(default_factory=dict)
    consumed: Mapping[tuple[str, str], int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Rates:
    """Messages per second over ``window_ms`` (0 until two samples exist)."""

    window_ms: int = 0
    put: Mapping[str, float] = field(default_factory=dict)
    got: Mapping[str, float] = field(default_factory=dict)
    consumed: Mapping[tuple[str, str], float] = field(default_factory=dict)

    @property
    def put_tps(self) -> float:
        return float(sum(self.put.values()))  # a float also with no topic (0.0, not 0)

    @property
    def get_tps(self) -> float:
        return float(sum(self.got.values()))


def _rates(old: Mapping[K, int], new: Mapping[K, int], seconds: float) -> dict[K, float]:
    # A counter that went down (deleted and created again, reset back) counts from its new value.
    return {k: (v - old.get(k, 0) if v >= old.get(k, 0) else v) / seconds for k, v in new.items()}


class BrokerStats:
    __slots__ = ("_samples", "latest")

    def __init__(self) -> None:
        self._samples: deque[tuple[int, Counters]] = deque(maxlen=SAMPLES)
        self.latest = Counters()
        """The newest sample's counters (the totals since the broker started)."""

    def due(self, now_ms: int) -> bool:
        """Should the caller read the counters for a sample now?"""
        return not self._samples or now_ms - self._samples[-1][0] >= SAMPLE_MS

    def observe(self, now_ms: int, counters: Counters) -> None:
        """One sample at ``now_ms`` (ignored when not :meth:`due`)."""
        if self.due(now_ms):
            self._samples.append((now_ms, counters))
            self.latest = counters

    def rates(self) -> Rates:
        if len(self._samples) < 2:
            return Rates()
        (t0, old), (t1, new) = self._samples[0], self._samples[-1]
        seconds = (t1 - t0) / 1000
        return Rates(
            window_ms=t1 - t0,
            put=_rates(old.put, new.put, seconds),
            got=_rates(old.got, new.got, seconds),
            consumed=_rates(old.consumed, new.consumed, seconds),
        )


class TopicTotals(Protocol):
    """What :func:`counters` reads of a topic's counters (broker.metrics.TopicCounts)."""

    messages_in: int
    messages_out: int


def counters(
    by_topic: Mapping[str, TopicTotals],
    offsets: Mapping[str, Mapping[str, Mapping[int, int]]] | None = None,
    consumed: Mapping[tuple[str, str], int] | None = None,
) -> Counters:
    """A sample: messages put and served per topic, and each group's committed offsets summed
    over a topic's queues: from ``offsets`` (group -> topic -> queue id -> offset), or
    ``consumed``, those sums as the offset table keeps them (ConsumerOffsetStore.consumed: the
    broker's sample each second, which summing a snapshot of the whole table made cost 28 ms at
    10,000 groups on its event loop, issue 34)."""
    if consumed is None:
        consumed = {
            (group, topic): sum(queues.values())
            for group, topics in (offsets or {}).items()
            for topic, queues in topics.items()
        }
    return Counters(
        put={t: c.messages_in for t, c in by_topic.items()},
        got={t: c.messages_out for t, c in by_topic.items()},
        consumed=consumed,
    )
