"""Consumer progress on this broker: per consumer group and queue, what a consumer can read, what
the group committed, and the lag between them (GET_CONSUME_STATS, ``rmq_consumer_group_lag``).

A group's topics here are those it committed an offset for, plus those its live members
subscribe to; each such topic contributes every queue this broker has of it. Every figure comes
from counters held in memory (the ConsumeQueue's max offset, the committed offset table); the
one read that may touch a ConsumeQueue's mapped entries is the search for the last message at or
below the confirm offset, which is skipped when the queue's last message is already confirmed
(the common case) and is a binary search otherwise. Runs on the event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Iterator
from typing import Final

import structlog

from broker.context import BrokerContext
from protocol.consume_stats import QueueStats, queue_lag

log = structlog.get_logger(__name__)


def group_topics(
    ctx: BrokerContext,
    group: str | None,
    committed: dict[str, dict[str, dict[int, int]]] | None = None,
) -> dict[str, set[str]]:
    """group -> topics to report (one group when ``group`` is given; unknown: empty).
    ``committed``: the offset table's snapshot when the caller has one."""
    out: dict[str, set[str]] = {}
    for name, by_topic in (ctx.offsets.snapshot() if committed is None else committed).items():
        out.setdefault(name, set()).update(by_topic)
    for name, subscribed in ctx.groups.subscriptions().items():
        out.setdefault(name, set()).update(subscribed)
    if group is not None:
        return {group: out[group]} if group in out else {}
    return out


def queue_stats(
    ctx: BrokerContext, group: str | None = None, topic: str | None = None
) -> dict[str, tuple[QueueStats, ...]]:
    """group -> its queue rows on this broker, sorted by (topic, queue id); groups with no row
    (e.g. only topics this broker does not have) are left out. With both ``group`` and ``topic``
    the topic's queues are reported for the group even if it never committed or subscribed
    here (its committed offset is then None). Every queue read is opened if it was not yet
    since the start (see :func:`progress` for the bounded form)."""
    return progress(ctx, group, topic, opened_only=False)[0]


def stats_topics(ctx: BrokerContext, group: str | None, topic: str | None) -> dict[str, list[str]]:
    """group -> the sorted topics :func:`queue_stats` reports for it (before leaving out the
    topics this broker does not have)."""
    known = group_topics(ctx, group)
    if group is not None and topic is not None:
        # Named together, a group is reported on the topic even where it has no position yet
        # (RocketMQ's examineConsumeStats): every message there is still to consume.
        known.setdefault(group, set()).add(topic)
    return {
        name: sorted(t for t in topics if topic is None or t == topic)
        for name, topics in sorted(known.items())
    }


def progress(
    ctx: BrokerContext, group: str | None, topic: str | None, *, opened_only: bool
) -> tuple[dict[str, tuple[QueueStats, ...]], dict[str, tuple[str, ...]]]:
    """:func:`queue_stats`' rows, and group -> the topics left out of them because a queue
    of theirs was not opened since the start (only with ``opened_only``, which opens none:
    :func:`open_queues` opens them first, a bounded number at a time)."""
    out: dict[str, tuple[QueueStats, ...]] = {}
    left_out: dict[str, tuple[str, ...]] = {}
    for name, wanted in stats_topics(ctx, group, topic).items():
        if opened_only:
            unopened = tuple(t for t in wanted if unopened_queues(ctx, t))
            if unopened:
                left_out[name] = unopened
                wanted = [t for t in wanted if t not in unopened]
        rows = tuple(_rows(ctx, name, wanted))
        if rows:
            out[name] = rows
    return out, left_out


#: ConsumeQueues not opened since the broker's start that one GET_CONSUME_STATS opens at most:
#: after a clean restart every queue opens (its files mapped and searched) when first read,
#: and the progress of every group read them all in one request: with 2,000 queues that held
#: the event loop for tens of seconds (see :func:`open_queues`); the topics of the queues left
#: are listed as not opened yet in the answer, and the next requests open them
CONSUME_STATS_QUEUE_OPENS: Final = 128

#: queues :func:`open_queues` opens between two turns of the event loop
QUEUE_OPENS_PER_TURN: Final = 8


def unopened_queues(ctx: BrokerContext, topic: str) -> list[int]:
    """The ids of ``topic``'s queues (those its config has) not opened since the start."""
    config = ctx.topics.get(topic)
    if config is None:
        return []
    return [q for q in ctx.store.queue_ids_pending(topic) if q < config.queues]


async def open_queues(ctx: BrokerContext, topics: list[str], budget: int) -> int:
    """Open the queues of ``topics`` (in that order) not opened since the start, at most
    ``budget`` of them, handing the event loop back after every :data:`QUEUE_OPENS_PER_TURN`
    (HA, heartbeats and other requests go on meanwhile); how many were opened."""
    opened = 0
    for topic in topics:
        for queue_id in unopened_queues(ctx, topic):
            if opened >= budget:
                return opened
            ctx.store.queue_min_offset(topic, queue_id)  # the first read opens it
            opened += 1
            if opened % QUEUE_OPENS_PER_TURN == 0:
                await asyncio.sleep(0)
    return opened


