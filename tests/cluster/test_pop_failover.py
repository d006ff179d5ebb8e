"""POP across a master failover, real processes (issue 12): messages popped and not acked when
the master is killed -9 are delivered again by the new master (attempt 2) once their invisible
time passes; the ones acked before the kill are not. The in-flight set comes from the revive
log the slave holds (docs/pop.md)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable

import pytest

from client import Producer
from client.bootstrap import Bootstrap
from client.simple_consumer import PopMessage, SimpleConsumer
from tests.cluster.support import (
    master_with_topic,
    new_master,
    node_at,
    with_one_group,
)
from tests.support.cluster import BrokerNode, Cluster

pytestmark = pytest.mark.multiprocess


cluster = with_one_group(2)


async def _failover_redelivers_exactly_the_unacked(
    cluster: Cluster,
    boot: Bootstrap,
    n: int,
    invisible: float,
    settle: Callable[[BrokerNode], Awaitable[None]] | None = None,
) -> BrokerNode:
    """Pop ``n`` (hidden for ``invisible`` s, long enough to ack half of them), ack every
    other one, (``settle`` the master,) kill -9 the master; the new master must redeliver
    exactly the unacked half. Returns the new master."""
    master = await master_with_topic(boot, cluster, "T", 2, size=2)
    addresses = cluster.controller_addresses
    async with Producer(addresses, send_deadline=30) as producer:
        sent = await asyncio.gather(*(producer.send("T", f"m{i}".encode()) for i in range(n)))
    ids = {r.msg_id for r in sent}
    popped: list[PopMessage] = []
    async with SimpleConsumer(addresses, "G", "T") as consumer:
        deadline = time.monotonic() + 60
        while len(popped) < n and time.monotonic() < deadline:
            popped += await consumer.receive(64, invisible_duration=invisible, wait=1.0)
        assert {m.msg_id for m in popped} == ids and len(popped) == n
        acked = {m.msg_id for m in popped[::2]}
        assert set(await consumer.ack_many(popped[::2])) == {None}
    unacked = ids - acked
    if settle is not None:
        await settle(master)
    master.kill9()
    after = await new_master(boot, cluster, master.address)
    assert after["masterAddress"] != master.address

    again: Counter[str] = Counter()
    async with SimpleConsumer(addresses, "G", "T") as consumer:
        deadline = time.monotonic() + 60
        while sum(again.values()) < len(unacked) and time.monotonic() < deadline:
            for msg in await consumer.receive(64, invisible_duration=30, wait=1.0):
                assert msg.attempt == 2, msg
                again[msg.origin_msg_id] += 1
                await consumer.ack(msg)
        # Nothing more comes: the acked ones stay acked, the redelivered ones were acked.
        extra = await consumer.receive(64, invisible_duration=30, wait=invisible / 2)
        assert extra == []
    assert set(again) == unacked, (len(again), len(unacked), cluster.logs())
    assert set(again.values()) == {1}
    return node_at(cluster, after["masterAddress"])


async def test_failover_redelivers_exactly_the_unacked(cluster: Cluster, boot: Bootstrap) -> None:
    await _failover_redelivers_exactly_the_unacked(cluster, boot, 200, 4.0)


@pytest.mark.soak
async def test_failover_redelivers_exactly_the_unacked_1000(
    cluster: Cluster, boot: Bootstrap
) -> None:
    await _failover_redelivers_exactly_the_unacked(cluster, boot, 1000, 10.0)
