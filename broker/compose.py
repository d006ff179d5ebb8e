"""The broker's composition root: the context, then the services built beside it.

Each service is given a narrow Protocol of what it uses of the broker (its package's ``host``
module: :class:`~broker.timer.host.TimerHost`, :class:`~broker.pop.host.PopHost`,
:class:`~broker.transaction.host.TransactionHost`, :class:`~broker.send.host.SendHost`,
:class:`~broker.pull.host.PullHost`, :class:`~broker.dlq.host.DeadLetterHost`), filled here with those parts of the context
and nothing else: a service holds its own host, never the context. So the services do not import
the context and the context does not build them: no import circle, and ``broker.pop``,
``broker.timer`` and ``broker.transaction`` stay apart (the ``independence`` contract of
pyproject.toml; the send service is given the timer's and the transaction service's ways in as
callables, so it imports neither). The context keeps a reference to each service for the request processors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from broker.appender import Appender
from broker.cold_reads import ColdReads
from broker.config import BrokerConfig
from broker.context import BrokerContext
from broker.dlq.service import DeadLetterService
from broker.durable import DurableDone
from broker.long_polling import PullWaiters
from broker.message_service import MessageStoreService
from broker.metrics import BrokerMetrics
from broker.offset_resets import PendingResets
from broker.pop.service import PopService
from broker.pull.service import PullService
from broker.sealed_queues import SealedQueues
from broker.send.service import SendService
from broker.stored_record import visible_record_at
from broker.timer.service import TimerService
from broker.trace.attach import attach as attach_trace
from broker.trace.attach import export_metrics as export_trace_metrics
from broker.transaction.service import TransactionService
from broker.write_gate import WriteGate
from protocol.message import Message, MessageRecord
from storage.config_files import (
    ConsumerOffsetStore,
    DlqResendLedger,
    SubscriptionGroupStore,
    TopicConfig,
    TopicConfigStore,
)
from storage.store import MessageStore, PutResult

__all__ = ["compose"]


@dataclass(frozen=True, slots=True)
class _TimerHost:
    """:class:`~broker.timer.host.TimerHost` from the context's parts."""

    cfg: BrokerConfig
    store: MessageStore
    appender: Appender
    gate: WriteGate
    sealed: SealedQueues
    service: MessageStoreService
    metrics: BrokerMetrics
    visible_offset: Callable[[], int | None]


@dataclass(frozen=True, slots=True)
class _PopHost:
    """:class:`~broker.pop.host.PopHost` from the context's parts."""

    cfg: BrokerConfig
    store: MessageStore
    appender: Appender
    gate: WriteGate
    topics: TopicConfigStore
    sub_groups: SubscriptionGroupStore
    offsets: ConsumerOffsetStore
    waiters: PullWaiters
    metrics: BrokerMetrics
    ensure_system_topic: Callable[[str], TopicConfig]
    visible_offset: Callable[[], int | None]
    now_ms: Callable[[], int]
    cold_reads: ColdReads


@dataclass(frozen=True, slots=True)
class _PullHost:
    """:class:`~broker.pull.host.PullHost` from the context's parts."""

    cfg: BrokerConfig
    store: MessageStore
    topics: TopicConfigStore
    offsets: ConsumerOffsetStore
    waiters: PullWaiters
    offset_resets: PendingResets
    metrics: BrokerMetrics
    visible_offset: Callable[[], int | None]
    now_ms: Callable[[], int]
    cold_reads: ColdReads


@dataclass(frozen=True, slots=True)
class _DeadLetterHost:
    """:class:`~broker.dlq.host.DeadLetterHost` from the context's parts."""

    cfg: BrokerConfig
    store: MessageStore
    topics: TopicConfigStore
    gate: WriteGate
    appender: Appender
    dlq_resent: DlqResendLedger
    metrics: BrokerMetrics
    visible_offset: Callable[[], int | None]
    record_at: Callable[[int], MessageRecord | None]
    next_queue: Callable[[str, int], int]
    needs_wait: Callable[[PutResult], bool]
    when_durable: Callable[[PutResult, DurableDone], None]


@dataclass(frozen=True, slots=True)
class _TransactionHost:
    """:class:`~broker.transaction.host.TransactionHost` from the context's parts."""

    cfg: BrokerConfig
    store: MessageStore
    appender: Appender
    gate: WriteGate
    topics: TopicConfigStore
    metrics: BrokerMetrics
    ensure_system_topic: Callable[[str], TopicConfig]
    create_topic: Callable[[str, int], TopicConfig]
    now_ms: Callable[[], int]


