"""Turning the broker's trace on (``trace_enabled``): the writer, the tracer, and where they
listen. The composition root calls :func:`attach`; the broker starts and stops the writer."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from broker.appender import Appender
from broker.config import BrokerConfig
from broker.metrics import BrokerMetrics
from broker.trace.observer import BrokerTracer
from broker.trace.writer import TraceWriter
from broker.write_gate import WriteGate
from protocol.message import Message, MessageRecord, decode_record
from storage.config_files import TopicConfig
from storage.queue_read import GetStatus
from storage.store import MessageStore

__all__ = ["attach", "export_metrics"]


def attach(
    cfg: BrokerConfig,
    store: MessageStore,
    appender: Appender,
    gate: WriteGate,
    ensure_system_topic: Callable[[str], TopicConfig],
    visible_offset: Callable[[], int | None],
    now_ms: Callable[[], int],
) -> BrokerTracer:
    """A tracer listening to every put of ``appender``, with its writer (not started)."""
    topic = cfg.trace_topic

    def put(messages: Sequence[Message], body_bytes: int) -> None:
        gate.check_writable()  # a slave writes none: its master traces what it sees
        ensure_system_topic(topic)
        appender.put(topic, 0, messages, body_bytes)

    def read(topic: str, queue_id: int, offset: int) -> MessageRecord | None:
        res = store.get(topic, queue_id, offset, 1, 1 << 20, visible_offset())
        if res.status is not GetStatus.FOUND or not res.body:
            return None
        return decode_record(res.body)

    store_host = store.config.store_host
    writer = TraceWriter(topic, cfg.trace_buffer_records, put, born_host=store_host, now_ms=now_ms)
    tracer = BrokerTracer(writer, store_host, now_ms, read)
    appender.put_listeners.append(tracer.on_put)
    return tracer


def export_metrics(metrics: BrokerMetrics, writer: TraceWriter | None) -> None:
    """The trace's figures (0 with trace_enabled off: the same series on every broker)."""
    metrics.counter_fn(
        "rmq_broker_trace_records",
        "Trace records written to the trace topic (trace_enabled)",
        lambda: writer.written if writer is not None else 0,
    )
    metrics.counter_fn(
        "rmq_broker_trace_dropped",
        "Trace records dropped: the buffer (trace_buffer_records) was full, or the trace "
        "topic took no append (not master, disk full)",
        lambda: writer.dropped if writer is not None else 0,
    )
    metrics.gauge_fn(
        "rmq_broker_trace_buffered",
        "Trace records waiting to be written",
        lambda: len(writer) if writer is not None else 0,
    )
