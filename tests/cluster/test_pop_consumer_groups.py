"""``Consumer(..., pop=True)`` on a topic served by two broker groups: the members share the
queues of both (no rebalance), every message is handled exactly once."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable

import pytest

from client.admin import Admin
from client.consumer import Consumer
from client.errors import ClientError
from client.message import ReceivedMessage
from client.producer import Producer
from daemon.tasks import cancel_and_wait
from tests.support.cluster import Cluster
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess

N = 120


async def test_pop_members_share_the_queues_of_every_broker_group(cluster: Cluster) -> None:
    for name in ("broker-a", "broker-b"):
        cluster.add_group(name, 1)
    addresses = cluster.controller_addresses
    async with Admin(addresses) as admin:

        async def both_masters() -> bool:
            info = await admin.cluster_info()
            names = {b.broker_name for bs in info.values() for b in bs if b.is_master}
            return names == {"broker-a", "broker-b"}

        await wait_until_async(both_masters, "both masters registered", 60, on_timeout=cluster.logs)
        await admin.create_topic("T", 2)

        async def routed() -> bool:
            try:
                route = await admin.topic_route("T")
            except ClientError:
                return False
            return {b.broker_name for b in route.brokers if b.queues} == {"broker-a", "broker-b"}

        await wait_until_async(routed, "T routed to both groups", 60, on_timeout=cluster.logs)
    async with Producer(addresses) as producer:
        sent = [(await producer.send("T", f"m{i}".encode())).msg_id for i in range(N)]
    handled: Counter[str] = Counter()
    where: Counter[tuple[int, str]] = Counter()

    def handler_of(i: int) -> Callable[[ReceivedMessage], None]:
        def handle(msg: ReceivedMessage) -> None:
            handled[msg.msg_id] += 1
            where[(i, msg.broker_name)] += 1

        return handle

    members = [Consumer(addresses, "G", "T", pop=True, suspend_ms=1000) for _ in range(3)]
    tasks: list[asyncio.Task[None]] = []
    try:
        for member in members:
            await member.start()
        tasks = [asyncio.ensure_future(m.process(handler_of(i))) for i, m in enumerate(members)]
        await wait_until_async(
            lambda: len(handled) == N, "every message handled", 60, on_timeout=cluster.logs
        )
        await wait_until_async(
            lambda: sum(m.pop.acked for m in members if m.pop) >= N, "every message acked", 30
        )
    finally:
        await cancel_and_wait(tasks)
        await asyncio.gather(*(m.close() for m in members))
    assert set(handled) == set(sent) and set(handled.values()) == {1}
    assert {broker for _, broker in where} == {"broker-a", "broker-b"}