@dataclass(frozen=True, slots=True)
class _SendHost:
    """:class:`~broker.send.host.SendHost` from the context's parts and the timer's and the
    transaction service's ways in."""

    cfg: BrokerConfig
    gate: WriteGate
    topics: TopicConfigStore
    sealed: SealedQueues
    appender: Appender
    metrics: BrokerMetrics
    store: MessageStore
    ensure_system_topic: Callable[[str], TopicConfig]
    create_topic: Callable[[str, int], TopicConfig]
    next_queue: Callable[[str, int], int]
    put_scheduled_send: Callable[[str, int, list[Message]], PutResult | None]
    put_half: Callable[[str, int, Message], PutResult]
    needs_wait: Callable[[PutResult], bool]
    when_durable: Callable[[PutResult, DurableDone], None]


def compose(cfg: BrokerConfig, metrics: BrokerMetrics) -> BrokerContext:
    """The broker's context with its services built and attached."""
    ctx = BrokerContext(cfg, metrics)
    ctx.timer = TimerService(
        _TimerHost(
            cfg=cfg,
            store=ctx.store,
            appender=ctx.appender,
            gate=ctx.gate,
            sealed=ctx.sealed,
            service=ctx.service,
            metrics=metrics,
            # Bound methods: how far consumers may read follows replication once attached.
            visible_offset=ctx.visible_offset,
        )
    )
    ctx.pop = PopService(
        _PopHost(
            cfg=cfg,
            store=ctx.store,
            appender=ctx.appender,
            gate=ctx.gate,
            topics=ctx.topics,
            sub_groups=ctx.sub_groups,
            offsets=ctx.offsets,
            waiters=ctx.waiters,
            metrics=metrics,
            ensure_system_topic=ctx.ensure_system_topic,
            visible_offset=ctx.visible_offset,
            now_ms=ctx.now_ms,
            cold_reads=ctx.cold_reads,
        )
    )
    ctx.pulls = PullService(
        _PullHost(
            cfg=cfg,
            store=ctx.store,
            topics=ctx.topics,
            offsets=ctx.offsets,
            waiters=ctx.waiters,
            offset_resets=ctx.offset_resets,
            metrics=metrics,
            visible_offset=ctx.visible_offset,
            now_ms=ctx.now_ms,
            cold_reads=ctx.cold_reads,
        )
    )
    ctx.dead_letters = DeadLetterService(
        _DeadLetterHost(
            cfg=cfg,
            store=ctx.store,
            topics=ctx.topics,
            gate=ctx.gate,
            appender=ctx.appender,
            dlq_resent=ctx.dlq_resent,
            metrics=metrics,
            visible_offset=ctx.visible_offset,
            record_at=partial(visible_record_at, ctx),
            next_queue=ctx.next_queue,
            needs_wait=ctx.needs_wait,
            when_durable=ctx.when_durable,
        )
    )
    ctx.transactions = TransactionService(
        _TransactionHost(
            cfg=cfg,
            store=ctx.store,
            appender=ctx.appender,
            gate=ctx.gate,
            topics=ctx.topics,
            metrics=metrics,
            ensure_system_topic=ctx.ensure_system_topic,
            create_topic=ctx.create_topic,
            now_ms=ctx.now_ms,
        )
    )
    ctx.sends = SendService(
        _SendHost(
            cfg=cfg,
            gate=ctx.gate,
            topics=ctx.topics,
            sealed=ctx.sealed,
            appender=ctx.appender,
            metrics=metrics,
            store=ctx.store,
            ensure_system_topic=ctx.ensure_system_topic,
            create_topic=ctx.create_topic_on_send,
            next_queue=ctx.next_queue,
            put_scheduled_send=ctx.timer.put_send,
            put_half=ctx.transactions.put_half,
            needs_wait=ctx.needs_wait,
            when_durable=ctx.when_durable,
        )
    )
    if cfg.trace_enabled:
        ctx.tracer = attach_trace(
            cfg,
            ctx.store,
            ctx.appender,
            ctx.gate,
            ctx.ensure_system_topic,
            ctx.visible_offset,
            ctx.now_ms,
        )
        ctx.pop.tracer = ctx.tracer
        ctx.transactions.tracer = ctx.tracer
    export_trace_metrics(metrics, ctx.tracer.writer if ctx.tracer is not None else None)
    return ctx
