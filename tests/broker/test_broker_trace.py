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


async def test_scheduled_recalled_and_transactional_messages_are_traced(tmp_path: Path) -> None:
    from client.transaction import TransactionProducer, TransactionStatus
    from protocol.trace import EndTransactionRecord, MessageType

    async with running(small_config(tmp_path, trace_enabled=True)) as broker:
        address = f"127.0.0.1:{broker.port}"
        broker.ctx.create_topic("T", 1)
        async with Producer(address) as producer:
            later = await producer.send("T", b"soon", keys="s", delay=1)
            recalled = await producer.send("T", b"never", delay=60)
            await producer.recall("T", recalled.msg_id)
        async with TransactionProducer(
            address, "txg", lambda _m: TransactionStatus.UNKNOWN, topics=["T"]
        ) as tp:
            committed = await tp.send_transaction("T", b"c", keys="c")
            await committed.commit()
            rolled = await tp.send_transaction("T", b"r")
            await rolled.rollback()
        async with Lookup(address) as lookup:

            async def kinds(msg_id: str, n: int) -> list[TraceStep] | None:
                steps = await query_trace(lookup, msg_id)
                return steps if len(steps) >= n else None

            scheduled = await wait_until_async(
                lambda: kinds(later.msg_id, 2), "the scheduled message delivered", 30, interval=0.2
            )
            gone = await wait_until_async(
                lambda: kinds(recalled.msg_id, 2), "the recall", 20, interval=0.2
            )
            done = await wait_until_async(
                lambda: kinds(committed.half.msg_id, 2), "the commit", 20, interval=0.2
            )
            undone = await wait_until_async(
                lambda: kinds(rolled.half.msg_id, 2), "the rollback", 20, interval=0.2
            )
    pub, delivered = (s.record for s in scheduled)  # type: ignore[union-attr]
    assert isinstance(pub, PubRecord) and pub.msg_type is MessageType.DELAY and pub.topic == "T"
    assert isinstance(delivered, EndRecord) and delivered.kind is TraceType.DELAY
    assert delivered.detail.startswith("0:") and delivered.keys == "s"  # queue 0, its offset
    pub, recall = (s.record for s in gone)  # type: ignore[union-attr]
    assert isinstance(recall, EndRecord) and recall.kind is TraceType.RECALL
    for steps, state in ((done, "COMMIT_MESSAGE"), (undone, "ROLLBACK_MESSAGE")):
        half, end = (s.record for s in steps)  # type: ignore[union-attr]
        assert isinstance(half, PubRecord) and half.msg_type is MessageType.TRANS_HALF
        assert (half.group, half.topic) == ("txg", "T")
        assert isinstance(end, EndTransactionRecord) and end.state == state
        assert (end.group, end.topic, end.from_check) == ("txg", "T", False)
