"""FIFO message groups end to end, real processes (issue 12, item 2, queue-bound consumers).

Three controllers and a group of three brokers; a producer sends 20 message groups x 50
messages (each group's sends five at a time, concurrently) while a FIFO consumer group handles
them with random handler failures, and the master is killed with kill -9 mid-run. Every group's
messages are consumed in send order: a failed message is handled again before anything later of
its group; the first successful consumption of each message comes in strictly increasing order;
every message is consumed. A message that always fails goes to the DLQ after the group's retries
and its group goes on. The soak variant runs the issue's 100 groups x 100 messages.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from client import Consumer, Producer
from client.admin import Admin
from client.bootstrap import Bootstrap
from client.message import ReceivedMessage
from client.routes import MessageQueue
from protocol.fifo import PROP_MESSAGE_GROUP, group_queue
from tests.cluster.support import new_master, node_at, start_fifo_group
from tests.support.cluster import Cluster
from tests.support.messages import FAST_CONSUMER, dead_lettered
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess

TOPIC = "FifoTopic"
GROUP = "FifoGroup"
POISON = ("g0", 10)  # always fails: to the DLQ after the retries


async def run_fifo(tmp_path: Path, groups: int, per_group: int) -> None:
    cluster = Cluster(tmp_path)
    boot = Bootstrap(cluster.controller_addresses, timeout=2.0)
    addresses = cluster.controller_addresses
    try:
        master = await start_fifo_group(
            cluster, boot, TOPIC, GROUP, {"retryMaxTimes": 2, "retryDelays": "100ms 200ms"}
        )

        rng = random.Random(12)
        invocations: dict[str, list[tuple[int, bool]]] = {f"g{g}": [] for g in range(groups)}
        tried: set[tuple[str, int]] = set()
        queues_of: dict[str, set[int]] = {g: set() for g in invocations}
        wrong: list[dict[str, str]] = []

        def handle(msg: ReceivedMessage) -> None:
            g, i = msg.body.decode().split(":")
            seq = int(i)
            if msg.properties.get(PROP_MESSAGE_GROUP) != g:  # (a raise here would be a retry)
                wrong.append(msg.properties)
            queues_of[g].add(msg.queue_id)
            fail = (g, seq) == POISON or ((g, seq) not in tried and rng.random() < 0.05)
            tried.add((g, seq))
            invocations[g].append((seq, not fail))
            if fail:
                raise RuntimeError(f"handler failed {g}:{seq}")

        def consumed() -> int:
            return len({(g, s) for g, inv in invocations.items() for s, ok in inv if ok})

        sent = 0
        async with (
            Producer(addresses, send_deadline=30) as producer,
            Consumer(addresses, GROUP, TOPIC, **FAST_CONSUMER) as consumer,
        ):
            processing = asyncio.ensure_future(consumer.process(handle))

            async def send_group(g: str) -> None:
                nonlocal sent
                for start in range(0, per_group, 5):
                    chunk = range(start, min(start + 5, per_group))
                    await asyncio.gather(
                        *(producer.send(TOPIC, f"{g}:{i}".encode(), message_group=g) for i in chunk)
                    )
                    sent += len(chunk)
                    await asyncio.sleep(0.02)

            sending = asyncio.gather(*(send_group(g) for g in invocations))
            try:
                total = groups * per_group

                async def progressed() -> bool:
                    return consumed() >= total // 3

                await wait_until_async(progressed, "a third consumed", 60, interval=0.05)
                assert consumer.fifo is not None
                killed_at = sent
                node_at(cluster, master).kill9()
                await new_master(boot, cluster, master)
                await asyncio.wait_for(sending, 60)
                assert killed_at < total, "every message was sent before the kill"

                async def all_consumed() -> bool:
                    return consumed() >= total - 1

                await wait_until_async(
                    all_consumed,
                    "every message consumed",
                    90,
                    interval=0.1,
                    on_timeout=cluster.logs,
                )
                async with Admin(addresses) as admin:
                    dead = await dead_lettered(admin, GROUP, "the poison message in the DLQ", 30)
            finally:
                processing.cancel()
                sending.cancel()
        assert {d["reason"] for d in dead} == {
            f"RuntimeError: handler failed {POISON[0]}:{POISON[1]}"
        }
        assert not wrong, wrong[:3]
        # Every message of a group in the group's queue, also those retried through the failover.
        queues = [MessageQueue("broker-a", q) for q in range(4)]
        assert queues_of == {g: {group_queue(g, queues).queue_id} for g in invocations}
        for g, inv in invocations.items():
            firsts: list[int] = []
            done: set[int] = set()
            for k, (seq, ok) in enumerate(inv):
                if not ok and (g, seq) != POISON:
                    # A failed message is handled again before anything later of its group.
                    assert inv[k + 1][0] == seq, (g, inv[k : k + 3])
                if ok and seq not in done:
                    done.add(seq)
                    firsts.append(seq)
            expected = [s for s in range(per_group) if (g, s) != POISON]
            assert firsts == expected, (g, firsts)
        poison = [ok for seq, ok in invocations[POISON[0]] if seq == POISON[1]]
        # First try and 2 retries, then the DLQ (per copy: a producer retry may store two).
        assert poison and not any(poison) and len(poison) % 3 == 0, poison
    finally:
        boot.close()
        cluster.stop()


async def test_fifo_groups_keep_order_through_failures_and_a_master_failover(
    tmp_path: Path,
) -> None:
    await run_fifo(tmp_path, groups=20, per_group=50)


@pytest.mark.soak
async def test_fifo_soak_100_groups_of_100(tmp_path: Path) -> None:
    await run_fifo(tmp_path, groups=100, per_group=100)
