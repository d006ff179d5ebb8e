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
from dataclasses import dataclass, fields
from functools import partial
from typing import TYPE_CHECKING, TypeVar

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

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["compose"]

_Host = TypeVar("_Host", bound="DataclassInstance")


@dataclass(frozen=True, slots=True)
class _ServiceHost:
    """:class:`~broker.service_host.ServiceHost` from the context's parts: what every service but
    the pulls is given (the hosts below add what each needs besides)."""

    cfg: BrokerConfig
    store: MessageStore
    appender: Appender
    gate: WriteGate
    metrics: BrokerMetrics


@dataclass(frozen=True, slots=True)
class _TimerHost(_ServiceHost):
    """:class:`~broker.timer.host.TimerHost` from the context's parts."""

    sealed: SealedQueues
    service: MessageStoreService
    visible_offset: Callable[[], int | None]


@dataclass(frozen=True, slots=True)
class _PopHost(_ServiceHost):
    """:class:`~broker.pop.host.PopHost` from the context's parts."""

    topics: TopicConfigStore
    sub_groups: SubscriptionGroupStore
    offsets: ConsumerOffsetStore
    waiters: PullWaiters
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
class _DeadLetterHost(_ServiceHost):
    """:class:`~broker.dlq.host.DeadLetterHost` from the context's parts."""

    topics: TopicConfigStore
    dlq_resent: DlqResendLedger
    visible_offset: Callable[[], int | None]
    record_at: Callable[[int], MessageRecord | None]
    next_queue: Callable[[str, int], int]
    needs_wait: Callable[[PutResult], bool]
    when_durable: Callable[[PutResult, DurableDone], None]


@dataclass(frozen=True, slots=True)
class _TransactionHost(_ServiceHost):
    """:class:`~broker.transaction.host.TransactionHost` from the context's parts."""

    topics: TopicConfigStore
    ensure_system_topic: Callable[[str], TopicConfig]
    create_topic: Callable[[str, int], TopicConfig]
    now_ms: Callable[[], int]


@dataclass(frozen=True, slots=True)
class _SendHost(_ServiceHost):
    """:class:`~broker.send.host.SendHost` from the context's parts and the timer's and the
    transaction service's ways in."""

    topics: TopicConfigStore
    sealed: SealedQueues
    ensure_system_topic: Callable[[str], TopicConfig]
    create_topic: Callable[[str, int], TopicConfig]
    next_queue: Callable[[str, int], int]
    put_scheduled_send: Callable[[str, int, list[Message]], PutResult | None]
    put_half: Callable[[str, int, Message], PutResult]
    needs_wait: Callable[[PutResult], bool]
    when_durable: Callable[[PutResult, DurableDone], None]


def _from_context(host: type[_Host], ctx: BrokerContext, **given: object) -> _Host:
    """``host`` filled with the context's member of each field's name, or with what is ``given``
    for it (a part the context has under another name, or another service's way in)."""
    names = {f.name for f in fields(host)}
    unknown = given.keys() - names
    if unknown:
        raise TypeError(f"{host.__name__} has no field {sorted(unknown)}")
    return host(**{name: given[name] if name in given else getattr(ctx, name) for name in names})


def compose(cfg: BrokerConfig, metrics: BrokerMetrics) -> BrokerContext:
    """The broker's context with its services built and attached."""
    ctx = BrokerContext(cfg, metrics)
    # The visible_offset given to each is the context's bound method: how far consumers may read
    # follows replication once attached.
    ctx.timer = TimerService(_from_context(_TimerHost, ctx))
    ctx.pop = PopService(_from_context(_PopHost, ctx))
    ctx.pulls = PullService(_from_context(_PullHost, ctx))
    ctx.dead_letters = DeadLetterService(
        _from_context(_DeadLetterHost, ctx, record_at=partial(visible_record_at, ctx))
    )
    ctx.transactions = TransactionService(_from_context(_TransactionHost, ctx))
    ctx.sends = SendService(
        _from_context(
            _SendHost,
            ctx,
            create_topic=ctx.create_topic_on_send,
            put_scheduled_send=ctx.timer.put_send,
            put_half=ctx.transactions.put_half,
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
