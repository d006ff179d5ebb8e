"""The topics a read names: ``topic``, a ``topics`` list, or every topic matching
``topicPattern`` (listed from each broker group's master: GET_ALL_TOPIC_CONFIG)."""

from __future__ import annotations

import asyncio
import re

from client.admin import Admin
from client.bootstrap import parse_addresses
from client.errors import ClientError
from pipeline.errors import PipelineError, describe
from pipeline.loop import SyncLoop
from pipeline.tls import ClientTls, context_of
from protocol.broker_requests.admin import AllTopicsQuery, TopicTable
from protocol.request_auth import Credentials
from remoting.client import ConnectionPool
from remoting.errors import RemotingError

#: topics the brokers keep for themselves (retries, dead letters, scheduled messages)
_SYSTEM = ("%", "rmq_sys_", "SCHEDULE_TOPIC", "RMQ_SYS_")


async def _list_async(
    controllers: str, timeout: float, credentials: Credentials | None, tls: ClientTls | None
) -> set[str]:
    try:
        async with Admin(controllers, timeout, credentials, context_of(tls)) as admin:
            info = await admin.cluster_info()
        masters = sorted({b.address for members in info.values() for b in members if b.is_master})
    except (ClientError, RemotingError):
        masters = []
    # Development mode: the "controllers" are a lone broker, which answers for itself.
    addresses = masters or parse_addresses(controllers)
    pool = ConnectionPool(timeout, credentials, context_of(tls))
    try:

        async def one(address: str) -> set[str] | str:
            try:
                conn = await pool.get(address)
                every = AllTopicsQuery()
                answer = await conn.call(every.code, *every.encode(), timeout)
                table = TopicTable.parse(answer.header, answer.body)
            except (RemotingError, ValueError) as exc:
                return f"{address}: {describe(exc)}"
            return set(table.queues)

        found = await asyncio.gather(*(one(a) for a in addresses))
    finally:
        pool.close()
    names = set().union(*(f for f in found if isinstance(f, set)))
    if not names and any(isinstance(f, str) for f in found):
        raise PipelineError(
            "cannot list topics: " + "; ".join(f for f in found if isinstance(f, str))
        )
    return names


def matching_topics(
    controllers: str,
    pattern: re.Pattern[str],
    timeout: float,
    credentials: Credentials | None = None,
    tls: ClientTls | None = None,
) -> list[str]:
    """The cluster's topics whose whole name matches ``pattern`` (system topics left out)."""
    with SyncLoop() as loop:
        names = loop.run(_list_async(controllers, timeout, credentials, tls))
    return sorted(n for n in names if pattern.fullmatch(n) and not n.startswith(_SYSTEM))
