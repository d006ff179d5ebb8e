"""FIFO message groups benchmark (issue 12): throughput with 1,000 groups beside plain sends.

One broker group of 3 in controller mode (all-ack, flush async), 1 KiB messages, a topic of 8
queues. Produce: 64 senders send N messages, once plain (round-robin, auto-batched) and once
with message groups (1,000 groups, each sender's messages spread over them: every group's
messages go through its queue's ordered lane, one request in flight per queue). Consume: one
member of a plain group and one of a FIFO group (``consumeMessageOrderly``) each read the N
messages of their topic with ``process()``. Printed: messages per second of each and the FIFO /
plain ratios. Nothing is asserted.

    python bench/fifo_bench.py [--messages N] [--groups G] [--size BYTES]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import smoke
from bench.broker_bench import run_async
from bench.group_of_three import FAST_CONSUMER, group_of_three, payload
from client import Consumer, Producer
from client.admin import Admin
from client.message import ReceivedMessage

SENDERS = 64


async def produce(addresses: str, topic: str, n: int, body: bytes, groups: int) -> float:
    """Messages per second of ``n`` sends by :data:`SENDERS` senders (groups 0: none)."""
    async with Producer(addresses, send_deadline=60) as producer:
        await producer.send(topic, b"warm-up", message_group="warm-up" if groups else None)
        start = time.perf_counter()

        async def sender(w: int) -> None:
            for i in range(w, n, SENDERS):
                group = f"order-{i % groups}" if groups else None
                await producer.send(topic, body, message_group=group)

        await asyncio.gather(*(sender(w) for w in range(SENDERS)))
        return n / (time.perf_counter() - start)


async def consume(addresses: str, topic: str, group: str, n: int) -> float:
    """Messages per second one member of ``group`` handles ``n`` + 1 messages with."""
    seen = 0
    first: float | None = None
    done = asyncio.Event()

    def handler(msg: ReceivedMessage) -> None:
        nonlocal seen, first
        if first is None:
            first = time.perf_counter()
        seen += 1
        if seen >= n + 1:
            done.set()

    async with Consumer(addresses, group, topic, **FAST_CONSUMER) as consumer:
        task = asyncio.ensure_future(consumer.process(handler))
        try:
            await asyncio.wait_for(done.wait(), 300)
        finally:
            task.cancel()
    assert first is not None
    return n / (time.perf_counter() - first)


async def main_async(args: argparse.Namespace) -> None:
    body = payload(args.size)
    async with group_of_three("rmq-fifo-bench-") as broker_a:
        addresses = broker_a.addresses
        print(
            f"3 controllers, broker-a x3 (master {broker_a.master}), all-ack, flush "
            f"async, {args.size} B messages, {args.messages:,} per run, 8 queues, "
            f"{SENDERS} senders, {args.groups:,} message groups",
            flush=True,
        )
        async with Admin(addresses) as admin:
            for topic in ("Plain", "Fifo"):
                await admin.create_topic(topic, 8)
            await admin.update_sub_group({"groupName": "G-fifo", "consumeMessageOrderly": True})
        await asyncio.sleep(1.5)  # the slaves register the topics for routes
        plain_send = await produce(addresses, "Plain", args.messages, body, 0)
        fifo_send = await produce(addresses, "Fifo", args.messages, body, args.groups)
        plain_read = await consume(addresses, "Plain", "G-plain", args.messages)
        fifo_read = await consume(addresses, "Fifo", "G-fifo", args.messages)
        print(
            f"send    plain {plain_send:>9,.0f} msg/s   message groups {fifo_send:>9,.0f} "
            f"msg/s ({fifo_send / plain_send:.2f}x)\n"
            f"consume plain {plain_read:>9,.0f} msg/s   FIFO group     {fifo_read:>9,.0f} "
            f"msg/s ({fifo_read / plain_read:.2f}x)",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--groups", type=int, default=1_000)
    parser.add_argument("--size", type=int, default=1024)
    args = smoke.parse_args(parser, messages=300, groups=20)
    run_async(lambda: main_async(args))


if __name__ == "__main__":
    main()
