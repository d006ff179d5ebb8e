"""Message-group sends against fake broker groups: a retry stays on the group's queue (never
another broker group) and later sends of the group wait for it, so order holds."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from client.producer import Producer
from client.routes import MessageQueue
from protocol.codes import ResponseCode
from protocol.fifo import group_queue
from protocol.message import iter_records
from tests.client.fakebroker import FakeCluster

QUEUES = [MessageQueue(b, q) for b in ("broker-a", "broker-b") for q in range(4)]
# A group whose queue is on broker-a.
GROUP = next(
    f"order-{i}" for i in range(100) if group_queue(f"order-{i}", QUEUES).broker_name == "broker-a"
)
HOME = group_queue(GROUP, QUEUES)


@pytest.fixture
async def producer(cluster: FakeCluster) -> AsyncIterator[Producer]:
    p = Producer(cluster.brokers["broker-a"].address, send_timeout=2, retry_backoff=0.01)
    await p.start()
    yield p
    await p.close()


def bodies_at(cluster: FakeCluster, mq: MessageQueue) -> list[bytes]:
    raw = cluster.brokers[mq.broker_name].queues[("T", mq.queue_id)]
    return [rec.body for r in raw for rec in iter_records(r)]


async def test_a_retry_stays_on_the_groups_queue(cluster: FakeCluster, producer: Producer) -> None:
    cluster.brokers["broker-a"].send_errors = [ResponseCode.SYSTEM_BUSY, ResponseCode.NOT_MASTER]
    r = await producer.send("T", b"x", message_group=GROUP)
    assert (r.broker_name, r.queue_id) == (HOME.broker_name, HOME.queue_id)
    assert cluster.brokers["broker-b"].stored("T") == 0  # never the other broker group


async def test_later_sends_wait_for_a_retried_one(cluster: FakeCluster, producer: Producer) -> None:
    a = cluster.brokers["broker-a"]
    await producer.send("T", b"warm-up", message_group=GROUP)  # route cached
    a.master_down = True  # NOT_MASTER to every send until the "failover" below

    async def failover() -> None:
        await asyncio.sleep(0.3)
        a.master_down = False

    healing = asyncio.ensure_future(failover())
    results = await asyncio.gather(
        *(producer.send("T", b"m%d" % i, message_group=GROUP) for i in range(30))
    )
    await healing
    assert {(r.broker_name, r.queue_id) for r in results} == {(HOME.broker_name, HOME.queue_id)}
    assert bodies_at(cluster, HOME) == [b"warm-up", *(b"m%d" % i for i in range(30))]
    assert [r.queue_offset for r in results] == list(range(1, 31))


async def test_a_batch_retried_keeps_its_place(cluster: FakeCluster, producer: Producer) -> None:
    a = cluster.brokers["broker-a"]
    await producer.send("T", b"warm-up", message_group=GROUP)
    a.send_errors = [ResponseCode.SYSTEM_BUSY]  # the first request (alone) fails once
    a.batch_errors = [ResponseCode.FLUSH_SLAVE_TIMEOUT, ResponseCode.SYSTEM_BUSY]
    results = await asyncio.gather(
        *(producer.send("T", b"m%d" % i, message_group=GROUP) for i in range(40))
    )
    assert not a.batch_errors  # the gathered batch was retried
    assert bodies_at(cluster, HOME) == [b"warm-up", *(b"m%d" % i for i in range(40))]
    assert all((r.broker_name, r.queue_id) == (HOME.broker_name, HOME.queue_id) for r in results)
