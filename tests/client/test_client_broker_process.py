"""The SDK against a real broker process (development mode: the broker is the bootstrap).

The tests share one broker (module scope, ``broker``), each on a topic of its own; the one that
kills the broker starts its own."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from client.admin import Admin
from client.consumer import Consumer
from client.message import Message, ReceivedMessage
from client.producer import Producer
from tests.client import receiving
from tests.support.messages import FAST_CONSUMER
from tests.support.procs import BrokerProc, module_broker
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess


broker = module_broker("client-broker")


async def create_topic(broker: BrokerProc, topic: str, queues: int = 4) -> None:
    async with Admin(broker.address) as admin:
        assert await admin.create_topic(topic, queues) == ["broker-a"]


async def produce(
    broker: BrokerProc, topic: str, n: int, prefix: str, *, auto_batch: bool = True
) -> dict[bytes, int]:
    """n single sends (all in flight at once, gathered into batches unless ``auto_batch`` is
    False: then one request each, round-robin over the queues) and a 10-message batch;
    body -> (queue, offset) key."""
    async with Producer(broker.address, auto_batch=auto_batch) as p:
        singles = await asyncio.gather(
            *(p.send(topic, f"{prefix}-{i}".encode(), keys=f"k{i}") for i in range(n))
        )
        batch = [Message(body=f"{prefix}-b{i}".encode(), tags="b") for i in range(10)]
        batched = await p.send_batch(topic, batch)
    sent = {f"{prefix}-{i}".encode(): r for i, r in enumerate(singles)}
    sent.update({m.body: r for m, r in zip(batch, batched, strict=True)})
    assert len({(r.queue_id, r.queue_offset) for r in sent.values()}) == len(sent)
    return {body: r.queue_id * 1_000_000 + r.queue_offset for body, r in sent.items()}


def key(m: ReceivedMessage) -> int:
    return m.queue_id * 1_000_000 + m.queue_offset


async def receive_until(
    consumer: Consumer, done: Callable[[list[ReceivedMessage]], bool], timeout: float = 30
) -> list[ReceivedMessage]:
    return await receiving.receive_until(consumer, done, timeout, poll=0.1)


async def test_sends_to_topics_in_turn_use_every_queue_of_each(broker: BrokerProc) -> None:
    """Round-robin is per topic: a producer sending to two topics of two queues in turn spreads
    each topic over both its queues (seen against make run: one counter shared by the topics
    sent every message of the first topic to queue 0 and of the second to queue 1)."""
    await create_topic(broker, "A", 2)
    await create_topic(broker, "B", 2)
    used: dict[str, list[int]] = {"A": [], "B": []}
    async with Producer(broker.address) as p:
        for i in range(8):
            for topic in ("A", "B"):
                used[topic].append((await p.send(topic, b"%d" % i)).queue_id)
    assert used == {"A": [0, 1] * 4, "B": [0, 1] * 4}


async def test_every_produced_message_is_consumed_with_its_body_and_offset(
    broker: BrokerProc,
) -> None:
    await create_topic(broker, "Consumed")
    sent = await produce(broker, "Consumed", 500, "m")
    async with Consumer(broker.address, "consumed", "Consumed", **FAST_CONSUMER) as c:
        got = await receive_until(c, lambda g: len({m.body for m in g}) >= len(sent))
    assert {m.body: key(m) for m in got} == sent
    by_body = {m.body: m for m in got}
    assert by_body[b"m-7"].keys == "k7"
    assert by_body[b"m-b3"].tags == "b"
    assert all(m.broker_name == "broker-a" and m.topic == "Consumed" for m in got)


async def test_offsets_resume_after_a_consumer_restart(broker: BrokerProc) -> None:
    await create_topic(broker, "Resume")
    first = await produce(broker, "Resume", 100, "a")
    async with Consumer(broker.address, "resume", "Resume", **FAST_CONSUMER) as c:
        await receive_until(c, lambda g: len(g) >= len(first))
    second = await produce(broker, "Resume", 50, "b")
    async with Consumer(broker.address, "resume", "Resume", **FAST_CONSUMER) as c:
        got = await receive_until(c, lambda g: len(g) >= len(second))
        assert await c.receive(1.0) == []
    assert {m.body: key(m) for m in got} == second


async def test_two_members_split_the_queues_and_a_leaver_loses_no_message(
    broker: BrokerProc,
) -> None:
    await create_topic(broker, "Split", queues=8)
    c1 = Consumer(broker.address, "split", "Split", client_id="c1", **FAST_CONSUMER)
    c2 = Consumer(broker.address, "split", "Split", client_id="c2", **FAST_CONSUMER)
    try:
        await c1.start()
        await wait_until_async(lambda: len(c1.owned) == 8, "c1 to own eight queues", 20)
        await c2.start()
        await wait_until_async(
            lambda: len(c1.owned) == 4 and len(c2.owned) == 4, "four queues each", 20
        )
        assert set(c1.owned).isdisjoint(c2.owned)
        # One request per send, so that every queue, hence each member, gets some.
        sent = await produce(broker, "Split", 400, "x", auto_batch=False)
        got1 = await receive_until(c1, lambda g: len(g) >= 50)
        got2 = await receive_until(c2, lambda g: len(g) >= 50)
        assert {m.queue_id for m in got1}.isdisjoint({m.queue_id for m in got2})
        await c2.close()  # leaves with messages pulled but never handed out
        await wait_until_async(lambda: len(c1.owned) == 8, "c1 to own eight queues", 20)
        seen = {m.body for m in got1 + got2}
        more = await receive_until(c1, lambda g: seen | {m.body for m in g} >= set(sent))
    finally:
        await c1.close()
        await c2.close()
    assert seen | {m.body for m in more} == set(sent)


async def test_latest_skips_what_was_stored_before_the_group_existed(broker: BrokerProc) -> None:
    await create_topic(broker, "Latest")
    await produce(broker, "Latest", 30, "old")
    async with Consumer(
        broker.address, "late", "Latest", start_from="latest", **FAST_CONSUMER
    ) as c:
        await wait_until_async(
            lambda: len(c.owned) == 4 and all(s.next_offset is not None for s in c.owned.values()),
            "every queue owned with its start offset",
            20,
        )
        sent = await produce(broker, "Latest", 20, "new")
        got = await receive_until(c, lambda g: len(g) >= len(sent))
    assert {m.body: key(m) for m in got} == sent


async def test_producer_and_consumer_ride_through_a_broker_kill_and_restart(
    broker_factory: type[BrokerProc], tmp_path: Path
) -> None:
    b = broker_factory(tmp_path, extra=["--flush", "sync"]).start_and_wait()
    await create_topic(b, "T")
    async with (
        Producer(b.address, retries=3, send_timeout=2) as p,
        Consumer(b.address, "g", "T", **FAST_CONSUMER) as c,
    ):
        before = [await p.send("T", f"before-{i}".encode()) for i in range(20)]
        await receive_until(c, lambda g: len(g) >= len(before))
        b.kill9()
        await asyncio.to_thread(broker_factory(tmp_path, port=b.port).start_and_wait)
        # The first sends may meet the dead connection; the producer retries and reconnects.
        after = [await p.send("T", f"after-{i}".encode()) for i in range(20)]
        got = await receive_until(
            c, lambda g: {f"after-{i}".encode() for i in range(20)} <= {m.body for m in g}
        )
    by_body = {m.body: key(m) for m in got if m.body.startswith(b"after-")}
    assert by_body == {
        f"after-{i}".encode(): r.queue_id * 1_000_000 + r.queue_offset for i, r in enumerate(after)
    }