#: queues not loaded since the broker's start that one scrape's lag loads at most (and the
#: queues of the topic that crosses it): after a restart of a broker with thousands of queues,
#: loading every one in the scrape held its event loop for half a minute (HA connections timed
#: out); the others' series come with the next scrapes
LAG_QUEUE_LOADS_PER_SCRAPE: Final = 256


def lag_by_group_topic(
    ctx: BrokerContext, load_budget: int | None = None
) -> dict[tuple[str, str], int]:
    """(group, topic) -> the sum of its queues' lags here: what ``rmq_consumer_group_lag``
    exports, the same figures as :func:`queue_stats` (the same :func:`queue_lag`), with each
    queue's bounds read once for all groups. ``load_budget``: once this many queues not loaded
    since the start were loaded, the topics with such queues are left out (None: no limit)."""
    committed = ctx.offsets.snapshot()
    bounds: dict[str, list[tuple[int, int]]] = {}
    totals: dict[tuple[str, str], int] = {}
    for name, topics in group_topics(ctx, None, committed).items():
        by_topic = committed.get(name, {})
        for topic in topics:
            queues = bounds.get(topic)
            if queues is None:
                pending = ctx.store.queues_pending(topic)
                if load_budget is not None and pending:
                    if load_budget <= 0:
                        continue  # loaded by a later scrape
                    load_budget -= pending
                queues = bounds[topic] = queue_bounds(ctx, topic)
            if not queues:
                continue  # not (or no longer) a topic here
            offsets = by_topic.get(topic, {})
            totals[(name, topic)] = sum(
                queue_lag(max_offset, offsets.get(queue_id), min_offset)
                for queue_id, (min_offset, max_offset) in enumerate(queues)
            )
    return totals


def queue_bounds(ctx: BrokerContext, topic: str) -> list[tuple[int, int]]:
    """(min offset, max offset a consumer can read) of each queue of ``topic`` here."""
    config = ctx.topics.get(topic)
    if config is None:
        return []
    store = ctx.store
    visible = ctx.visible_offset()
    return [
        (
            store.queue_min_offset(topic, queue_id),
            store.queue_visible_max_offset(topic, queue_id, visible),
        )
        for queue_id in range(config.queues)
    ]


def _rows(ctx: BrokerContext, group: str, topics: list[str]) -> Iterator[QueueStats]:
    store = ctx.store
    visible = ctx.visible_offset()
    offsets = ctx.offsets
    pop = ctx.pop.state if ctx.role.is_master else None
    for topic in topics:
        config = ctx.topics.get(topic)
        if config is None:
            continue  # not (or no longer) a topic here: nothing to read, nothing to lag
        for queue_id in range(config.queues):
            yield QueueStats(
                topic=topic,
                queue_id=queue_id,
                min_offset=store.queue_min_offset(topic, queue_id),
                max_offset=store.queue_visible_max_offset(topic, queue_id, visible),
                consumer_offset=offsets.query(group, topic, queue_id),
                last_consume_ms=offsets.last_consume_ms(group, topic, queue_id),
                inflight=0 if pop is None else pop.inflight_on(group, topic, queue_id),
            )


class LagAtScrape:
    """``rmq_consumer_group_lag``'s reading: :func:`lag_by_group_topic` computed on the event
    loop when the scrape thread asks (store and offset table are the loop's to read), or None
    (no series) on a slave, before :meth:`start`, or when the loop does not answer within
    ``timeout`` seconds. Only a master exports it: a slave's offsets are a copy, up to
    ``slave_config_sync_interval_ms`` old, and summing both would count a group twice."""

    def __init__(self, ctx: BrokerContext, timeout: float = 2.0) -> None:
        self.ctx = ctx
        self.timeout = timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None

    def start(self) -> None:
        """Called on the event loop once the broker serves."""
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()

    def __call__(self) -> dict[tuple[str, str], int] | None:
        loop = self._loop
        if loop is None or loop.is_closed() or not self.ctx.role.is_master:
            return None
        if threading.get_ident() == self._loop_thread:
            return lag_by_group_topic(self.ctx, LAG_QUEUE_LOADS_PER_SCRAPE)
        answer: concurrent.futures.Future[dict[tuple[str, str], int]] = concurrent.futures.Future()

        def compute() -> None:
            if not answer.set_running_or_notify_cancel():
                return  # the scrape gave up waiting
            try:
                answer.set_result(lag_by_group_topic(self.ctx, LAG_QUEUE_LOADS_PER_SCRAPE))
            except Exception as exc:  # reported to the scrape, never to the loop
                answer.set_exception(exc)

        try:
            loop.call_soon_threadsafe(compute)
            return answer.result(self.timeout)
        except RuntimeError:  # the loop closed meanwhile
            return None
        except concurrent.futures.TimeoutError:
            answer.cancel()
            log.warning("consumer lag not computed in time for the scrape", timeout=self.timeout)
            return None
        except Exception as exc:
            log.error("computing consumer lag failed", error=f"{type(exc).__name__}: {exc}")
            return None
