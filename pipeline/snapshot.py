"""A topic's route and, per queue, the first retained offset and the end of the committed
messages (GET_MAX_OFFSET with ``committed``: up to the confirm offset), each group asked at its
master or, while it has none, at a slave (driver side: planning reads). A static topic's queues
are its logical queues (:mod:`pipeline.logical`)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from client.bootstrap import Bootstrap
from client.routes import MessageQueue, TopicRoute
from pipeline.errors import PipelineError, describe
from pipeline.logical import logical_bounds
from pipeline.loop import SyncLoop
from pipeline.offsets import QueueBounds
from pipeline.replicas import replica_addresses, topic_route
from pipeline.tls import ClientTls, context_of
from protocol.pull import (
    AnswerError,
    MaxOffsetQuery,
    MinOffsetQuery,
    OffsetSearch,
    decode_offset,
)
from protocol.request_auth import Credentials
from protocol.static_topic import LogicalQueue, logical_of
from remoting.client import ConnectionPool
from remoting.errors import RemotingError


@dataclass(slots=True)
class Snapshot:
    """A topic's route and the bounds of every queue whose group answered (a static topic's:
    of its logical queues, ``MessageQueue(LOGICAL_BROKER, q)``)."""

    route: TopicRoute
    bounds: dict[MessageQueue, QueueBounds]
    #: broker group -> why its queues are missing from ``bounds``
    missing: dict[str, str] = field(default_factory=dict)
    #: a static topic's physical queues' bounds (empty for an ordinary topic)
    physical: dict[MessageQueue, QueueBounds] = field(default_factory=dict)


async def _group_bounds(
    pool: ConnectionPool, topic: str, addresses: list[str], queues: int, timeout: float
) -> dict[int, QueueBounds]:
    """Min and committed max offsets of a group's queues from the first replica that answers."""
    failures: list[str] = []
    for address in addresses:
        try:
            conn = await pool.get(address)

            async def one(queue_id: int, conn: Any = conn) -> QueueBounds:
                low = MinOffsetQuery(topic=topic, queue_id=queue_id)
                high = MaxOffsetQuery(topic=topic, queue_id=queue_id, committed=True)
                lo, hi = await asyncio.gather(
                    conn.call(low.code, low.header(), None, timeout),
                    conn.call(high.code, high.header(), None, timeout),
                )
                return QueueBounds(decode_offset(lo), decode_offset(hi))

            found = await asyncio.gather(*(one(q) for q in range(queues)))
            return dict(enumerate(found))
        except (RemotingError, AnswerError) as exc:
            failures.append(f"{address}: {describe(exc)}")
    raise PipelineError("; ".join(failures) or "no replica in the route")


async def snapshot_async(
    controllers: str,
    topic: str,
    timeout: float,
    credentials: Credentials | None = None,
    tls: ClientTls | None = None,
) -> Snapshot:
    pool = ConnectionPool(timeout, credentials, context_of(tls))
    try:
        bootstrap = Bootstrap(controllers, pool, timeout)
        route = await topic_route(bootstrap, controllers, topic)
        names = [b.broker_name for b in route.brokers]
        results = await asyncio.gather(
            *(
                _group_bounds(
                    pool, topic, replica_addresses(route, b.broker_name), b.queues, timeout
                )
                for b in route.brokers
            ),
            return_exceptions=True,
        )
        snap = Snapshot(route, {})
        for name, result in zip(names, results, strict=True):
            if isinstance(result, BaseException):
                if not isinstance(result, PipelineError):
                    raise result
                snap.missing[name] = describe(result)
                continue
            for queue_id, b in result.items():
                snap.bounds[MessageQueue(name, queue_id)] = b
        if route.mapping:
            snap.physical = snap.bounds
            snap.bounds = logical_bounds(route.mapping, snap.physical)
        return snap
    finally:
        pool.close()


def snapshot(
    controllers: str,
    topic: str,
    timeout: float,
    credentials: Credentials | None = None,
    tls: ClientTls | None = None,
) -> Snapshot:
    """The route and queue bounds of ``topic`` (raises :class:`PipelineError` for an unknown
    topic or unreachable controllers; unreachable groups are listed in ``missing``)."""
    with SyncLoop() as loop:
        return loop.run(snapshot_async(controllers, topic, timeout, credentials, tls))


