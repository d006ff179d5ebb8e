"""broker/trace/writer.py: the trace buffer is bounded, drops and counts what does not fit or
what the log refuses, never raises into its caller, and keys each trace message by the ids it
traces."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from broker.trace.writer import TraceWriter
from protocol.message import Message
from protocol.trace import PubRecord, decode_records
from tests.support.cancel_race import Stop, stops_that_hung
from tests.support.wait import wait_until_async


def _pub(i: int) -> PubRecord:
    return PubRecord(timestamp=i, group="g", topic="t", msg_id=f"ID{i}")


class _Log:
    def __init__(self) -> None:
        self.appends: list[tuple[list[Message], int]] = []
        self.refuse: Exception | None = None

    def put(self, messages: Sequence[Message], body_bytes: int) -> None:
        if self.refuse is not None:
            raise self.refuse
        self.appends.append((list(messages), body_bytes))


def test_a_full_buffer_drops_and_counts_never_blocks() -> None:
    log = _Log()
    writer = TraceWriter("RMQ_SYS_TRACE_TOPIC", 5, log.put)
    taken = [writer.offer(_pub(i)) for i in range(8)]
    assert taken == [True] * 5 + [False] * 3
    assert (len(writer), writer.dropped, writer.written) == (5, 3, 0)
    assert writer.flush() == 5
    assert (len(writer), writer.dropped, writer.written) == (0, 3, 5)
    assert writer.offer(_pub(9))  # room again once written


def test_a_batch_is_one_append_of_messages_keyed_by_the_ids_they_trace() -> None:
    log = _Log()
    writer = TraceWriter("TT", 1000, log.put, records_per_message=4)
    records = [_pub(i % 6) for i in range(10)]
    for r in records:
        writer.offer(r)
    assert writer.flush() == 10
    [(messages, body_bytes)] = log.appends
    assert [m.topic for m in messages] == ["TT"] * 3
    assert [m.keys for m in messages] == ["ID0 ID1 ID2 ID3", "ID4 ID5 ID0 ID1", "ID2 ID3"]
    assert body_bytes == sum(len(m.body) for m in messages)
    assert [r for m in messages for r in decode_records(m.body)] == records


def test_a_refused_append_drops_the_batch_counted_and_raises_nothing() -> None:
    log = _Log()
    writer = TraceWriter("TT", 100, log.put)
    for i in range(3):
        writer.offer(_pub(i))
    log.refuse = RuntimeError("not master")
    assert writer.flush() == 3
    assert (writer.dropped, writer.written, len(writer)) == (3, 0, 0)
    log.refuse = None
    writer.offer(_pub(7))
    writer.flush()
    assert writer.written == 1


async def test_the_task_writes_what_is_buffered_and_stop_flushes_the_rest() -> None:
    log = _Log()
    writer = TraceWriter("TT", 100, log.put, flush_interval_s=0.02)
    writer.start()
    try:
        writer.offer(_pub(1))
        await wait_until_async(lambda: writer.written == 1, "the record written", 5)
    finally:
        await writer.stop()
    writer.offer(_pub(2))
    await writer.stop()  # not running: still flushes
    assert writer.written == 2
    assert not asyncio.all_tasks() - {asyncio.current_task()}


async def test_a_stop_that_lands_as_a_full_batch_wakes_the_task_ends_it() -> None:
    """stop() cancels the task and waits for it. A cancel that lands in the loop turns in which
    a full batch wakes the task must still end it: 3.11's asyncio.wait_for returned the wake-up
    and lost the cancel there, the task went back to its wait and stop() did not return (a
    broker's shutdown hung on it). The cancel comes 0 to 7 turns after the wake-up, three times
    over; stop() must return within 1 s each time (the writer waits 60 s between flushes)."""

    async def wake() -> Stop:
        writer = TraceWriter("TT", 100, _Log().put, records_per_message=1, flush_interval_s=60)
        writer.start()
        await asyncio.sleep(0)  # the task runs to its wait
        writer.offer(_pub(1))  # a full batch: wakes the task
        return writer.stop

    hung = await stops_that_hung(wake, turns=8, rounds=3)
    assert not hung, f"stop() did not end the task when it came after these loop turns: {hung}"
    assert not asyncio.all_tasks() - {asyncio.current_task()}


def test_a_record_that_cannot_be_encoded_is_dropped_when_offered() -> None:
    log = _Log()
    writer = TraceWriter("TT", 100, log.put)
    bad = PubRecord(timestamp=1, group="g", topic="t", msg_id="ID1", keys="a\x01b")
    assert not writer.offer(bad)
    assert writer.offer(_pub(2))
    assert writer.flush() == 1  # the writer goes on: the good record is written
    assert (writer.dropped, writer.written) == (1, 1)
    [(messages, _)] = log.appends
    assert decode_records(messages[0].body) == [_pub(2)]
