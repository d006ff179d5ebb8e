"""``Consumer(..., pop=True)`` against a real lone broker: ten members share a topic of two
queues (all served, every message acked exactly once, a failed one back with attempt 2); a
member closed mid-run leaves what it had not handed out to the others; past the group's
``retryMaxTimes`` a failing message goes to the DLQ; a queue-bound group and a POP group on one
topic each see everything. The tests share one broker (module scope), each on a topic and groups
of its own."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import pytest

from client.admin import Admin
from client.consumer import Consumer
from client.message import ReceivedMessage
from client.progress import ProgressAdmin
from client.simple_consumer import PopMessage
from daemon.tasks import cancel_and_wait
from tests.support.messages import dead_lettered, fill
from tests.support.procs import BrokerProc, module_broker
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess


broker = module_broker("pop-consumer")


def _pop_member(address: str, group: str, topic: str, **kw: Any) -> Consumer:
    kw.setdefault("suspend_ms", 1000)
    return Consumer(address, group, topic, pop=True, **kw)


async def _stop(tasks: list[asyncio.Task[None]]) -> None:
    await cancel_and_wait(tasks)


async def test_ten_pop_members_share_two_queues_and_ack_each_message_once(
    broker: BrokerProc,
) -> None:
    n = 300
    sent = await fill(broker.address, "Share", n)
    failing = set(sent[::50])  # their first attempt raises: nacked, back with attempt 2
    handled: Counter[str] = Counter()
    attempts: dict[str, list[int]] = {}
    by_member: Counter[int] = Counter()
    everyone = asyncio.Event()  # each member holds its first message until all ten have one

    def handler_of(i: int) -> Any:
        async def handle(msg: ReceivedMessage) -> None:
            assert isinstance(msg, PopMessage) and msg.topic == "Share"
            attempts.setdefault(msg.origin_msg_id, []).append(msg.attempt)
            first = not by_member[i]
            by_member[i] += 1
            if first:
                if len(by_member) == 10:
                    everyone.set()
                await asyncio.wait_for(everyone.wait(), 20)
            if msg.origin_msg_id in failing and msg.attempt == 1:
                raise RuntimeError("first attempt fails")
            handled[msg.origin_msg_id] += 1

        return handle

    members = [
        _pop_member(
            broker.address, "GShare", "Share", max_in_flight=4, pull_batch_size=4, nack_delay=1
        )
        for _ in range(10)
    ]
    tasks: list[asyncio.Task[None]] = []
    try:
        for member in members:
            await member.start()
        tasks = [asyncio.ensure_future(m.process(handler_of(i))) for i, m in enumerate(members)]
        await wait_until_async(lambda: len(handled) == n, "every message handled", 40)
        await wait_until_async(
            lambda: sum(m.pop.acked for m in members if m.pop) >= n, "every message acked", 10
        )
    finally:
        await _stop(tasks)
        await asyncio.gather(*(m.close() for m in members))
    assert set(handled) == set(sent) and set(handled.values()) == {1}
    assert sorted(by_member) == list(range(10))  # ten members on two queues, all served
    assert {mid: a for mid, a in attempts.items() if a != [1]} == {mid: [1, 2] for mid in failing}
    # The broker holds nothing in flight and nothing left to hand out: all acked.
    async with ProgressAdmin(broker.address) as progress:
        (answer,) = await progress.consume_stats("GShare")
        assert answer.stats is not None
        rows = answer.stats.groups["GShare"]
        assert {q.topic for q in rows} == {"Share", "%RETRY%GShare"} and all(
            q.inflight == 0 and q.lag == 0 for q in rows
        ), rows


async def test_a_member_closed_mid_run_leaves_its_unhanded_messages_to_the_others(
    broker: BrokerProc,
) -> None:
    n = 60
    sent = await fill(broker.address, "Leaver", n)
    quitter = _pop_member(
        broker.address,
        "GLeaver",
        "Leaver",
        invisible_duration=2,
        max_in_flight=30,
        pull_batch_size=10,
    )
    popped_at = time.monotonic()  # no POP of the quitter was earlier
    await quitter.start()
    try:
        handed = await quitter.receive(10.0, max_messages=5)
        assert handed and all(isinstance(m, PopMessage) for m in handed)
        await wait_until_async(lambda: quitter.pop and quitter.pop.buffered > 0, "a buffer", 10)
        assert quitter.pop is not None
        held = {m.msg_id for m in quitter.pop._ready}
    finally:
        await quitter.close()  # acks the messages handed out, not the buffered ones
    consumed: Counter[str] = Counter(m.msg_id for m in handed)
    again: dict[str, int] = {}

    async def handle(msg: ReceivedMessage) -> None:
        assert isinstance(msg, PopMessage)
        consumed[msg.origin_msg_id] += 1
        if msg.attempt > 1:
            again[msg.origin_msg_id] = msg.attempt

    others = [_pop_member(broker.address, "GLeaver", "Leaver") for _ in range(3)]
    tasks: list[asyncio.Task[None]] = []
    try:
        for member in others:
            await member.start()
        tasks = [asyncio.ensure_future(m.process(handle)) for m in others]
        await wait_until_async(lambda: set(consumed) == set(sent), "every message consumed", 30)
    finally:
        await _stop(tasks)
        await asyncio.gather(*(m.close() for m in others))
    assert set(consumed.values()) == {1}
    # What the quitter had popped but not handed out came back (with what a POP under way at
    # its close had popped); what it handed out and acked did not.
    assert held <= set(again) and set(again.values()) == {2}
    assert not set(again) & {m.msg_id for m in handed}
    assert time.monotonic() - popped_at >= 1.5  # not before the 2 s invisible time


async def test_past_retry_max_times_a_failing_message_goes_to_the_dlq(broker: BrokerProc) -> None:
    (poison,) = await fill(broker.address, "Poison", 1, queues=1)
    async with Admin(broker.address) as admin:
        await admin.update_sub_group({"groupName": "D", "retryMaxTimes": 1})
    seen: list[int] = []

    async def fail(msg: ReceivedMessage) -> None:
        assert isinstance(msg, PopMessage)
        seen.append(msg.attempt)
        raise ValueError("poison")

    async with _pop_member(broker.address, "D", "Poison", nack_delay=1) as member:
        task = asyncio.ensure_future(member.process(fail))
        try:
            async with Admin(broker.address) as admin:
                (dead,) = await dead_lettered(admin, "D", "the message in %DLQ%D", 30)
        finally:
            await _stop([task])
    assert dead["originMsgId"] == poison and seen == [1, 2]


async def test_a_queue_bound_group_and_a_pop_group_each_see_everything(
    broker: BrokerProc,
) -> None:
    sent = set(await fill(broker.address, "Both", 100))

    async def drain(consumer: Consumer) -> set[str]:
        got: set[str] = set()
        deadline = time.monotonic() + 30
        while got != sent and time.monotonic() < deadline:
            got |= {m.msg_id for m in await consumer.receive(1.0)}
        return got

    async with (
        Consumer(broker.address, "QB", "Both", suspend_ms=1000) as queue_bound,
        _pop_member(broker.address, "PB", "Both") as popping,
    ):
        by_queue, by_pop = await asyncio.gather(drain(queue_bound), drain(popping))
    assert by_queue == sent and by_pop == sent
    # Settings of queue-bound consumption that mean nothing with POP are refused up front.
    with pytest.raises(ValueError, match="retryMaxTimes"):
        Consumer(broker.address, "PB", "Both", pop=True, max_reconsume_times=3)
    with pytest.raises(ValueError, match="first message"):
        Consumer(broker.address, "PB", "Both", pop=True, start_from="latest")
