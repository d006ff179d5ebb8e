"""The broker's Prometheus metrics, on a registry of its own.

Per-message figures (traffic per topic, send latency) are plain integers on the hot path and
turned into Prometheus families only at scrape time: a send pays a dict lookup and two additions,
not a lock per counter.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

LATENCY_BUCKETS = (
    0.0002,
    0.0005,
    0.001,
    0.002,
    0.005,
    0.01,
    0.02,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
)


class TopicTraffic:
    """[messages in, bytes in, messages out, bytes out] per topic."""

    __slots__ = ("by_topic",)

    def __init__(self) -> None:
        self.by_topic: dict[str, list[int]] = {}

    def get(self, topic: str) -> list[int]:
        row = self.by_topic.get(topic)
        if row is None:
            row = self.by_topic[topic] = [0, 0, 0, 0]
        return row


class FastHistogram:
    """A histogram whose observe() is a bisect and two additions; cumulated at scrape time."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    def buckets(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip(self.bounds, self.counts, strict=False):
            running += count
            out.append((repr(bound), running))
        out.append(("+Inf", running + self.counts[-1]))
        return out


class _HotPathCollector(Collector):
    def __init__(self, metrics: BrokerMetrics) -> None:
        self._m = metrics

    def collect(self) -> Iterator[CounterMetricFamily | HistogramMetricFamily]:
        m = self._m
        names = ["cluster", "broker_name", "topic"]
        families = [
            CounterMetricFamily("rmq_broker_messages_in", "Messages stored", labels=names),
            CounterMetricFamily("rmq_broker_bytes_in", "Message body bytes stored", labels=names),
            CounterMetricFamily(
                "rmq_broker_messages_out", "Messages served to pulls", labels=names
            ),
            CounterMetricFamily(
                "rmq_broker_bytes_out", "Record bytes served to pulls", labels=names
            ),
        ]
        base = [m.cluster, m.broker_name]
        for topic, row in sorted(m.traffic.by_topic.items()):
            for family, value in zip(families, row, strict=True):
                family.add_metric([*base, topic], value)
        yield from families
        h = m.send_latency
        latency = HistogramMetricFamily(
            "rmq_broker_send_latency_seconds",
            "Time from a send request's arrival to its answer",
            labels=["cluster", "broker_name"],
        )
        latency.add_metric(base, h.buckets(), h.total)
        yield latency


class BrokerMetrics:
    def __init__(self, cluster: str, broker_name: str) -> None:
        self.registry = CollectorRegistry()
        labels = {"cluster": cluster, "broker_name": broker_name}
        self._labels = labels
        self.cluster = cluster
        self.broker_name = broker_name
        r = self.registry
        self.traffic = TopicTraffic()
        self.send_latency = FastHistogram(LATENCY_BUCKETS)
        r.register(_HotPathCollector(self))
        base = list(labels)
        self.flush_latency = Histogram(
            "rmq_broker_flush_latency_seconds",
            "Duration of one CommitLog fsync round",
            base,
            buckets=LATENCY_BUCKETS,
            registry=r,
        ).labels(**labels)
        self.send_errors = Counter(
            "rmq_broker_send_errors_total",
            "Sends answered with an error",
            [*base, "code"],
            registry=r,
        )
        self.connections = Gauge(
            "rmq_broker_connections", "Open client connections", base, registry=r
        ).labels(**labels)
        self.pull_waits = Counter(
            "rmq_broker_pull_waits_total", "Pulls that waited (long polling)", base, registry=r
        ).labels(**labels)
        self.pulls_waiting = Gauge(
            "rmq_broker_pulls_waiting", "Pulls waiting now", base, registry=r
        ).labels(**labels)
        self.bad_frames = Counter(
            "rmq_broker_bad_frames_total",
            "Connections closed for malformed frames",
            base,
            registry=r,
        ).labels(**labels)
        self._gauges: dict[str, Gauge] = {}

    def gauge_fn(self, name: str, doc: str, fn: Callable[[], float]) -> None:
        """A gauge read from ``fn`` at scrape time."""
        g = Gauge(name, doc, list(self._labels), registry=self.registry)
        g.labels(**self._labels).set_function(fn)
        self._gauges[name] = g

    def topic(self, topic: str) -> list[int]:
        """The topic's [messages in, bytes in, messages out, bytes out], to add to in place."""
        return self.traffic.get(topic)

    def send_error(self, code: int) -> None:
        self.send_errors.labels(**self._labels, code=str(code)).inc()
