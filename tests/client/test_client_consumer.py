"""Consumer group against in-memory fake broker groups: delivery, offsets, rebalance."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from client.consumer import Consumer
from client.errors import TopicNotFoundError
from client.message import Message, ReceivedMessage
from client.producer import Producer
from client.routes import MessageQueue
from tests.client import receiving
from tests.client.fakebroker import FakeCluster
from tests.support.wait import stays_async, wait_until_async

FAST: dict[str, Any] = {
    "heartbeat_interval": 0.1,
    "commit_interval": 0.1,
    "suspend_ms": 200,
    "route_refresh_interval": 0.5,
}


def bootstrap(cluster: FakeCluster) -> str:
    return cluster.brokers["broker-a"].address


async def produce(
    cluster: FakeCluster, n: int, prefix: str = "m"
) -> dict[bytes, tuple[str, int, int]]:
    """Send n messages, one request each (round-robin: every queue gets some; auto-batching
    would land a burst in a few queues); body -> (broker, queue, offset)."""
    async with Producer(bootstrap(cluster), auto_batch=False) as p:
        results = await asyncio.gather(*(p.send("T", f"{prefix}{i}".encode()) for i in range(n)))
    return {
        f"{prefix}{i}".encode(): (r.broker_name, r.queue_id, r.queue_offset)
        for i, r in enumerate(results)
    }


async def receive_until(
    consumer: Consumer, done: Callable[[list[ReceivedMessage]], bool], timeout: float = 10
) -> list[ReceivedMessage]:
    return await receiving.receive_until(consumer, done, timeout, poll=0.05)


def where(m: ReceivedMessage) -> tuple[str, int, int]:
    return (m.broker_name, m.queue_id, m.queue_offset)


async def committed(cluster: FakeCluster, group: str) -> dict[tuple[str, int], int]:
    return {
        (name, q): off
        for name, b in cluster.brokers.items()
        for (g, _t, q), off in b.offsets.items()
        if g == group
    }


async def test_every_message_arrives_once_with_its_body_and_offset(cluster: FakeCluster) -> None:
    sent = await produce(cluster, 200)
    async with Consumer(bootstrap(cluster), "g1", "T", **FAST) as c:
        got = await receive_until(c, lambda g: len(g) >= 200)
    assert {m.body: where(m) for m in got} == sent
    assert len(got) == 200
    m = got[0]
    assert (m.topic, m.keys, m.tags) == ("T", "", "")
    assert m.store_timestamp > 0 and m.born_timestamp > 0 and len(m.msg_id) == 32


async def test_async_iteration_delivers_messages_produced_after_start(cluster: FakeCluster) -> None:
    async with Consumer(bootstrap(cluster), "g1", "T", **FAST) as c:
        sent = await produce(cluster, 20)
        got: list[ReceivedMessage] = []
        async for msg in c:
            got.append(msg)
            if len(got) == 20:
                break
    assert {m.body: where(m) for m in got} == sent


async def test_offsets_are_committed_on_close_and_a_restart_resumes_after_them(
    cluster: FakeCluster,
) -> None:
    await produce(cluster, 40, "a")
    async with Consumer(bootstrap(cluster), "g1", "T", **FAST) as c:
        await receive_until(c, lambda g: len(g) >= 40)
    assert sum((await committed(cluster, "g1")).values()) == 40
    sent = await produce(cluster, 10, "b")
    async with Consumer(bootstrap(cluster), "g1", "T", **FAST) as c:
        got = await receive_until(c, lambda g: len(g) >= 10)
        extra = await c.receive(0.3)
    assert {m.body: where(m) for m in got} == sent
    assert extra == []


async def test_iteration_stopped_midway_commits_exactly_what_was_handed_out(
    cluster: FakeCluster,
) -> None:
    await produce(cluster, 30)
    seen: list[ReceivedMessage] = []
    async with Consumer(bootstrap(cluster), "g1", "T", **FAST) as c:
        async for msg in c:
            seen.append(msg)
            if len(seen) == 7:
                break
    async with Consumer(bootstrap(cluster), "g1", "T", **FAST) as c:
        rest = await receive_until(c, lambda g: len(g) >= 23)
        assert await c.receive(0.3) == []
    assert {where(m) for m in seen}.isdisjoint({where(m) for m in rest})
    assert len({where(m) for m in seen + rest}) == 30


async def test_a_failing_application_gets_its_last_batch_again(cluster: FakeCluster) -> None:
    await produce(cluster, 8)
    with pytest.raises(RuntimeError):
        async with Consumer(bootstrap(cluster), "g1", "T", **FAST) as c:
            first = await receive_until(c, lambda g: len(g) >= 1)
            raise RuntimeError("processing failed")
    async with Consumer(bootstrap(cluster), "g1", "T", **FAST) as c:
        again = await receive_until(c, lambda g: len(g) >= 8)
    assert {where(m) for m in first} <= {where(m) for m in again}


async def test_a_new_group_from_latest_skips_older_messages(cluster: FakeCluster) -> None:
    await produce(cluster, 20, "old")
    async with Consumer(bootstrap(cluster), "fresh", "T", start_from="latest", **FAST) as c:
        sent = await produce(cluster, 5, "new")
        got = await receive_until(c, lambda g: len(g) >= 5)
        assert await c.receive(0.3) == []
    assert {m.body for m in got} == set(sent)


def two_members(cluster: FakeCluster) -> tuple[Consumer, Consumer]:
    """Members c1 and c2 of group g on topic T, not started."""
    boot = bootstrap(cluster)
    return (
        Consumer(boot, "g", "T", client_id="c1", **FAST),
        Consumer(boot, "g", "T", client_id="c2", **FAST),
    )


async def test_two_members_split_the_queues_and_a_leaver_hands_its_queues_over(
    cluster: FakeCluster,
) -> None:
    c1, c2 = two_members(cluster)
    all_queues = {MessageQueue(b, q) for b in ("broker-a", "broker-b") for q in range(4)}
    try:
        await c1.start()
        assert set(c1.owned) == all_queues
        await c2.start()
        await wait_until_async(
            lambda: len(c1.owned) == 4 and len(c2.owned) == 4, "four queues each", 10
        )
        assert set(c1.owned) | set(c2.owned) == all_queues
        sent = await produce(cluster, 100, "x")
        got1 = await receive_until(c1, lambda g: len(g) >= 1)
        got2 = await receive_until(c2, lambda g: len(g) >= 1)
        # Drain a bit, then c2 leaves with some of its messages never handed out.
        await c2.close()
        await wait_until_async(lambda: set(c1.owned) == all_queues, "c1 to own every queue", 10)
        bodies = {m.body for m in got1 + got2}
        more = await receive_until(c1, lambda g: bodies | {m.body for m in g} >= set(sent))
    finally:
        await c1.close()
        await c2.close()
    assert bodies | {m.body for m in more} == set(sent)


async def test_a_member_that_stops_heartbeating_loses_its_queues_to_the_others(
    cluster: FakeCluster,
) -> None:
    c1, c2 = two_members(cluster)
    try:
        await c1.start()
        await c2.start()
        await wait_until_async(lambda: len(c1.owned) == 4, "c1 to own four queues", 10)
        # Connection loss removes a member on the broker; emulate a crash of c2.
        c2._pool.close()
        for task in c2._tasks:
            task.cancel()
        await wait_until_async(lambda: len(c1.owned) == 8, "c1 to own eight queues", 10)
    finally:
        await c1.close()
        await c2.close()


async def test_small_buffer_bounds_what_is_pulled_ahead(cluster: FakeCluster) -> None:
    await produce(cluster, 400)
    async with Consumer(
        bootstrap(cluster), "g1", "T", buffer_size=16, pull_batch_size=8, **FAST
    ) as c:
        await wait_until_async(lambda: len(c._buffer) >= 16, "a full buffer", 10)
        # Full: every puller waits; at most one batch per queue past the capacity.
        await stays_async(
            lambda: len(c._buffer) <= 16 + 8 * 8,
            0.3,
            "at most 16 + 8 * 8 messages buffered",
            on_failure=lambda: f"{len(c._buffer)} buffered",
        )
        got = await receive_until(c, lambda g: len(g) >= 400)
    assert len({where(m) for m in got}) == 400


async def test_start_fails_fast_for_an_unknown_topic(cluster: FakeCluster) -> None:
    c = Consumer(bootstrap(cluster), "g1", "nope", **FAST)
    with pytest.raises(TopicNotFoundError):
        await c.start()
    await c.close()


async def test_receive_after_partial_iteration_returns_the_rest_in_pieces(
    cluster: FakeCluster,
) -> None:
    async with Producer(bootstrap(cluster)) as p:
        sent = await p.send_batch("T", [Message(body=b"%d" % i) for i in range(20)])
    async with Consumer(bootstrap(cluster), "g", "T", **FAST) as c:
        got = [await c.__anext__()]  # one pull returned the whole batch; one message handed out
        while len(got) < 20:
            part = await c.receive(1.0, max_messages=3)
            assert len(part) <= 3
            got.extend(part)
    assert [where(m) for m in got] == [(r.broker_name, r.queue_id, r.queue_offset) for r in sent]
