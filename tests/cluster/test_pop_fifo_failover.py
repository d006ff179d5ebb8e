"""FIFO message groups consumed through POP, real processes (issue 12, item 2, POP consumers).

Three controllers and a group of three brokers; N message groups x M messages are stored, then
several SimpleConsumers of a FIFO consumer group take them with random failures (a message not
acked, so its invisible time runs out, or nacked with a short invisible time) while the master
is killed with kill -9 mid-run. Checked: no message of a group is handed out before the ack of
the group's previous message was sent; the first successful ack of each message comes in send
order per group; every message is acked in the end, except one that always fails, which goes to
the DLQ after the group's attempts while its group goes on. The soak variant runs the issue's
100 groups x 100 messages.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from client import Producer
from client.admin import Admin
from client.bootstrap import Bootstrap
from client.errors import BrokerError, ClientError
from client.simple_consumer import PopMessage, SimpleConsumer
from daemon.tasks import cancel_and_wait
from protocol.codes import ResponseCode
from tests.cluster.support import new_master, node_at, start_fifo_group
from tests.support.cluster import Cluster
from tests.support.messages import dead_lettered
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess

TOPIC = "PopFifoTopic"
GROUP = "PopFifoGroup"
POISON = ("g1", 3)  # never acked: to the DLQ after retryMaxTimes + 1 deliveries
RETRY_MAX_TIMES = 3
INVISIBLE = 2.0
CONSUMERS = 4


class Log:
    """Events in the order the test's consumers saw them (one event loop: a total order)."""

    def __init__(self) -> None:
        self.clock = 0
        self.delivered: dict[tuple[str, int], list[tuple[int, int]]] = {}
        """(group, seq) -> [(clock, attempt)] of each delivery."""
        self.acked: dict[str, list[tuple[int, int]]] = {}
        """group -> (clock the ack was sent, seq) of each ack answered SUCCESS."""

    def tick(self) -> int:
        self.clock += 1
        return self.clock


async def _ack(consumer: SimpleConsumer, msg: PopMessage) -> bool:
    """Ack until the broker answers: True acked, False refused (its invisible time passed; it
    comes back). Errors while the group has no master are retried."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while True:
        try:
            await consumer.ack(msg)
            return True
        except BrokerError as exc:
            if exc.code in (
                ResponseCode.RECEIPT_HANDLE_EXPIRED,
                ResponseCode.RECEIPT_HANDLE_INVALID,
            ):
                return False
            if loop.time() > deadline:
                raise
        except ClientError:
            if loop.time() > deadline:
                raise
        await asyncio.sleep(0.2)


async def run_pop_fifo(tmp_path: Path, groups: int, per_group: int) -> None:
    cluster = Cluster(tmp_path)
    boot = Bootstrap(cluster.controller_addresses, timeout=2.0)
    addresses = cluster.controller_addresses
    tasks: list[asyncio.Future[None]] = []
    try:
        master = await start_fifo_group(
            cluster, boot, TOPIC, GROUP, {"retryMaxTimes": RETRY_MAX_TIMES}
        )
        names = [f"g{g}" for g in range(groups)]
        async with Producer(addresses, send_deadline=30) as producer:

            async def send_group(g: str) -> None:
                for i in range(per_group):
                    await producer.send(TOPIC, f"{g}:{i}".encode(), message_group=g)

            await asyncio.gather(*(send_group(g) for g in names))

        log = Log()
        rng = random.Random(7)
        failed_once: set[tuple[str, int]] = set()
        wrong: list[str] = []
        total = groups * per_group - 1  # all but the poison

        def acked_count() -> int:
            return sum(len({seq for _, seq in v}) for v in log.acked.values())

        async def member() -> None:
            async with SimpleConsumer(addresses, GROUP, TOPIC, request_timeout=3.0) as consumer:
                while True:
                    try:
                        batch = await consumer.receive(16, invisible_duration=INVISIBLE, wait=1.0)
                    except ClientError:
                        await asyncio.sleep(0.2)  # no master right now
                        continue
                    for msg in batch:
                        g, i = msg.body.decode().split(":")
                        key = (g, int(i))
                        log.delivered.setdefault(key, []).append((log.tick(), msg.attempt))
                        if msg.message_group != g:
                            wrong.append(f"{key}: message_group {msg.message_group!r}")
                        if key == POISON:
                            continue
                        if key not in failed_once and rng.random() < 0.05:
                            failed_once.add(key)
                            if rng.random() < 0.5:  # a nack: back after a short invisible time
                                try:
                                    await consumer.change_invisible_duration(msg, 1.0)
                                except ClientError:
                                    pass
                            continue  # else not acked: back after its invisible time
                        sent = log.tick()
                        if await _ack(consumer, msg):
                            log.acked.setdefault(g, []).append((sent, key[1]))

        tasks = [asyncio.ensure_future(member()) for _ in range(CONSUMERS)]

        async def third() -> bool:
            return acked_count() >= total // 3

        await wait_until_async(third, "a third acked", 60, interval=0.05, on_timeout=cluster.logs)
        killed_at = acked_count()
        node_at(cluster, master).kill9()
        await new_master(boot, cluster, master)
        assert killed_at < total, "every message was acked before the kill"

        async def all_acked() -> bool:
            return acked_count() >= total

        await wait_until_async(
            all_acked, "every message acked", 120, interval=0.1, on_timeout=cluster.logs
        )
        async with Admin(addresses) as admin:
            dead = await dead_lettered(admin, GROUP, "the poison message in the DLQ", 60)
        await cancel_and_wait(tasks)

        assert not wrong, wrong[:3]
        # The poison message, dead-lettered after its attempts (a redelivery's answer lost in
        # the failover would hide one attempt from the consumers, not from the broker).
        assert [d["reconsumeTimes"] for d in dead] == [RETRY_MAX_TIMES], dead
        poison = log.delivered[POISON]
        assert [a for _, a in poison] == sorted({a for _, a in poison}), poison
        for g in names:
            acks = sorted(log.acked.get(g, []))
            firsts = list(dict.fromkeys(seq for _, seq in acks))
            expected = [i for i in range(per_group) if (g, i) != POISON]
            assert firsts == expected, (g, firsts)
            first_ack = {}
            for sent, seq in acks:
                first_ack.setdefault(seq, sent)
            for i in range(1, per_group):
                # After the poison message, its group went on once it was dead-lettered.
                gate = poison[-1][0] if (g, i - 1) == POISON else first_ack[i - 1]
                first = log.delivered[(g, i)][0][0]
                assert first > gate, (g, i, "handed out before the previous one was acked")
        redelivered = sum(1 for d in log.delivered.values() for _, a in d if a > 1)
        print(
            f"acked {acked_count()} ({killed_at} before the kill), "
            f"{len(failed_once)} failures injected, {redelivered} redeliveries"
        )
    finally:
        await cancel_and_wait(tasks)
        boot.close()
        cluster.stop()


async def test_pop_fifo_groups_keep_order_through_failures_and_a_master_failover(
    tmp_path: Path,
) -> None:
    await run_pop_fifo(tmp_path, groups=20, per_group=25)


@pytest.mark.soak
async def test_pop_fifo_soak_100_groups_of_100(tmp_path: Path) -> None:
    await run_pop_fifo(tmp_path, groups=100, per_group=100)
