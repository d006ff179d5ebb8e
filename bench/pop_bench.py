"""POP benchmark (issue 12): POP receive + ack throughput beside the queue-bound consumer.

One broker group of 3 in controller mode (all-ack, flush async), 1 KiB messages, a topic of 8
queues. N messages are produced, then read twice by two groups:

* ``queue-bound``: one ``Consumer`` of group QB (pull, offsets committed in the background);
* ``pop``: 4 ``SimpleConsumer`` members of group PB, each ``receive(32)`` then one batch ack
  of what it received (BATCH_ACK_MESSAGE: one revive-log record, answered once on all 3
  replicas).

Printed: messages per second of each (first message to the last one consumed / acked), the POP
figure against the issue's target of 30,000 msg/s, and the ratio of the two. Nothing is asserted.

Also printed: the CPU seconds each broker and this client process used during the POP run.
Measured (20,000 messages, shared 2-core machine): queue-bound 48,711-115,261 msg/s, POP
8,365-9,617 msg/s (about 0.3 of the target) with the master at 0.6 s CPU in a 2.1 s run, on a
machine running other jobs (docs/pop.md, Figures).

    python bench/pop_bench.py [--messages N] [--size BYTES] [--consumers 4]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.broker_bench import cpu_seconds, run_async
from bench.group_of_three import group_of_three, payload
from client import Consumer, Producer
from client.admin import Admin
from client.message import Message
from client.simple_consumer import SimpleConsumer

TARGET = 30_000


async def produce(addresses: str, topic: str, n: int, body: bytes) -> None:
    async with Producer(addresses) as producer:
        sends = []
        for first in range(0, n, 64):
            batch = [Message(body=body) for _ in range(min(64, n - first))]
            sends.append(producer.send_batch(topic, batch))
            if len(sends) >= 16:
                await asyncio.gather(*sends)
                sends = []
        await asyncio.gather(*sends)


async def queue_bound(addresses: str, topic: str, n: int) -> float:
    got = 0
    async with Consumer(addresses, "QB", topic) as consumer:
        start = 0.0
        while got < n:
            msgs = await consumer.receive(5.0, max_messages=1024)
            if msgs and not start:
                start = time.perf_counter()
            got += len(msgs)
        return n / (time.perf_counter() - start)


async def pop(addresses: str, topic: str, n: int, members: int) -> tuple[float, int]:
    acked = 0
    redelivered = 0
    first: list[float] = []
    done = asyncio.Event()

    async def member() -> None:
        nonlocal acked, redelivered
        async with SimpleConsumer(addresses, "PB", topic) as consumer:
            while not done.is_set():
                msgs = await consumer.receive(32, invisible_duration=60, wait=1.0)
                if not msgs:
                    continue
                if not first:
                    first.append(time.perf_counter())
                redelivered += sum(1 for m in msgs if m.attempt > 1)
                failed = [e for e in await consumer.ack_many(msgs) if e is not None]
                if failed:
                    print(f"{len(failed)} acks refused: {failed[0]}", flush=True)
                acked += len(msgs)
                if acked >= n:
                    done.set()

    cpu = time.process_time()
    await asyncio.gather(*(member() for _ in range(members)))
    elapsed = time.perf_counter() - first[0]
    print(
        f"  (this client process used {time.process_time() - cpu:.1f} s CPU in {elapsed:.1f} s)",
        flush=True,
    )
    return n / elapsed, redelivered


async def main_async(args: argparse.Namespace) -> None:
    body = payload(args.size)
    async with group_of_three("rmq-pop-bench-") as broker_a:
        addresses = broker_a.addresses
        print(
            f"3 controllers, broker-a x3 (master {broker_a.master}), all-ack, "
            f"flush async, {args.size} B messages, {args.messages:,} messages, 8 queues",
            flush=True,
        )
        async with Admin(addresses) as admin:
            await admin.create_topic("PopBench", 8)
        await asyncio.sleep(1.5)  # the slaves register the topic for routes
        await produce(addresses, "PopBench", args.messages, body)
        qb = await queue_bound(addresses, "PopBench", args.messages)
        print(f"queue-bound consumer (1 member):   {qb:>9,.0f} msg/s", flush=True)
        pids = {
            ("master " if b.address == broker_a.master else "slave ") + b.address: b.pid
            for b in broker_a.cluster.brokers
        }
        cpu0 = {name: cpu_seconds(pid) for name, pid in pids.items()}
        wall0 = time.perf_counter()
        rate, again = await pop(addresses, "PopBench", args.messages, args.consumers)
        wall = time.perf_counter() - wall0
        for name, pid in pids.items():
            used = cpu_seconds(pid) - cpu0[name]
            print(f"  {name}: {used:.1f} s CPU in {wall:.1f} s", flush=True)
        print(
            f"POP receive + ack ({args.consumers} members): {rate:>9,.0f} msg/s "
            f"({rate / TARGET:.2f} of the {TARGET:,} target; {rate / qb:.2f} of queue-bound;"
            f" {again} redelivered)",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--consumers", type=int, default=4)
    run_async(lambda: main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
