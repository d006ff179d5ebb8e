"""TrafficMeter: a broker's recent messages put per second, from its own put counters.

Pure: the caller hands it, with the time, the counters (messages put so far, per queue, as
:class:`broker.metrics.TopicCounts` keeps them) of the topics put to since its last sample
(:meth:`broker.metrics.TopicTraffic.moved_totals`; a topic not handed over is taken to be where
it was); it keeps about ten samples over the window and reports the rate between the oldest
sample at or before the window's start and the newest, for the busiest topics
(:mod:`protocol.traffic`). A sample's work is the topics put to within the window, not every
topic the broker ever took a put for (it was: each sample copied and compared every queue's
counter, 5 to 7 ms every 6 s at 10,000 queues, issue 34). Memory: one copy of the counters as of
the oldest sample and, per later sample, the topics that moved.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

from protocol.traffic import TopicRate, TrafficReport

Totals = Mapping[str, Mapping[int, int]]
"""Messages put so far: topic -> queue id -> count (only ever growing)."""

SAMPLES_PER_WINDOW = 10

FIRST_RATE_MS = 1000
"""After a start or a restart, the second sample (the first rate) comes this soon, not a whole
sample interval later (6 s at the default window): a new master's figures count at once."""


class TrafficMeter:
    __slots__ = (
        "_base",
        "_body",
        "_report",
        "_samples",
        "restart_pending",
        "sample_ms",
        "top_topics",
        "window_ms",
    )

    def __init__(self, window_ms: int, top_topics: int) -> None:
        self.window_ms = window_ms
        self.top_topics = top_topics
        self.sample_ms = max(window_ms // SAMPLES_PER_WINDOW, 1)
        self._samples: deque[tuple[int, Totals]] = deque()
        """(time, the counters of the topics that moved since the sample before)."""
        self._base: dict[str, Mapping[int, int]] = {}
        """Every topic's counters as of the oldest sample (the later samples' are not in it)."""
        self._report = TrafficReport(window_ms, 0.0)
        self._body = self._report.encode()
        self.restart_pending = False
        """Set (from any thread) when the broker's role changed: the sampler's next call is
        :meth:`restart` instead of :meth:`observe`."""

    def due(self, now_ms: int) -> bool:
        """Should the caller read the counters for a sample now?"""
        samples = self._samples
        if not samples:
            return True
        interval = self.sample_ms if len(samples) > 1 else min(self.sample_ms, FIRST_RATE_MS)
        return now_ms - samples[-1][0] >= interval

    def request_restart(self) -> None:
        """The broker's role changed (any thread): :meth:`restart` at the next sample."""
        self.restart_pending = True

    def restart(self, now_ms: int, totals: Totals) -> None:
        """Start the window again at ``now_ms`` from ``totals`` (every topic's counters now):
        a broker whose role just changed reports only what it put since. Otherwise a new
        master's window would hold its time as a slave, with nothing put, and spread its first
        puts over the whole window (a busy group read as nearly idle for up to ``window_ms``
        after a failover), and an old master's would keep its last rate while it puts nothing
        (counted beside its successor's). Reports zero until the next sample,
        :data:`FIRST_RATE_MS` later."""
        self.restart_pending = False
        self._samples = deque([(now_ms, {})])
        self._base = dict(totals)
        self._report = TrafficReport(self.window_ms, 0.0)
        self._body = self._report.encode()

    def observe(self, now_ms: int, moved: Totals) -> None:
        """One sample at ``now_ms``: ``moved`` holds the counters of the topics put to since
        the last one (every topic's will do; ignored when not :meth:`due`)."""
        if not self.due(now_ms):
            return
        samples = self._samples
        samples.append((now_ms, moved))
        if len(samples) == 1:
            self._base.update(moved)
        start = now_ms - self.window_ms
        while len(samples) > 2 and samples[1][0] <= start:
            samples.popleft()
            self._base.update(samples[0][1])  # the new oldest sample's counters
        self._report = self._rates()
        self._body = self._report.encode()

    def report(self) -> TrafficReport:
        """The rates as of the last sample (zero until two samples exist)."""
        return self._report

    def body(self) -> bytes:
        """:meth:`report` encoded (once per sample, not per heartbeat)."""
        return self._body

    def _rates(self) -> TrafficReport:
        if len(self._samples) < 2:
            return TrafficReport(self.window_ms, 0.0)
        t0, t1 = self._samples[0][0], self._samples[-1][0]
        seconds = (t1 - t0) / 1000
        new: dict[str, Mapping[int, int]] = {}
        for i, (_, moved) in enumerate(self._samples):
            if i:  # the oldest sample's counters are the base's
                new.update(moved)
        old = self._base
        topics: dict[str, TopicRate] = {}
        total = 0.0
        for topic, queues in new.items():
            before = old.get(topic, {})
            rates: dict[int, float] = {}
            for q, n in queues.items():
                b = before.get(q, 0)
                # Below its base, a counter counts from 0: the topic was deleted, created again.
                put = n - b if n >= b else n
                if put > 0:
                    rates[q] = put / seconds
            if rates:
                rate = sum(rates.values())
                total += rate
                topics[topic] = TopicRate(rate, rates)
        busiest = sorted(topics, key=lambda t: (-topics[t].msg_per_sec, t))[: self.top_topics]
        return TrafficReport(self.window_ms, total, {t: topics[t] for t in busiest})
