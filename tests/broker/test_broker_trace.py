"""The broker's message trace (trace_enabled) on an in-process broker over real sockets: a send,
POP handouts and acks of two groups, a nack, a retry and the DLQ are trace records in the trace
topic, found by the message id through its key index; with trace off nothing is written."""

from __future__ import annotations

from pathlib import Path

from client import Producer
from client.admin import Admin
from client.lookup import Lookup
from client.simple_consumer import SimpleConsumer
from client.trace import TraceStep, query_trace
from protocol.trace import (
    TRACE_TOPIC,
    EndRecord,
    PubRecord,
    SubAfterRecord,
    SubBeforeRecord,
    TraceType,
)
from tests.broker.support import figure, running, small_config
from tests.support.wait import wait_until_async


def _step(s: TraceStep) -> tuple[str, str, int | bool | str]:
    r = s.record
    if isinstance(r, PubRecord):
        return ("Pub", r.group, r.topic)
    if isinstance(r, SubBeforeRecord):
        return ("SubBefore", r.group, r.retry_times + 1)
    if isinstance(r, SubAfterRecord):
        return ("SubAfter", r.group, r.success)
    assert isinstance(r, EndRecord)
    return (str(r.kind), r.group, r.attempt)


async def test_a_messages_broker_trace_follows_it_through_two_groups_a_retry_and_the_dlq(
    tmp_path: Path,
) -> None:
    async with running(small_config(tmp_path, trace_enabled=True)) as broker:
        address = f"127.0.0.1:{broker.port}"
        broker.ctx.create_topic("T", 2)
        async with Admin(address) as admin:
            await admin.update_sub_group({"groupName": "B", "retryMaxTimes": 1})
        async with Producer(address) as producer:
            sent = await producer.send("T", b"hello", keys="order-7", tags="tagA")
        async with (
            SimpleConsumer(address, "A", "T") as a,
            SimpleConsumer(address, "B", "T") as b,
            Lookup(address) as lookup,
        ):
            [got_a] = await a.receive(1, invisible_duration=30, wait=5)
            await a.ack(got_a)
            [got_b] = await b.receive(1, invisible_duration=30, wait=5)
            await b.change_invisible_duration(got_b, 1)  # a nack: back in a second
            [again] = await b.receive(1, invisible_duration=1, wait=15)
            assert again.attempt == 2
            # not acked: past retryMaxTimes the revive sends it to %DLQ%B

            want = [
                ("Pub", "", "T"),
                ("SubBefore", "A", 1),
                ("SubAfter", "A", True),
                ("SubBefore", "B", 1),
                ("SubAfter", "B", False),
                ("Retry", "B", 1),
                ("SubBefore", "B", 2),
                ("DLQ", "B", 2),
            ]

            last: list[object] = []

            async def traced() -> list[tuple[str, str, int | bool | str]] | None:
                steps = [_step(s) for s in await query_trace(lookup, sent.msg_id)]
                last[:] = steps
                return steps if steps == want else None

            await wait_until_async(
                traced, f"the trace {want}", 30, interval=0.2, on_timeout=lambda: f"{last}"
            )
            steps = await query_trace(lookup, sent.msg_id)
        pub = steps[0].record
        assert isinstance(pub, PubRecord)
        assert (pub.keys, pub.tags, pub.body_length, pub.queue_id) == ("order-7", "tagA", 5, 0)
        assert pub.offset_msg_id == sent.msg_id and pub.store_host == address
        assert pub.queue_offset == sent.queue_offset and pub.source == "broker"
        after_a = steps[2].record
        assert isinstance(after_a, SubAfterRecord)
        before_a = steps[1].record
        assert isinstance(before_a, SubBeforeRecord)
        assert after_a.request_id == before_a.request_id
        dlq = steps[-1].record
        assert isinstance(dlq, EndRecord) and dlq.kind is TraceType.DLQ
        assert dlq.detail == "%DLQ%B"
        assert figure(broker, "rmq_broker_trace_records_total") >= len(want)
        assert figure(broker, "rmq_broker_trace_dropped_total") == 0


async def test_with_trace_off_the_broker_writes_no_trace(tmp_path: Path) -> None:
    async with running(small_config(tmp_path)) as broker:
        address = f"127.0.0.1:{broker.port}"
        broker.ctx.create_topic("T", 1)
        async with Producer(address) as producer:
            await producer.send("T", b"x")
        assert broker.ctx.tracer is None
        assert broker.ctx.topics.get(TRACE_TOPIC) is None
        assert not broker.ctx.appender.put_listeners
