"""A FIFO consumer group against a real broker process: a failed message blocks only its queue
(nothing after it handled or committed until it passes), other queues keep flowing, and it is
retried in place after the group's back-off."""

from __future__ import annotations

import asyncio
import time

import pytest

from client import Consumer, Producer
from client.admin import Admin
from client.message import ReceivedMessage
from client.routes import MessageQueue
from protocol.codes import ResponseCode
from protocol.fifo import group_queue
from protocol.pull import ConsumerOffsetQuery, decode_offset
from remoting.client import RemotingClient
from tests.client.receiving import FAST
from tests.support.procs import BrokerProc
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess


async def committed(address: str, queue_id: int) -> int | None:
    conn = await RemotingClient.connect(address)
    try:
        q = ConsumerOffsetQuery(group="FG", topic="Q", queue_id=queue_id)
        resp = await conn.request(q.code, q.header())
        return decode_offset(resp) if resp.code == ResponseCode.SUCCESS else None
    finally:
        conn.close()


async def test_a_failed_message_blocks_only_its_queue(broker: BrokerProc) -> None:
    queues = [MessageQueue(broker.name, q) for q in range(2)]
    names = [f"g{i}" for i in range(50)]
    blocked = next(g for g in names if group_queue(g, queues).queue_id == 0)
    flowing = next(g for g in names if group_queue(g, queues).queue_id == 1)
    async with Admin(broker.address) as admin:
        await admin.create_topic("Q", 2)
        await admin.update_sub_group(
            {"groupName": "FG", "consumeMessageOrderly": True, "retryDelays": "2s"}
        )
    async with Producer(broker.address) as producer:
        for i in range(10):
            for g in (blocked, flowing):
                await producer.send("Q", f"{g}:{i}".encode(), message_group=g)
    log: list[tuple[str, int, bool, float]] = []

    def handle(msg: ReceivedMessage) -> None:
        g, i = msg.body.decode().split(":")
        fail = (g, i) == (blocked, "0") and not any(e[0] == g for e in log)
        log.append((g, int(i), not fail, time.monotonic()))
        if fail:
            raise RuntimeError("first try fails")

    async with Consumer(broker.address, "FG", "Q", **FAST) as consumer:
        task = asyncio.ensure_future(consumer.process(handle))
        try:

            async def flowed() -> bool:
                return sum(1 for e in log if e[0] == flowing) >= 10

            await wait_until_async(flowed, "the other queue's messages", 30, interval=0.05)

            async def other_committed() -> bool:
                return await committed(broker.address, 1) == 10

            await wait_until_async(other_committed, "the other queue committed", 30, interval=0.1)
            during = await committed(broker.address, 0)
            if len([e for e in log if e[0] == blocked]) == 1:
                # Still blocked when the offset was read (a loaded machine may have got past
                # the back-off already): nothing of the blocked queue committed.
                assert during in (None, 0)

            async def done() -> bool:
                return sum(1 for e in log if e[0] == blocked and e[2]) >= 10

            await wait_until_async(done, "the blocked queue after its retry", 30, interval=0.05)
        finally:
            task.cancel()
    mine = [(i, ok) for g, i, ok, _ in log if g == blocked]
    assert mine == [(0, False), *((i, True) for i in range(10))]
    fail_at = next(t for g, _, ok, t in log if g == blocked and not ok)
    retry_at = next(t for g, _, ok, t in log if g == blocked and ok)
    assert retry_at - fail_at >= 1.9  # the group's back-off (2 s), not at once
    # The other queue was not held up: all of it before the retry.
    assert all(t < retry_at for g, _, _, t in log if g == flowing)
    assert [i for g, i, _, _ in log if g == flowing] == list(range(10))
