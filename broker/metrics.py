"""The broker's Prometheus metrics, on a registry of its own.

Per-message figures (traffic per topic, send latency) are plain integers on the hot path and
turned into Prometheus families only at scrape time: a send pays a dict lookup and two additions,
not a lock per counter. Role, replication and disk figures are read at scrape time too, from the
callbacks the broker hands :meth:`BrokerMetrics.bind` (:class:`BrokerReadings`), by the
collectors of ``broker/metrics_scrape.py``.

Every series carries ``cluster``, ``broker_name`` (the group) and ``broker_id`` (the persistent
id the controllers assigned; empty until the broker has one, ``0`` for a lone broker run without
controllers). The id is added when the registry is collected, so it appears on every series as
soon as it is known. docs/metrics.md lists every name.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from broker.metrics_scrape import (
    BrokerReadings,
    ConsumerLagCollector,
    StateCollector,
    WithIdentity,
)
from daemon import build_info
from protocol.codes import ResponseCode, code_name
from protocol.transaction import OpKind
from remoting.server import DROP_BAD_FRAME, DROP_PARTIAL_FRAME_BUDGET, Connection, RemotingServer

__all__ = [
    "EXPORTED_SEND_ERRORS",
    "LATENCY_BUCKETS",
    "TIMER_LATENESS_BUCKETS",
    "BrokerMetrics",
    "BrokerReadings",
    "FastHistogram",
    "TopicCounts",
    "TopicTraffic",
]

# Send errors exported at zero from the start, so rate() and alerts see the first one.
EXPORTED_SEND_ERRORS = (
    ResponseCode.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.FLUSH_DISK_TIMEOUT,
    ResponseCode.MASTER_FENCED,
    ResponseCode.NOT_MASTER,
    ResponseCode.SLAVE_NOT_AVAILABLE,
    ResponseCode.IN_SYNC_REPLICAS_NOT_ENOUGH,
)

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

TIMER_LATENESS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0, 300.0)
"""Scheduled delivery lateness (seconds): from 5 ms to 5 minutes (a failover's worth)."""


class TopicCounts:
    """One topic's traffic, added to in place on the hot path."""

    __slots__ = ("bytes_in", "bytes_out", "messages_in", "messages_out", "queues_in")

    def __init__(self) -> None:
        self.messages_in = 0
        self.queues_in: dict[int, int] = {}
        """Messages stored per queue id (the traffic report's counters, broker.traffic_meter)."""
        self.bytes_in = 0
        """Message body bytes stored."""
        self.messages_out = 0
        self.bytes_out = 0
        """Record bytes served to pulls."""


class TopicTraffic:
    """:class:`TopicCounts` per topic."""

    __slots__ = ("by_topic", "moved", "touched")

    def __init__(self) -> None:
        self.by_topic: dict[str, TopicCounts] = {}
        self.moved: set[str] = set()
        """Topics whose ``queues_in`` grew since :meth:`moved_totals` last took them (the put
        adds its topic after counting it)."""
        self.touched: set[str] = set()
        """Topics whose counts were handed out to add to (:meth:`get`) since
        :meth:`take_touched`: the broker's stats sample reads only those (loop thread)."""

    def get(self, topic: str) -> TopicCounts:
        """The topic's counts, to add to at once (on the loop thread)."""
        self.touched.add(topic)
        counts = self.by_topic.get(topic)
        if counts is None:
            counts = self.by_topic[topic] = TopicCounts()
        return counts

    def forget(self, topic: str) -> None:
        """The topic was deleted: its counts and their series go (loop thread); created again,
        it counts from 0 (the samples that read the counters take a drop as a restart)."""
        self.by_topic.pop(topic, None)
        self.moved.discard(topic)
        self.touched.discard(topic)

    def take_touched(self) -> set[str]:
        """The topics :meth:`get` handed out since the last call (loop thread)."""
        touched, self.touched = self.touched, set()
        return touched

    def queue_totals(self) -> dict[str, dict[int, int]]:
        """Messages stored so far per topic and queue, copied (safe from another thread: each
        copy is one step under the interpreter lock)."""
        return {topic: c.queues_in.copy() for topic, c in list(self.by_topic.items())}

    def moved_totals(self) -> dict[str, dict[int, int]]:
        """:meth:`queue_totals` of the topics put to since the last call only (safe from
        another thread: a topic is taken out of :attr:`moved` before its counters are copied,
        so a put counted meanwhile marks it again for the next call)."""
        moved, out = self.moved, {}
        for _ in range(len(moved)):
            try:
                topic = moved.pop()
            except KeyError:
                break
            counts = self.by_topic.get(topic)
            if counts is not None:
                out[topic] = counts.queues_in.copy()
        return out


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


class _CounterFn(Collector):
    """A counter read from a function at scrape time."""

    def __init__(self, name: str, doc: str, labels: dict[str, str], fn: Callable[[], float]):
        self._family = (name, doc, list(labels), list(labels.values()))
        self._fn = fn

    def collect(self) -> Iterator[CounterMetricFamily]:
        name, doc, names, values = self._family
        family = CounterMetricFamily(name, doc, labels=names)
        family.add_metric(values, float(self._fn()))
        yield family


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
        for topic, c in sorted(m.traffic.by_topic.items()):
            values = (c.messages_in, c.bytes_in, c.messages_out, c.bytes_out)
            for family, value in zip(families, values, strict=True):
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
        late = m.timer_lateness
        lateness = HistogramMetricFamily(
            "rmq_broker_timer_lateness_seconds",
            "Scheduled messages delivered: store time of the delivered copy minus the due time",
            labels=["cluster", "broker_name"],
        )
        lateness.add_metric(base, late.buckets(), late.total)
        yield lateness
        ack = m.pop_ack_latency
        ack_family = HistogramMetricFamily(
            "rmq_broker_pop_ack_latency_seconds",
            "POP deliveries acked: time from the POP that handed the message out to its ack",
            labels=["cluster", "broker_name"],
        )
        ack_family.add_metric(base, ack.buckets(), ack.total)
        yield ack_family


class BrokerMetrics:
    def auth_refusal(self, reason: str) -> None:
        self.auth_refused.labels(**self._labels, reason=reason).inc()

    def __init__(self, cluster: str, broker_name: str) -> None:
        # The collectors register here; ``registry`` (what /metrics serves) adds the broker id.
        self._inner = CollectorRegistry()
        self.registry = CollectorRegistry()
        labels = {"cluster": cluster, "broker_name": broker_name}
        self._labels = labels
        self.cluster = cluster
        self.broker_name = broker_name
        self.registry.register(WithIdentity(self._inner, self))
        build_info.export(self._inner, "broker", labels)
        self.readings: BrokerReadings | None = None
        r = self._inner
        self.traffic = TopicTraffic()
        self.send_latency = FastHistogram(LATENCY_BUCKETS)
        r.register(_HotPathCollector(self))
        r.register(StateCollector(self))
        r.register(ConsumerLagCollector(self))
        ProcessCollector(registry=r)  # process_open_fds, process_max_fds, memory, CPU
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
            "Sends answered with an error, by response code name",
            [*base, "code"],
            registry=r,
        )
        for code in EXPORTED_SEND_ERRORS:
            self.send_errors.labels(**labels, code=code.name)
        self.auth_refused = Counter(
            "rmq_broker_auth_refused_total",
            "Requests refused NO_PERMISSION (gRPC calls: UNAUTHORIZED or FORBIDDEN) with "
            "authentication on, by reason (unsigned, malformed, unknown_user, bad_signature, "
            "expired, replayed, denied)",
            [*base, "reason"],
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
        self.partial_frame_drops = Counter(
            "rmq_broker_partial_frame_drops_total",
            "Connections closed because incomplete frames exceeded max_partial_frame_bytes",
            base,
            registry=r,
        ).labels(**labels)
        self.timer_lateness = FastHistogram(TIMER_LATENESS_BUCKETS)
        self.pop_ack_latency = FastHistogram(TIMER_LATENESS_BUCKETS)
        self.timer_scheduled = Counter(
            "rmq_broker_timer_scheduled_total",
            "Scheduled messages accepted (sends with a delivery time, and retries)",
            base,
            registry=r,
        ).labels(**labels)
        self.timer_delivered = Counter(
            "rmq_broker_timer_delivered_total",
            "Scheduled messages delivered to their real topic by this broker as master",
            base,
            registry=r,
        ).labels(**labels)
        self.timer_recalled = Counter(
            "rmq_broker_timer_recalled_total",
            "Scheduled messages recalled before delivery",
            base,
            registry=r,
        ).labels(**labels)
        self.timer_unreadable = Counter(
            "rmq_broker_timer_unreadable_total",
            "Scheduled messages due but not delivered: their CommitLog record could not be "
            "read (deleted by retention, or corrupt)",
            base,
            registry=r,
        ).labels(**labels)
        group_topic = [*base, "group", "topic"]
        self.consumer_retries = Counter(
            "rmq_broker_consumer_retries_total",
            "Nacked messages re-published to a group's retry topic, by group and original topic",
            group_topic,
            registry=r,
        )
        self.dlq_messages = Counter(
            "rmq_broker_dlq_messages_total",
            "Messages moved to a group's dead-letter topic, by group and original topic",
            group_topic,
            registry=r,
        )
        self.dlq_resent = Counter(
            "rmq_broker_dlq_resent_total",
            "DLQ messages re-sent to their original topic (resendDLQ), by group and topic",
            group_topic,
            registry=r,
        )
        self.pop_messages = Counter(
            "rmq_broker_pop_messages",
            "Messages handed out by POP, by group and the topic they were read from",
            group_topic,
            registry=r,
        )
        self.pop_acks = Counter(
            "rmq_broker_pop_acks",
            "POP deliveries acked, by group",
            [*base, "group"],
            registry=r,
        )
        self.pop_redeliveries = Counter(
            "rmq_broker_pop_redeliveries",
            "POP deliveries not acked in their invisible time and re-published to the group's "
            "retry topic (FIFO groups: handed out again in place), by group and original topic",
            group_topic,
            registry=r,
        )
        self.pop_inflight = Gauge(
            "rmq_broker_pop_inflight_messages",
            "POP deliveries in flight (handed out, not acked, not redelivered), by group; "
            "master only",
            [*base, "group"],
            registry=r,
        )
        self._pop_groups: set[str] = set()
        self.fifo_blocked = Gauge(
            "rmq_broker_pop_fifo_blocked_groups",
            "FIFO message groups blocked waiting for an ack (a message handed out by POP and "
            "not acked yet), by consumer group; master only",
            [*base, "group"],
            registry=r,
        )
        self._fifo_groups: set[str] = set()
        self.transactions_opened = Counter(
            "rmq_broker_transactions_opened_total",
            "Transactional (half) messages stored by this broker as master",
            base,
            registry=r,
        ).labels(**labels)
        self.transactions_resolved = Counter(
            "rmq_broker_transactions_resolved_total",
            "Transactions resolved by this broker as master, by outcome: commit, rollback, "
            "or discard (unresolved after transaction_check_max check-backs)",
            [*base, "outcome"],
            registry=r,
        )
        self.transaction_checks = Counter(
            "rmq_broker_transaction_checks_total",
            "Check-backs of unresolved transactions; sent: a producer of the group was "
            "connected (true) or none was (false)",
            [*base, "sent"],
            registry=r,
        )
        self.transactions_open = Gauge(
            "rmq_broker_transactions_open",
            "Transactions neither committed, rolled back nor discarded; master only",
            base,
            registry=r,
        ).labels(**labels)
        self._gauges: dict[str, Gauge] = {}

    def bind(self, readings: BrokerReadings) -> None:
        """Read role, fencing, replication and disk figures through ``readings`` at scrape
        time."""
        self.readings = readings

    def bind_server(self, server: RemotingServer) -> None:
        """Count the connections ``server`` closes; read its incomplete-frame bytes at scrape."""

        def dropped(_conn: Connection, reason: str) -> None:
            if reason == DROP_PARTIAL_FRAME_BUDGET:
                self.partial_frame_drops.inc()
            elif reason == DROP_BAD_FRAME:
                self.bad_frames.inc()

        server.on_drop.append(dropped)
        self.gauge_fn(
            "rmq_broker_partial_frame_bytes",
            "Bytes of incomplete frames held by all client connections",
            lambda: server.partial_bytes,
        )

    def broker_id(self) -> str:
        """The ``broker_id`` label: the persistent id, empty until the broker has one."""
        readings = self.readings
        if readings is None:
            return ""
        broker_id = readings.role().broker_id
        if readings.assigned_ids and broker_id < 1:
            return ""  # not known yet: controller-assigned ids start at 1
        return str(broker_id)

    def gauge_fn(self, name: str, doc: str, fn: Callable[[], float]) -> None:
        """A gauge read from ``fn`` at scrape time."""
        g = Gauge(name, doc, list(self._labels), registry=self._inner)
        g.labels(**self._labels).set_function(fn)
        self._gauges[name] = g

    def counter_fn(self, name: str, doc: str, fn: Callable[[], float]) -> None:
        """A counter ``<name>_total`` read from ``fn`` at scrape time."""
        self._inner.register(_CounterFn(name, doc, self._labels, fn))

    def topic(self, topic: str) -> TopicCounts:
        """The topic's traffic counts, to add to in place."""
        return self.traffic.get(topic)

    def consumer_retry(self, group: str, topic: str) -> None:
        self.consumer_retries.labels(**self._labels, group=group, topic=topic).inc()

    def dead_letter(self, group: str, topic: str) -> None:
        self.dlq_messages.labels(**self._labels, group=group, topic=topic).inc()

    def resent_from_dlq(self, group: str, topic: str, count: int) -> None:
        self.dlq_resent.labels(**self._labels, group=group, topic=topic).inc(count)

    def popped(self, group: str, topic: str, count: int) -> None:
        self.pop_messages.labels(**self._labels, group=group, topic=topic).inc(count)

    def pop_acked(self, group: str, count: int = 1) -> None:
        self.pop_acks.labels(**self._labels, group=group).inc(count)

    def pop_redelivered(self, group: str, topic: str) -> None:
        self.pop_redeliveries.labels(**self._labels, group=group, topic=topic).inc()

    def pop_inflight_now(self, per_group: dict[str, int]) -> None:
        """Set the in-flight gauge of every group (0 for a group no longer in flight)."""
        self._set_per_group(self.pop_inflight, self._pop_groups, per_group)

    def fifo_blocked_now(self, per_group: dict[str, int]) -> None:
        """Set the blocked FIFO message groups gauge of every group (0 for one with none)."""
        self._set_per_group(self.fifo_blocked, self._fifo_groups, per_group)

    def _set_per_group(self, gauge: Gauge, seen: set[str], per_group: dict[str, int]) -> None:
        """``gauge``'s series of every consumer group in ``per_group`` set to its count, and to
        0 for a group ``seen`` before and not listed now; ``seen`` takes the groups listed."""
        for group in seen - per_group.keys():
            gauge.labels(**self._labels, group=group).set(0)
        for group, count in per_group.items():
            gauge.labels(**self._labels, group=group).set(count)
        seen.update(per_group)

    def transaction_opened(self) -> None:
        self.transactions_opened.inc()

    def transaction_resolved(self, outcome: OpKind) -> None:
        self.transactions_resolved.labels(**self._labels, outcome=outcome.name.lower()).inc()

    def transaction_checked(self, sent: bool) -> None:
        self.transaction_checks.labels(**self._labels, sent=str(sent).lower()).inc()

    def transactions_open_now(self, count: int) -> None:
        self.transactions_open.set(count)

    def send_error(self, code: int) -> None:
        self.send_errors.labels(**self._labels, code=code_name(code)).inc()
