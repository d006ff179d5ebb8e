"""The SDK's trace=True (RocketMQ's enableMsgTrace) against an in-process broker with its own
trace off: the producer's send (with its cost) and the consumer's consumption (request ids
paired, a nack failed, the rest succeeded) are trace records found by the message id."""

from __future__ import annotations

from pathlib import Path

from client import Consumer, Producer
from client.lookup import Lookup
from client.trace import query_trace
from protocol.trace import (
    SOURCE_CLIENT,
    TRACE_TOPIC,
    PubRecord,
    SubAfterRecord,
    SubBeforeRecord,
    TraceRecord,
)
from tests.broker.support import running, small_config
from tests.support.wait import wait_until_async


async def test_a_traced_producer_and_consumer_write_their_records(tmp_path: Path) -> None:
    async with running(small_config(tmp_path)) as broker:
        address = f"127.0.0.1:{broker.port}"
        broker.ctx.create_topic("T", 1)
        # The broker's trace is off: the trace topic is the operator's to create
        broker.ctx.create_topic(TRACE_TOPIC, 1)
        async with Producer(address, trace=True) as producer:
            ok = await producer.send("T", b"one", keys="k1", tags="x")
            bad = await producer.send("T", b"two", keys="k2")
        consumer = Consumer(address, "G", "T", trace=True)
        await consumer.start()
        try:
            seen: dict[str, int] = {}
            while len(seen) < 2:
                for m in await consumer.receive(5.0):
                    seen[m.msg_id] = seen.get(m.msg_id, 0) + 1
                    if m.msg_id == bad.msg_id:
                        await consumer.nack(m, "no")
        finally:
            await consumer.close()
        async with Lookup(address) as lookup:

            async def both() -> bool:
                a = await query_trace(lookup, ok.msg_id)
                b = await query_trace(lookup, bad.msg_id)
                return len(a) == 3 and len(b) == 3

            await wait_until_async(both, "three records of each message", 20, interval=0.2)
            steps = [s.record for s in await query_trace(lookup, ok.msg_id)]
            failed = [s.record for s in await query_trace(lookup, bad.msg_id)]
    pub, before, after = steps
    assert isinstance(pub, PubRecord) and pub.source == SOURCE_CLIENT
    assert (pub.topic, pub.keys, pub.tags, pub.body_length) == ("T", "k1", "x", 3)
    assert pub.queue_offset == ok.queue_offset and pub.store_host == address
    assert isinstance(before, SubBeforeRecord) and isinstance(after, SubAfterRecord)
    assert (before.group, before.retry_times, after.group, after.success) == ("G", 0, "G", True)
    assert before.request_id == after.request_id and after.cost_ms >= 0
    assert isinstance(failed[2], SubAfterRecord) and failed[2].success is False
    assert broker.ctx.tracer is None  # these came from the clients alone


async def test_a_traced_simple_consumer_writes_receives_acks_and_changes(tmp_path: Path) -> None:
    from client.simple_consumer import SimpleConsumer

    async with running(small_config(tmp_path)) as broker:
        address = f"127.0.0.1:{broker.port}"
        broker.ctx.create_topic("T", 1)
        broker.ctx.create_topic(TRACE_TOPIC, 1)
        async with Producer(address) as producer:
            sent = await producer.send("T", b"one")
        async with SimpleConsumer(address, "S", "T", trace=True) as consumer:
            [first] = await consumer.receive(1, invisible_duration=30, wait=5)
            await consumer.change_invisible_duration(first, 1)  # a nack
            [again] = await consumer.receive(1, invisible_duration=30, wait=15)
            await consumer.ack(again)
        async with Lookup(address) as lookup:

            async def four() -> list[TraceRecord] | None:
                steps = [s.record for s in await query_trace(lookup, sent.msg_id)]
                return steps if len(steps) == 4 else None

            steps = await wait_until_async(four, "four records", 20, interval=0.2)
    assert steps is not None
    got = [
        (type(r).__name__, getattr(r, "retry_times", None), getattr(r, "success", None))
        for r in steps
    ]
    assert got == [
        ("SubBeforeRecord", 0, None),
        ("SubAfterRecord", None, False),
        ("SubBeforeRecord", 1, None),
        ("SubAfterRecord", None, True),
    ]
