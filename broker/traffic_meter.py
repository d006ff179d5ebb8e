"""TrafficMeter: a broker's recent messages put per second, from its own put counters.

Pure: the caller hands it the counters (messages put so far, per topic and queue, as
:class:`broker.metrics.TopicCounts` keeps them) with the time; it keeps about ten samples over
the window and reports the rate between the oldest sample at or before the window's start and
the newest, for the busiest topics (:mod:`protocol.traffic`). Memory: ten copies of the
counters, whatever the heartbeat rate.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

from protocol.traffic import TopicRate, TrafficReport

Totals = Mapping[str, Mapping[int, int]]
"""Messages put so far: topic -> queue id -> count (only ever growing)."""

SAMPLES_PER_WINDOW = 10


class TrafficMeter:
    __slots__ = ("_body", "_report", "_samples", "sample_ms", "top_topics", "window_ms")

    def __init__(self, window_ms: int, top_topics: int) -> None:
        self.window_ms = window_ms
        self.top_topics = top_topics
        self.sample_ms = max(window_ms // SAMPLES_PER_WINDOW, 1)
        self._samples: deque[tuple[int, Totals]] = deque()
        self._report = TrafficReport(window_ms, 0.0)
        self._body = self._report.encode()

    def due(self, now_ms: int) -> bool:
        """Should the caller read the counters for a sample now?"""
        return not self._samples or now_ms - self._samples[-1][0] >= self.sample_ms

    def observe(self, now_ms: int, totals: Totals) -> None:
        """One sample of the counters at ``now_ms`` (ignored when not :meth:`due`)."""
        if not self.due(now_ms):
            return
        samples = self._samples
        samples.append((now_ms, totals))
        start = now_ms - self.window_ms
        while len(samples) > 2 and samples[1][0] <= start:
            samples.popleft()
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
        (t0, old), (t1, new) = self._samples[0], self._samples[-1]
        seconds = (t1 - t0) / 1000
        topics: dict[str, TopicRate] = {}
        total = 0.0
        for topic, queues in new.items():
            before = old.get(topic, {})
            rates = {
                q: (n - before.get(q, 0)) / seconds
                for q, n in queues.items()
                if n > before.get(q, 0)
            }
            if rates:
                rate = sum(rates.values())
                total += rate
                topics[topic] = TopicRate(rate, rates)
        busiest = sorted(topics, key=lambda t: (-topics[t].msg_per_sec, t))[: self.top_topics]
        return TrafficReport(self.window_ms, total, {t: topics[t] for t in busiest})