def route_of(
    controllers: str,
    topic: str,
    timeout: float,
    credentials: Credentials | None = None,
    tls: ClientTls | None = None,
) -> TopicRoute:
    """``topic``'s route from the controllers (raises :class:`PipelineError`)."""

    async def go() -> TopicRoute:
        pool = ConnectionPool(timeout, credentials, context_of(tls))
        try:
            return await topic_route(Bootstrap(controllers, pool, timeout), controllers, topic)
        finally:
            pool.close()

    with SyncLoop() as loop:
        return loop.run(go())


async def _search_group(
    pool: ConnectionPool,
    topic: str,
    addresses: list[str],
    times: dict[int, int],
    timeout: float,
) -> dict[int, int]:
    """SEARCH_OFFSET_BY_TIMESTAMP for some queues of one group, at the first replica that
    answers."""
    failures: list[str] = []
    for address in addresses:
        try:
            conn = await pool.get(address)

            async def one(queue_id: int, ts: int, conn: Any = conn) -> int:
                search = OffsetSearch(topic=topic, queue_id=queue_id, timestamp=ts)
                answer = await conn.call(search.code, search.header(), None, timeout)
                return decode_offset(answer)

            ids = sorted(times)
            found = await asyncio.gather(*(one(q, times[q]) for q in ids))
            return dict(zip(ids, found, strict=True))
        except (RemotingError, AnswerError) as exc:
            failures.append(f"{address}: {describe(exc)}")
    raise PipelineError("; ".join(failures) or "no replica in the route")


def offsets_for_times(
    snap: Snapshot,
    topic: str,
    times: dict[MessageQueue, int],
    timeout: float,
    credentials: Credentials | None = None,
    tls: ClientTls | None = None,
) -> dict[MessageQueue, int]:
    """Per queue, the first offset stored at or after its timestamp (ms), clamped to the
    queue's retained, committed range: the queue's end when no message is that recent. A static
    topic's logical queue: the first such message in its oldest item that has one."""

    mapping = snap.route.mapping

    async def go() -> dict[MessageQueue, int]:
        pool = ConnectionPool(timeout, credentials, context_of(tls))
        try:
            wanted = dict(times)
            if mapping:  # every item of each logical queue is searched
                wanted = {
                    MessageQueue(item.broker_name, item.physical_queue): ts
                    for mq, ts in times.items()
                    for item in mapping[mq.queue_id]
                }
            by_group: dict[str, dict[int, int]] = {}
            for mq, ts in wanted.items():
                by_group.setdefault(mq.broker_name, {})[mq.queue_id] = ts
            found: dict[MessageQueue, int] = {}
            for name, queue_times in sorted(by_group.items()):
                answers = await _search_group(
                    pool, topic, replica_addresses(snap.route, name), queue_times, timeout
                )
                for queue_id, offset in answers.items():
                    found[MessageQueue(name, queue_id)] = offset
            out: dict[MessageQueue, int] = {}
            for mq in times:
                b = snap.bounds[mq]
                offset = found[mq] if not mapping else _logical_found(mapping, mq, found, b)
                out[mq] = min(max(offset, b.min_offset), b.max_offset)
            return out
        finally:
            pool.close()

    with SyncLoop() as loop:
        return loop.run(go())


def _logical_found(
    mapping: tuple[LogicalQueue, ...],
    mq: MessageQueue,
    found: dict[MessageQueue, int],
    bounds: QueueBounds,
) -> int:
    """A logical queue's answer from its items' answers (each the first physical offset at or
    after the time, or the item's end when none is): the first item, oldest first, whose answer
    lies inside it; the queue's end when none does."""
    for item in mapping[mq.queue_id]:
        physical = found[MessageQueue(item.broker_name, item.physical_queue)]
        end = item.physical_end()
        if end is None or physical < end:
            return logical_of(item, physical)
    return bounds.max_offset
