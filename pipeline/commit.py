"""A streaming query's processed offsets committed at the brokers as a consumer group's
(option ``groupId``), so ``rmqctl consumerProgress -g GROUP`` and the lag metrics show the
query like any consumer (driver side, from the stream reader's ``commit()``)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from client.bootstrap import Bootstrap
from client.routes import MessageQueue
from pipeline.errors import PipelineError, describe
from pipeline.logical import physical_commits
from pipeline.loop import SyncLoop
from pipeline.replicas import topic_route
from pipeline.tls import ClientTls, context_of
from protocol.codes import ResponseCode
from protocol.pull import ConsumerOffsetUpdate
from protocol.request_auth import Credentials
from remoting.client import ConnectionPool
from remoting.errors import RemotingError


async def _commit_async(
    controllers: str,
    topic: str,
    group: str,
    offsets: Mapping[MessageQueue, int],
    timeout: float,
    credentials: Credentials | None,
    tls: ClientTls | None,
) -> list[str]:
    pool = ConnectionPool(timeout, credentials, context_of(tls))
    failures: list[str] = []
    try:
        route = await topic_route(Bootstrap(controllers, pool, timeout), controllers, topic)
        if route.mapping:  # a static topic's logical offsets, as consumers commit them
            offsets = physical_commits(route.mapping, offsets)

        async def one(mq: MessageQueue, offset: int) -> None:
            address = route.master_address(mq.broker_name)
            if address is None:
                failures.append(f"{mq.broker_name}/{mq.queue_id}: the group has no master")
                return
            update = ConsumerOffsetUpdate(
                group=group, topic=topic, queue_id=mq.queue_id, offset=offset
            )
            try:
                conn = await pool.get(address)
                resp = await conn.request(update.code, update.header(), None, timeout)
            except RemotingError as exc:
                failures.append(f"{mq.broker_name}/{mq.queue_id} at {address}: {describe(exc)}")
                return
            if resp.code != ResponseCode.SUCCESS:
                failures.append(f"{mq.broker_name}/{mq.queue_id} at {address}: {resp.remark}")

        await asyncio.gather(*(one(mq, off) for mq, off in sorted(offsets.items())))
    finally:
        pool.close()
    return failures


def commit_offsets(
    controllers: str,
    topic: str,
    group: str,
    offsets: Mapping[MessageQueue, int],
    timeout: float,
    credentials: Credentials | None = None,
    tls: ClientTls | None = None,
) -> list[str]:
    """Commit ``offsets`` (next offset per queue) as ``group``'s at each group's master;
    returns what failed (a failed commit is repaired by the next one: offsets only grow)."""
    try:
        with SyncLoop() as loop:
            return loop.run(
                _commit_async(controllers, topic, group, offsets, timeout, credentials, tls)
            )
    except PipelineError as exc:
        return [describe(exc)]
