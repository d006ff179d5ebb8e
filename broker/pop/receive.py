"""POPs for any front: POP_MESSAGE's processor (:mod:`broker.processors.pop`) calls
:func:`pop_messages` with the typed :class:`~protocol.broker_requests.pop.PopRequest` and says
its :class:`Popped` (or its :class:`PopDenied`) on the wire.

The decisions are here: the limits (at most :data:`~protocol.pop.MAX_POP_BATCH` and
``max_pull_batch`` messages, ``pollTime`` up to ``max_pull_suspend_ms``), no POP of a system
topic (ours ``rmq_sys_...``, RocketMQ's ``RMQ_SYS_...``, a retry or DLQ topic), the topic and
queue checks, the write gate, and long polling: a POP that found nothing waits on its queues
and the group's retry queue (:mod:`broker.long_polling`) until messages come or ``pollTime``
passes, each try's checkpoint durable before the next wait. A POP whose records are not in the
page cache first has them loaded off the loop (:mod:`broker.cold_reads`), then pops as any.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass

from broker.durable_wait import Durability, wait_durable
from broker.pop.message import PopMessage
from broker.pop.service import PopService
from broker.write_gate import WriteRefused
from protocol.broker_requests.pop import PopRequest
from protocol.codes import ResponseCode
from protocol.filter import SQL_FILTER_OFF, MessageFilter, SqlFilter, parse_filter
from protocol.pop import MAX_POP_BATCH
from protocol.refusal import RequestRefused
from protocol.retry import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, retry_topic
from protocol.topic_attrs import read_forbidden
from storage.cold_read import ColdSpan
from storage.errors import StoreError
from storage.store import PutResult

__all__ = ["NOT_DURABLE", "PopDenied", "Popped", "pop_messages"]

NOT_DURABLE = "POP checkpoint not durable"
"""What a POP's error says first when its checkpoint did not become durable."""


class PopDenied(RequestRefused):
    """A POP refused (or its checkpoint not durable): ``code`` and ``remark`` go into the
    answer."""


@dataclass(frozen=True, slots=True)
class Popped:
    """What a POP handed out (none: nothing came within its ``pollTime``), and the append to
    await before answering (None: nothing to wait for; a long poll has waited already)."""

    messages: list[PopMessage]
    last: PutResult | None


@dataclass(frozen=True, slots=True)
class _PopAsk:
    """What one POP_MESSAGE asks for, checked: each try of a long poll asks it again."""

    group: str
    topic: str
    queue_id: int
    queues: int
    max_count: int
    invisible: int
    tag_filter: MessageFilter | None


def pop_messages(
    service: PopService, durability: Durability, pop: PopRequest
) -> Popped | Awaitable[Popped]:
    """The POP ``pop`` asks for: its outcome now (without a task: a POP that finds messages, or
    need not wait), or an awaitable of it when it long-polls. Raises :class:`PopDenied` (the
    awaitable too)."""
    host = service.host
    cfg = host.cfg
    group, topic, queue_id, invisible = pop.group, pop.topic, pop.queue_id, pop.invisible_ms
    max_count = max(1, min(pop.max_count, MAX_POP_BATCH, cfg.max_pull_batch))
    tag_filter = parse_filter(pop.expression_type, pop.expression)
    if isinstance(tag_filter, SqlFilter) and not cfg.enable_property_filter:
        raise PopDenied(ResponseCode.SQL_FILTER_DISABLED, SQL_FILTER_OFF)
    poll_ms = max(0, min(pop.poll_ms, cfg.max_pull_suspend_ms))
    # System topics in either case (ours are rmq_sys_..., RocketMQ's transaction topics
    # RMQ_SYS_TRANS_...: a POP there would hand out half messages).
    if topic.lower().startswith("rmq_sys_") or topic.startswith(
        (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)
    ):
        raise PopDenied(ResponseCode.NO_PERMISSION, f"topic {topic} is a system topic: no POP")
    tc = host.topics.get(topic)
    if tc is None:
        raise PopDenied(ResponseCode.TOPIC_NOT_EXIST, f"topic {topic} does not exist")
    if not tc.attrs.readable:
        raise PopDenied(ResponseCode.NO_PERMISSION, read_forbidden(topic, tc.attrs.perm))
    if not -1 <= queue_id < tc.queues:
        raise PopDenied(
            ResponseCode.QUEUE_NOT_EXIST,
            f"queueId {queue_id} out of range 0..{tc.queues - 1} (or -1: any)",
        )
    deadline = host.now_ms() + poll_ms
    ask = _PopAsk(group, topic, queue_id, tc.queues, max_count, invisible, tag_filter)
    queues, cold = _cold_spans(service, ask)
    if cold:
        return _after_cold_read(service, durability, ask, deadline, queues, cold)
    got, last, candidates = _try_pop(service, ask, queues)
    if got or poll_ms == 0:
        return Popped(got, last)
    return _long_poll(service, durability, ask, deadline, last, candidates)


