"""INVOKE_BROKER_TO_RESET_OFFSET against a real lone broker (docs/operations.md, "Resetting
offsets"): the refusals change nothing and say why; a time before the first message resets to
the min and says so; without isForce a queue only moves back; a pull at the old offset (what a
classic client that ignores the notice sends) answers PULL_OFFSET_MOVED to the reset offset;
a POP group's next POP reads from the reset offset while its deliveries in flight can still be
acked. The tests share one broker, each on a topic of its own (``topic``, tests/broker/conftest.py); the one that restarts
the broker starts its own."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from client.admin import Admin
from client.consumer import Consumer
from client.errors import ClientError
from client.producer import Producer
from client.simple_consumer import SimpleConsumer
from protocol.broker_requests.offsets import OffsetsReset, ResetOffset
from protocol.broker_requests.runtime import RuntimeInfo, RuntimeInfoQuery
from protocol.codes import ResponseCode
from protocol.pull import (
    ConsumerOffsetQuery,
    ConsumerOffsetUpdate,
    PullOffsetMoved,
    PullRequest,
    decode_offset,
    decode_pull_answer,
)
from protocol.rocketmq_remoting.codes import RequestCode as ClassicCode
from protocol.rocketmq_remoting.codes import ResponseCode as ClassicResponse
from remoting.client import RemotingClient
from tests.support.classic import Raw, pull_header
from tests.support.messages import fill
from tests.support.procs import BrokerProc, module_broker
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess


# One broker for the tests that do not restart it, each on a topic of its own.
broker = module_broker("offset-reset")


async def _reset(conn: RemotingClient, ask: ResetOffset) -> OffsetsReset:
    frame = await conn.call(ask.code, *ask.encode(), 5)
    return OffsetsReset.parse(frame.header, frame.body)


async def _committed(conn: RemotingClient, topic: str, group: str, queue: int) -> int | None:
    query = ConsumerOffsetQuery(group=group, topic=topic, queue_id=queue)
    frame = await conn.request(query.code, query.header(), None, 5)
    if frame.code == ResponseCode.QUERY_NOT_FOUND:
        return None
    return decode_offset(frame)


async def _commit(conn: RemotingClient, topic: str, group: str, queue: int, offset: int) -> None:
    update = ConsumerOffsetUpdate(group=group, topic=topic, queue_id=queue, offset=offset)
    await conn.call(update.code, update.header(), None, 5)


async def test_refusals_change_nothing_and_say_why(broker: BrokerProc, topic: str) -> None:
    await fill(broker.address, topic, 10)
    conn = await RemotingClient.connect(broker.address, timeout=2.0)
    try:
        await _commit(conn, topic, "g", 0, 3)
        future = int(time.time() * 1000) + 60_000
        cases = [
            (
                ResetOffset(topic=topic, group="g", timestamp=future),
                ResponseCode.BAD_REQUEST,
                "is in the future",
            ),
            (
                ResetOffset(topic="Nope", group="g"),
                ResponseCode.TOPIC_NOT_EXIST,
                "topic Nope does not exist",
            ),
            (
                ResetOffset(topic=topic, group="g", queue_id=2, offset=0),
                ResponseCode.QUEUE_NOT_EXIST,
                "queueId 2 out of range 0..1",
            ),
            (
                ResetOffset(topic=topic, group="nobody", timestamp=0),
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"has no offset of {topic}",
            ),
        ]
        for ask, code, remark in cases:
            frame = await conn.request(ask.code, *ask.encode(), 5)
            assert frame.code == code, (ask, frame)
            assert remark in str(frame.header.get("remark")), frame.header
        assert await _committed(conn, topic, "g", 0) == 3
        assert await _committed(conn, topic, "g", 1) is None
        assert await _committed(conn, topic, "nobody", 0) is None
    finally:
        conn.close()


async def test_a_time_before_the_first_message_resets_to_the_min_and_says_so(
    broker: BrokerProc,
    topic: str,
) -> None:
    await fill(broker.address, topic, 10)
    conn = await RemotingClient.connect(broker.address, timeout=2.0)
    try:
        await _commit(conn, topic, "g", 0, 4)
        await _commit(conn, topic, "g", 1, 5)
        answer = await _reset(conn, ResetOffset(topic=topic, group="g", timestamp=0))
        assert {q: (r.offset, r.previous, r.outcome) for q, r in answer.queues.items()} == {
            0: (0, 4, "min"),
            1: (0, 5, "min"),
        }
        assert await _committed(conn, topic, "g", 0) == 0
    finally:
        conn.close()


async def test_without_force_a_queue_only_moves_back(broker: BrokerProc, topic: str) -> None:
    await fill(broker.address, topic, 5, queues=1)
    middle = int(time.time() * 1000) + 1
    await wait_until_async(lambda: time.time() * 1000 > middle + 1, "the clock to pass it")
    async with Producer(broker.address) as producer:
        for i in range(5):
            await producer.send(topic, f"late{i}".encode())
    conn = await RemotingClient.connect(broker.address, timeout=2.0)
    try:
        await _commit(conn, topic, "ahead", 0, 8)
        await _commit(conn, topic, "behind", 0, 2)
        for group, expected in (("ahead", (5, 8, "reset")), ("behind", (2, 2, "kept"))):
            answer = await _reset(conn, ResetOffset(topic=topic, group=group, timestamp=middle))
            r = answer.queues[0]
            assert (r.offset, r.previous, r.outcome) == expected, group
            assert await _committed(conn, topic, group, 0) == expected[0]
        forced = ResetOffset(topic=topic, group="behind", timestamp=middle, force=True)
        assert (await _reset(conn, forced)).queues[0].offset == 5
        skip = await _reset(conn, ResetOffset(topic=topic, group="behind", force=True))
        assert (skip.queues[0].offset, skip.queues[0].outcome) == (10, "reset")
        seek = ResetOffset(topic=topic, group="behind", queue_id=0, offset=99)
        assert (await _reset(conn, seek)).queues[0].outcome == "max"
    finally:
        conn.close()


async def test_a_pull_at_the_old_offset_is_moved_to_the_reset_offset(
    broker: BrokerProc, topic: str
) -> None:
    await fill(broker.address, topic, 10)
    conn = await RemotingClient.connect(broker.address, timeout=2.0)
    try:
        await _commit(conn, topic, "g", 0, 5)
        seek = ResetOffset(topic=topic, group="g", queue_id=0, offset=2)
        await _reset(conn, seek)
        pull = PullRequest(group="g", topic=topic, queue_id=0, offset=5, max_count=32)
        answer = decode_pull_answer(await conn.request(pull.code, pull.header(), None, 5))
        assert isinstance(answer, PullOffsetMoved) and answer.next_offset == 2
        # Taken once: the next pull, from there, reads.
        again = PullRequest(group="g", topic=topic, queue_id=0, offset=2, max_count=32)
        frame = await conn.request(again.code, again.header(), None, 5)
        assert frame.code == ResponseCode.SUCCESS
    finally:
        conn.close()


async def test_a_pop_group_reads_from_the_reset_offset_and_in_flight_acks_still_count(
    broker: BrokerProc,
    topic: str,
) -> None:
    await fill(broker.address, topic, 10, queues=1)
    async with SimpleConsumer(broker.address, "pg", topic) as consumer:
        first = await consumer.receive(10, invisible_duration=30, wait=1.0)
        assert sorted(m.queue_offset for m in first) == list(range(10))
        for m in first[:5]:
            await consumer.ack(m)
        conn = await RemotingClient.connect(broker.address, timeout=2.0)
        try:
            seek = ResetOffset(topic=topic, group="pg", queue_id=0, offset=3)
            assert (await _reset(conn, seek)).queues[0].outcome == "reset"
        finally:
            conn.close()
        again = await consumer.receive(10, invisible_duration=30, wait=1.0)
        assert sorted(m.queue_offset for m in again) == list(range(3, 10))
        for m in [*first[5:], *again]:
            await consumer.ack(m)  # the deliveries from before the reset are still in flight
        assert await consumer.receive(10, invisible_duration=2, wait=0.5) == []


async def test_consumer_seek_and_seek_to_time_move_the_running_member(
    broker: BrokerProc, topic: str
) -> None:
    await fill(broker.address, topic, 10, queues=1)
    async with Consumer(broker.address, "sk", topic, commit_interval=0.2) as consumer:
        got: list[int] = []

        async def received(n: int) -> bool:
            got.extend(m.queue_offset for m in await consumer.receive(timeout=0.2))
            return len(got) >= n

        await wait_until_async(lambda: received(10), "the 10 messages", 20)
        assert got == list(range(10))
        queue = next(iter(consumer.owned))
        report = await consumer.seek(topic, queue, 7)
        assert report.queues[queue].offset == 7 and report.notified == 1
        got.clear()
        await wait_until_async(lambda: received(3), "the messages from offset 7", 20)
        assert got == [7, 8, 9]
        report = await consumer.seek_to_time(0)
        assert report.queues[queue].outcome == "min"
        got.clear()
        await wait_until_async(lambda: received(10), "the 10 messages again", 20)
        assert got == list(range(10))
        future = int(time.time() * 1000) + 60_000
        with pytest.raises(ClientError, match="is in the future"):
            await consumer.seek_to_time(future)


async def test_a_classic_pull_parked_at_the_end_is_moved_at_once(
    broker: BrokerProc, topic: str
) -> None:
    await fill(broker.address, topic, 10, queues=1)
    raw = await Raw.open(broker.port)
    conn = await RemotingClient.connect(broker.address, timeout=2.0)
    try:
        await _commit(conn, topic, "CG", 0, 10)
        parked = asyncio.ensure_future(
            raw.call(
                ClassicCode.PULL_MESSAGE,
                pull_header(topic, 0, queueOffset="10", sysFlag="2", suspendTimeoutMillis="120000"),
            )
        )
        await wait_until_async(
            lambda: broker_waiting(conn), "the classic pull to park at the queue's end", 10
        )
        await _reset(conn, ResetOffset(topic=topic, group="CG", queue_id=0, offset=4))
        # Woken by the reset: its 120 s suspend timeout lies past this wait, which only bounds a
        # hang (and a pull answered at its timeout would not say PULL_OFFSET_MOVED).
        moved = await asyncio.wait_for(parked, 60)
        assert moved.code == ClassicResponse.PULL_OFFSET_MOVED, moved.remark
        assert moved.ext_fields["nextBeginOffset"] == "4"
        again = await raw.call(ClassicCode.PULL_MESSAGE, pull_header(topic, 0, queueOffset="4"))
        assert again.code == ClassicResponse.SUCCESS, again.remark
        assert again.ext_fields["nextBeginOffset"] == "10"
    finally:
        raw.close()
        conn.close()


async def broker_waiting(conn: RemotingClient) -> bool:
    frame = await conn.call(RuntimeInfoQuery.code, *RuntimeInfoQuery().encode(), 5)
    return RuntimeInfo.parse(frame.header, frame.body).pulls_waiting > 0


async def test_a_fifo_group_consumed_by_pop_is_refused_and_keeps_its_offsets(
    broker: BrokerProc,
    topic: str,
) -> None:
    await fill(broker.address, topic, 4, queues=1)
    async with Admin(broker.address) as admin:
        await admin.update_sub_group({"groupName": "fifo", "consumeMessageOrderly": True})
    async with SimpleConsumer(broker.address, "fifo", topic) as consumer:
        assert await consumer.receive(4, invisible_duration=30, wait=1.0)
    conn = await RemotingClient.connect(broker.address, timeout=2.0)
    try:
        before = await _committed(conn, topic, "fifo", 0)
        ask = ResetOffset(topic=topic, group="fifo", queue_id=0, offset=0)
        frame = await conn.request(ask.code, *ask.encode(), 5)
        assert frame.code == ResponseCode.OFFSET_RESET_REFUSED, frame.header
        assert "in order by POP" in str(frame.header.get("remark"))
        assert await _committed(conn, topic, "fifo", 0) == before
    finally:
        conn.close()


async def test_a_pop_reset_survives_a_restart_through_the_revive_log(
    broker_factory: type[BrokerProc], tmp_path: Path, topic: str
) -> None:
    broker = broker_factory(tmp_path).start_and_wait()  # restarted: not the shared one
    await fill(broker.address, topic, 10, queues=1)
    async with SimpleConsumer(broker.address, "pr", topic) as consumer:
        for m in await consumer.receive(10, invisible_duration=30, wait=1.0):
            await consumer.ack(m)
    conn = await RemotingClient.connect(broker.address, timeout=2.0)
    try:
        await _reset(conn, ResetOffset(topic=topic, group="pr", queue_id=0, offset=3))
    finally:
        conn.close()
    # The in-flight set and the POP offsets are rebuilt from the revive log at the start.
    broker.kill9()
    broker.start_and_wait()
    async with SimpleConsumer(broker.address, "pr", topic) as consumer:
        got: list[int] = []

        async def all_since() -> bool:
            got.extend(m.queue_offset for m in await consumer.receive(10, wait=0.5))
            return len(got) >= 7

        await wait_until_async(all_since, "the messages from offset 3", 30)
        assert sorted(got) == list(range(3, 10))
