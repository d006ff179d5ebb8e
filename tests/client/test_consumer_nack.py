"""Consumer.nack and Consumer.process when a message cannot be handed back or is left unfinished:
the queue's committed offset stops at the message, so it is delivered again (at least once,
never lost)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from client.consumer import Consumer
from client.errors import ClientError
from client.message import ReceivedMessage
from client.producer import Producer
from tests.client import receiving
from tests.client.fakebroker import FakeCluster
from tests.support.wait import wait_until_async

FAST = {"heartbeat_interval": 0.1, "commit_interval": 0.1, "suspend_ms": 200}


@pytest.fixture
async def cluster() -> AsyncIterator[FakeCluster]:
    c = FakeCluster()
    (await c.add("broker-a")).create("T", 1)
    yield c
    await c.stop()


async def test_a_failed_nack_holds_the_queue_offset_at_the_message(cluster: FakeCluster) -> None:
    broker = cluster.brokers["broker-a"]
    async with Producer(broker.address) as producer:
        for i in range(5):
            await producer.send("T", f"m{i}".encode())
    consumer = Consumer(broker.address, "G", "T", nack_deadline=1.0, **FAST)
    await consumer.start()
    try:
        got = await receiving.receive_until(consumer, lambda got: len(got) >= 5, 10)
        # The fake broker does not serve CONSUMER_SEND_MSG_BACK: a definitive refusal.
        with pytest.raises(ClientError, match=r"nack of .* failed"):
            await consumer.nack(got[1], "bad")
        assert await consumer.receive(0.1) == []  # confirms everything handed out
        await consumer.commit()
        await wait_until_async(
            lambda: broker.offsets.get(("G", "T", 0)) == 1, "the commit held at offset 1", 5
        )
    finally:
        await consumer.close()
    assert broker.offsets[("G", "T", 0)] == 1  # not 5: m1 to m4 come again


async def test_cancelling_process_redelivers_the_message_in_hand(cluster: FakeCluster) -> None:
    broker = cluster.brokers["broker-a"]
    async with Producer(broker.address) as producer:
        for i in range(5):
            await producer.send("T", f"m{i}".encode())
    stuck = asyncio.Event()
    handled: list[bytes] = []

    async def handler(msg: ReceivedMessage) -> None:
        handled.append(msg.body)
        if msg.body == b"m2":
            stuck.set()
            await asyncio.Event().wait()  # a handler that hangs

    async with Consumer(broker.address, "G", "T", **FAST) as consumer:
        task = asyncio.ensure_future(consumer.process(handler))
        await asyncio.wait_for(stuck.wait(), 10)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    # Closing commits what was consumed: m0 and m1, not the message in hand nor what follows.
    assert handled == [b"m0", b"m1", b"m2"]
    assert broker.offsets[("G", "T", 0)] == 2
