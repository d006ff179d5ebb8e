"""BrokerStats: a broker's recent rates (messages per second) from counters that only grow.

Pure: the broker hands it, about once a second, the time and its counters (messages put and
served per topic, of the topics put to or served since the sample before; the offsets each
consumer group committed per topic, all of them); it keeps the samples of the last
:data:`WINDOW_MS` and reports each counter's rate between the oldest of them and the newest
(brokerStatus' put and get TPS, statsAll's per topic and group TPS). A counter that went down (a
topic deleted and created again, an offset reset back) counts from zero.

A sample's work on the topics is the topics that moved, not every topic the broker ever took a
put for (it was: 6,250 topics' counters copied twice a second at 50,000 queues, the largest
part of an idle master's own CPU, issue 34). Memory: every topic's counters twice (as of the
oldest sample and the newest) and, per sample, the topics that moved and the offsets' sums.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Iterable, Mapping
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
    __slots__ = ("_base_got", "_base_put", "_got", "_put", "_samples", "latest")

    def __init__(self) -> None:
        self._samples: deque[tuple[int, Counters]] = deque()
        """(time, the put and served counters of the topics that moved since the sample before
        and every committed offset sum)."""
        self._base_put: dict[str, int] = {}
        self._base_got: dict[str, int] = {}
        """Every topic's counters as of the oldest sample (the later samples' are not in them)."""
        self._put: dict[str, int] = {}
        self._got: dict[str, int] = {}
        self.latest = Counters(self._put, self._got)
        """The newest sample's counters (the totals since the broker started; read them at
        once, they move with the next sample)."""

    def due(self, now_ms: int) -> bool:
        """Should the caller read the counters for a sample now?"""
        return not self._samples or now_ms - self._samples[-1][0] >= SAMPLE_MS

    def observe(self, now_ms: int, moved: Counters) -> None:
        """One sample at ``now_ms`` (ignored when not :meth:`due`): ``moved.put`` and
        ``moved.got`` hold the counters of the topics that moved since the last sample (every
        topic's will do), ``moved.consumed`` every offset sum."""
        if not self.due(now_ms):
            return
        samples = self._samples
        samples.append((now_ms, moved))
        self._put.update(moved.put)
        self._got.update(moved.got)
        self.latest = Counters(self._put, self._got, moved.consumed)
        if len(samples) == 1:
            self._base_put.update(moved.put)
            self._base_got.update(moved.got)
        while len(samples) > SAMPLES:
            samples.popleft()
            self._base_put.update(samples[0][1].put)  # the new oldest sample's counters
            self._base_got.update(samples[0][1].got)

    def rates(self) -> Rates:
        """The rates of the counters that moved within the window (one that did not has none:
        0)."""
        if len(self._samples) < 2:
            return Rates()
        (t0, old), (t1, new) = self._samples[0], self._samples[-1]
        seconds = (t1 - t0) / 1000
        put: set[str] = set()
        got: set[str] = set()
        for i, (_, moved) in enumerate(self._samples):
            if i:  # the oldest sample's counters are the base's
                put.update(moved.put)
                got.update(moved.got)
        return Rates(
            window_ms=t1 - t0,
            put=_rates(self._base_put, {t: self._put[t] for t in put}, seconds),
            got=_rates(self._base_got, {t: self._got[t] for t in got}, seconds),
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
    topics: Iterable[str] | None = None,
) -> Counters:
    """A sample: messages put and served per topic (of ``topics`` only when given: the ones
    that moved since the last sample), and each group's committed offsets summed over a topic's
    queues: from ``offsets`` (group -> topic -> queue id -> offset), or ``consumed``, those sums
    as the offset table keeps them (ConsumerOffsetStore.consumed: the broker's sample each
    second, which summing a snapshot of the whole table made cost 28 ms at 10,000 groups on its
    event loop, issue 34)."""
    if consumed is None:
        consumed = {
            (group, topic): sum(queues.values())
            for group, topics in (offsets or {}).items()
            for topic, queues in topics.items()
        }
    if topics is None:
        picked: Mapping[str, TopicTotals] = by_topic
    else:
        picked = {t: by_topic[t] for t in topics if t in by_topic}
    return Counters(
        put={t: c.messages_in for t, c in picked.items()},
        got={t: c.messages_out for t, c in picked.items()},
        consumed=consumed,
    )


class Traffic(Protocol):
    """What :func:`sample` reads of the broker's traffic (broker.metrics.TopicTraffic)."""

    @property
    def by_topic(self) -> Mapping[str, TopicTotals]: ...

    def take_touched(self) -> set[str]: ...


def sample(
    stats: BrokerStats,
    traffic: Traffic,
    consumed: Callable[[], Mapping[tuple[str, str], int]],
    now_ms: int,
) -> None:
    """The broker's sample, once a second: the counters of the topics put to or served since
    the last one (not every topic's: issue 34) and the offsets' sums."""
    if stats.due(now_ms):
        moved = traffic.take_touched()
        stats.observe(now_ms, counters(traffic.by_topic, consumed=consumed(), topics=moved))
