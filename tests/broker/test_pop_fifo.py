"""FIFO message groups through POP on an in-process broker over a real socket (docs/fifo.md):
a FIFO consumer group gets a message group's next message only after the previous one is
acked, while other groups of the same queue flow; an unacked message comes back in place
(same queue offset, attempt + 1) and blocks its group, and after the group's attempts goes to
the DLQ; the blocked-groups gauge follows; bad handles and another group's acks are refused."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from broker.broker import Broker
from client.admin import Admin
from client.consumer import Consumer
from client.errors import BrokerError
from client.message import ReceivedMessage
from client.producer import Producer
from client.progress import ProgressAdmin
from client.simple_consumer import PopMessage, SimpleConsumer
from protocol.codes import ResponseCode
from protocol.fifo import PROP_MESSAGE_GROUP
from protocol.message import Message
from tests.broker.support import figure, running, small_config
from tests.support.messages import dead_lettered
from tests.support.wait import stays_async, wait_until_async

GROUP = "Fifo"


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    async with running(small_config(tmp_path)) as b:
        b.ctx.create_topic("T", 1)  # one queue: every message group shares it
        yield b


def names(msgs: list[PopMessage]) -> list[str]:
    return [m.body.decode() for m in msgs]


async def _setup(address: str, retry_max_times: int = 1) -> None:
    async with Admin(address) as admin:
        await admin.update_sub_group(
            {
                "groupName": GROUP,
                "consumeMessageOrderly": True,
                "retryMaxTimes": retry_max_times,
            }
        )
    async with Producer(address) as producer:
        for i in range(3):
            for g in ("a", "b"):
                await producer.send("T", f"{g}{i}".encode(), message_group=g)
        await producer.send("T", b"plain")


async def test_a_message_group_waits_for_its_ack_while_others_flow(broker: Broker) -> None:
    address = f"127.0.0.1:{broker.port}"
    await _setup(address)
    async with (
        SimpleConsumer(address, GROUP, "T") as c1,
        SimpleConsumer(address, GROUP, "T") as c2,
    ):
        first = await c1.receive(16, invisible_duration=5, wait=2)
        assert names(first) == ["a0", "b0", "plain"]
        assert [m.message_group for m in first] == ["a", "b", None]
        assert {m.attempt for m in first} == {1}
        await c1.ack(first[2])

        async def blocked(n: int) -> bool:
            return figure(broker, "rmq_broker_pop_fifo_blocked_groups", group=GROUP) == n

        await wait_until_async(lambda: blocked(2), "two groups blocked", 10, interval=0.1)
        # Nothing else may go out while a0 and b0 are out, to any member.
        assert await c2.receive(16, invisible_duration=30, wait=0.5) == []
        # b0 acked: a member waiting in a long poll is woken with b1.
        waiting = asyncio.ensure_future(c2.receive(16, invisible_duration=30, wait=30))
        await wait_until_async(lambda: broker.ctx.waiters.waiting == 1, "c2's POP long-polling")
        await stays_async(lambda: not waiting.done(), 0.2, "c2's long poll unanswered")
        await c1.ack(first[1])
        b1 = await asyncio.wait_for(waiting, 15)
        assert names(b1) == ["b1"]
        # a0 not acked: after its invisible time it comes back in place, attempt 2, and a1
        # still waits behind it.
        again = await c2.receive(16, invisible_duration=30, wait=20)
        assert names(again) == ["a0"] and again[0].attempt == 2
        assert again[0].msg_id == first[0].msg_id
        assert again[0].queue_offset == first[0].queue_offset
        assert again[0].topic == "T" and again[0].stored_topic == "T"
        # The first handle expired: its ack is refused, nothing is acked by it.
        with pytest.raises(BrokerError) as exc:
            await c1.ack(first[0])
        assert exc.value.code == ResponseCode.RECEIPT_HANDLE_EXPIRED
        await c2.ack(again[0])
        await c2.ack(b1[0])
        rest = await c2.receive(16, invisible_duration=30, wait=2)
        assert names(rest) == ["a1", "b2"]
        for msg in rest:
            await c2.ack(msg)
        assert names(await c2.receive(16, invisible_duration=30, wait=2)) == ["a2"]


async def test_a_message_that_keeps_failing_goes_to_the_dlq_and_its_group_goes_on(
    broker: Broker,
) -> None:
    address = f"127.0.0.1:{broker.port}"
    await _setup(address, retry_max_times=1)
    async with SimpleConsumer(address, GROUP, "T") as consumer:
        first = await consumer.receive(16, invisible_duration=30, wait=2)
        assert names(first) == ["a0", "b0", "plain"]
        assert await consumer.ack_many(first[1:]) == [None, None]
        # A nack (a short invisible time) brings it back sooner, as attempt 2: the last one.
        await consumer.change_invisible_duration(first[0], 1)
        seen: list[tuple[str, int]] = [(m.body.decode(), m.attempt) for m in first]
        while ("a1", 1) not in seen:
            batch = await consumer.receive(16, invisible_duration=1, wait=10)
            assert batch, seen
            seen += [(m.body.decode(), m.attempt) for m in batch]
            await consumer.ack_many([m for m in batch if m.body != b"a0"])
        # a0 unacked twice went to %DLQ%Fifo; only then did its group go on with a1.
        assert [x for x in seen if x[0] == "a0"] == [("a0", 1), ("a0", 2)]
        assert seen.index(("a1", 1)) > seen.index(("a0", 2))
        assert [x for x in seen if x[0].startswith("b")] == [("b0", 1), ("b1", 1), ("b2", 1)]
        async with Admin(address) as admin:
            (dead,) = await dead_lettered(admin, GROUP, "a0 in %DLQ%Fifo", 20, interval=0.1)
        assert dead["originMsgId"] == first[0].msg_id and dead["reconsumeTimes"] == 1
        assert figure(broker, "rmq_broker_dlq_messages_total", group=GROUP, topic="T") == 1
        # a0's first expiry handed it out again in place; its second sent it to the DLQ.
        assert figure(broker, "rmq_broker_pop_redeliveries_total", group=GROUP, topic="T") == 1


async def test_another_groups_ack_and_forged_handles_are_refused(broker: Broker) -> None:
    address = f"127.0.0.1:{broker.port}"
    await _setup(address)
    async with (
        SimpleConsumer(address, GROUP, "T") as consumer,
        SimpleConsumer(address, "Other", "T") as other,
    ):
        got = await consumer.receive(1, invisible_duration=30, wait=2)
        assert names(got) == ["a0"]
        msg = got[0]
        with pytest.raises(BrokerError) as exc:
            await other.ack(msg)
        assert exc.value.code == ResponseCode.RECEIPT_HANDLE_INVALID
        assert "Fifo" in str(exc.value)
        handle = msg.receipt_handle
        for forged in (handle[:-4] + "AAAA", handle[:20], "not a handle"):
            msg.receipt_handle = forged
            with pytest.raises(BrokerError) as exc:
                await consumer.ack(msg)
            assert exc.value.code == ResponseCode.RECEIPT_HANDLE_INVALID, forged
        # Nothing was acked: a0 still blocks its group, and the real handle acks it.
        assert names(await consumer.receive(16, invisible_duration=30, wait=0.5)) == [
            "b0",
            "plain",
        ]
        msg.receipt_handle = handle
        await consumer.ack(msg)
        assert names(await consumer.receive(16, invisible_duration=30, wait=2)) == ["a1"]


async def test_the_group_consumer_in_pop_mode_keeps_each_message_group_in_order(
    broker: Broker,
) -> None:
    """Consumer(pop=True) on a FIFO group: a raising handler nacks; the message comes back in
    place (attempt 2) before anything later of its group."""
    address = f"127.0.0.1:{broker.port}"
    await _setup(address, retry_max_times=3)
    handled: list[tuple[str, int]] = []
    done = asyncio.Event()

    def handle(msg: ReceivedMessage) -> None:
        assert isinstance(msg, PopMessage)
        name = msg.body.decode()
        handled.append((name, msg.attempt))
        if name == "a0" and msg.attempt == 1:
            raise RuntimeError("first try of a0 fails")
        if len({n for n, _ in handled}) == 7 and ("a2", 1) in handled:
            done.set()

    async with Consumer(address, GROUP, "T", pop=True, nack_delay=1.0) as consumer:
        task = asyncio.ensure_future(consumer.process(handle))
        try:
            await asyncio.wait_for(done.wait(), 30)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    a = [x for x in handled if x[0].startswith("a")]
    assert a[:4] == [("a0", 1), ("a0", 2), ("a1", 1), ("a2", 1)], handled
    b = [x for x in handled if x[0].startswith("b")]
    assert b[:3] == [("b0", 1), ("b1", 1), ("b2", 1)], handled


async def test_a_tag_filter_passes_over_other_tags_without_reading_their_records(
    broker: Broker, tmp_path: Path
) -> None:
    # 6,000 messages in one queue, three of tag Want: a0 (3,000), a1 (5,000), b0 (5,001); the
    # others are of tag X in message groups of their own. The FIFO group filtering on Want
    # gets exactly those three, a1 only once a0 was acked, and its offset reaches the end. The
    # record of X at offset 10 is damaged: passed over by its ConsumeQueue tag hash, it is
    # never read (it would count as a corrupt read).
    address = f"127.0.0.1:{broker.port}"
    async with Admin(address) as admin:
        await admin.update_sub_group({"groupName": GROUP, "consumeMessageOrderly": True})
    want = {3000: ("a0", "a"), 5000: ("a1", "a"), 5001: ("b0", "b")}
    physical: list[int] = []
    for first in range(0, 6000, 500):
        batch = []
        for offset in range(first, first + 500):
            body, group = want.get(offset, (f"x{offset}", f"x{offset % 7}"))
            tags = "Want" if offset in want else "X"
            props = {PROP_MESSAGE_GROUP: group}
            batch.append(Message(topic="T", body=body.encode(), tags=tags, properties=props))
        physical += broker.ctx.appender.put("T", 0, batch, 500).physical_offsets
    segment = broker.ctx.cfg.commitlog_segment_bytes
    bad = physical[10]
    fd = os.open(tmp_path / "broker-a" / "commitlog" / f"{bad - bad % segment:020d}", os.O_RDWR)
    try:
        os.pwrite(fd, b"\xff", bad % segment + 40)
    finally:
        os.close(fd)

    got: list[PopMessage] = []
    async with SimpleConsumer(address, GROUP, "T", filter="Want") as consumer:
        for _ in range(10):
            msgs = await consumer.receive(16, invisible_duration=30, wait=1)
            got += msgs
            for msg in msgs:
                await consumer.ack(msg)
            if len(got) >= 3:
                break
        assert [(m.queue_offset, m.body.decode(), m.tags, m.attempt) for m in got] == [
            (3000, "a0", "Want", 1),
            (5000, "a1", "Want", 1),
            (5001, "b0", "Want", 1),
        ]
        assert await consumer.receive(16, invisible_duration=30, wait=0.5) == []
    async with ProgressAdmin(address) as progress:
        (answer,) = await progress.consume_stats(GROUP, "T")
        assert answer.stats is not None
        (row,) = answer.stats.groups[GROUP]
        assert (row.consumer_offset, row.lag, row.inflight) == (6000, 0, 0), row
    assert figure(broker, "rmq_broker_corrupt_data_total", kind="read") == 0
