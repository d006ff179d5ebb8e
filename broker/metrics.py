"""The broker's Prometheus metrics, on a registry of its own."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

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


class BrokerMetrics:
    def __init__(self, cluster: str, broker_name: str) -> None:
        self.registry = CollectorRegistry()
        labels = {"cluster": cluster, "broker_name": broker_name}
        self._labels = labels
        topic = ["cluster", "broker_name", "topic"]
        r = self.registry
        self.messages_in = Counter(
            "rmq_broker_messages_in_total", "Messages stored", topic, registry=r
        )
        self.bytes_in = Counter(
            "rmq_broker_bytes_in_total", "Message body bytes stored", topic, registry=r
        )
        self.messages_out = Counter(
            "rmq_broker_messages_out_total", "Messages served to pulls", topic, registry=r
        )
        self.bytes_out = Counter(
            "rmq_broker_bytes_out_total", "Record bytes served to pulls", topic, registry=r
        )
        base = list(labels)
        self.send_latency = Histogram(
            "rmq_broker_send_latency_seconds",
            "Time from a send request's arrival to its answer",
            base,
            buckets=LATENCY_BUCKETS,
            registry=r,
        ).labels(**labels)
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
        self._topic_children: dict[str, tuple[Counter, Counter, Counter, Counter]] = {}

    def gauge_fn(self, name: str, doc: str, fn: Callable[[], float]) -> None:
        """A gauge read from ``fn`` at scrape time."""
        g = Gauge(name, doc, list(self._labels), registry=self.registry)
        g.labels(**self._labels).set_function(fn)
        self._gauges[name] = g

    def topic(self, topic: str) -> tuple[Counter, Counter, Counter, Counter]:
        """(messages_in, bytes_in, messages_out, bytes_out) children for a topic, cached."""
        children = self._topic_children.get(topic)
        if children is None:
            kw = {**self._labels, "topic": topic}
            children = (
                self.messages_in.labels(**kw),
                self.bytes_in.labels(**kw),
                self.messages_out.labels(**kw),
                self.bytes_out.labels(**kw),
            )
            self._topic_children[topic] = children
        return children

    def send_error(self, code: int) -> None:
        self.send_errors.labels(**self._labels, code=str(code)).inc()