def _cold_spans(
    service: PopService, ask: _PopAsk
) -> tuple[list[tuple[str, int]] | None, list[ColdSpan]]:
    """The queues the POP reads (None: it is refused, which it says itself) and the bytes not
    in the page cache that it would read from them."""
    try:
        service.host.gate.check_writable()
        queues = service.candidates(ask.group, ask.topic, ask.queue_id, ask.queues)
        return queues, service.cold_spans(ask.group, queues, ask.max_count, ask.tag_filter)
    except (WriteRefused, StoreError):
        return None, []


async def _after_cold_read(
    service: PopService,
    durability: Durability,
    ask: _PopAsk,
    deadline: int,
    queues: list[tuple[str, int]] | None,
    cold: list[ColdSpan],
) -> Popped:
    """Load ``cold`` off the loop, then POP ``queues`` as any (long-polling if nothing came)."""
    await service.host.cold_reads.load(cold)
    got, last, candidates = _try_pop(service, ask, queues)
    if got or deadline <= service.host.now_ms():
        await _durable(durability, last)
        return Popped(got, None)
    return await _long_poll(service, durability, ask, deadline, last, candidates)


def _try_pop(
    service: PopService, ask: _PopAsk, queues: list[tuple[str, int]] | None = None
) -> tuple[list[PopMessage], PutResult | None, list[tuple[str, int]]]:
    """One POP (of ``queues``, or of the candidates picked now): what it handed out, its last
    append and the queues it read."""
    host = service.host
    try:
        host.gate.check_writable()
        candidates = queues
        if candidates is None:
            candidates = service.candidates(ask.group, ask.topic, ask.queue_id, ask.queues)
        got, last = service.pop(
            ask.group, candidates, ask.max_count, ask.invisible, host.now_ms(), ask.tag_filter
        )
    except WriteRefused as exc:
        raise PopDenied(exc.code, exc.remark) from None
    except StoreError as exc:
        raise PopDenied(ResponseCode.SYSTEM_ERROR, f"POP not recorded: {exc}") from None
    return got, last, candidates


async def _durable(durability: Durability, last: PutResult | None) -> None:
    if last is not None:
        code, remark = await wait_durable(durability, last)
        if code != ResponseCode.SUCCESS:
            raise PopDenied(code, f"{NOT_DURABLE}: {remark}")


async def _long_poll(
    service: PopService,
    durability: Durability,
    ask: _PopAsk,
    deadline: int,
    last: PutResult | None,
    candidates: list[tuple[str, int]],
) -> Popped:
    """Wait for messages until ``deadline`` (the first try found none)."""
    host = service.host
    while True:
        await _durable(durability, last)
        remaining = deadline - host.now_ms()
        if remaining <= 0:
            return Popped([], None)
        # The group's retry queue wakes it too, also before its first copy exists.
        keys = [*candidates, (retry_topic(ask.group), 0)]
        await host.waiters.wait_any(list(dict.fromkeys(keys)), remaining / 1000)
        got, last, candidates = _try_pop(service, ask)
        if got:
            await _durable(durability, last)
            return Popped(got, None)
