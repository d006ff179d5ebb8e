"""Messages for the tests that run against a real broker, sent with our SDK."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from client.admin import Admin
from client.consumer import Consumer
from client.errors import ClientError
from client.producer import Producer
from tests.support.cluster import Cluster
from tests.support.wait import wait_until_async

FAST_CONSUMER: dict[str, Any] = {
    "heartbeat_interval": 0.2,
    "commit_interval": 0.2,
    "suspend_ms": 500,
    "route_refresh_interval": 1.0,
}
"""Keyword arguments of :class:`client.consumer.Consumer` for tests against real broker
processes: heartbeats, offset commits and route refreshes within a second, long polls of half a
second."""


async def fill(address: str, topic: str, n: int, queues: int = 2) -> list[str]:
    """Create ``topic`` with ``queues`` queues on the broker at ``address`` and send it ``n``
    messages at once (body ``m<i>``, key ``k<i>``); their message ids, in the order sent."""
    async with Admin(address) as admin:
        await admin.create_topic(topic, queues)
    async with Producer(address) as producer:
        results = await asyncio.gather(
            *(producer.send(topic, f"m{i}".encode(), keys=f"k{i}") for i in range(n))
        )
    return [r.msg_id for r in results]


async def create_once_registered(cluster: Cluster, topic: str, queues: int, what: str) -> list[str]:
    """Create ``topic`` through the controllers, retried while it is refused (its groups'
    masters have not all registered yet; ``what`` names the wait, 30 s at most): the groups it
    was created on."""
    async with Admin(cluster.controller_addresses) as admin:

        async def create() -> list[str]:  # [] (refused, or on no group yet): wait on
            try:
                return await admin.create_topic(topic, queues)
            except ClientError:
                return []

        created: list[str] = await wait_until_async(
            create, what, 30, interval=0.2, on_timeout=cluster.logs
        )
        return created


async def consumed(cluster: Cluster, group: str, topic: str, count: int) -> None:
    """Group ``group`` reads ``count`` messages of ``topic`` and commits its offsets (60 s at
    most)."""
    async with Consumer(
        cluster.controller_addresses, group, topic, commit_interval=0.2
    ) as consumer:
        got = 0

        async def received() -> bool:
            nonlocal got
            got += len(await consumer.receive(timeout=0.5))
            return got >= count

        await wait_until_async(
            received, f"{group} to read {count} of {topic}", 60, on_timeout=cluster.logs
        )


async def dead_lettered(
    admin: Admin,
    group: str,
    what: str,
    timeout: float,
    *,
    interval: float = 0.01,
    on_timeout: Callable[[], str] | None = None,
) -> list[dict[str, Any]]:
    """Wait until broker-a's ``%DLQ%<group>`` holds messages (QUERY_DLQ_MESSAGES through
    ``admin``), as :func:`tests.support.wait.wait_until_async` waits; those messages."""

    async def parked() -> list[dict[str, Any]]:
        return (await admin.query_dlq(group)).get("broker-a", [])

    return await wait_until_async(parked, what, timeout, interval=interval, on_timeout=on_timeout)
