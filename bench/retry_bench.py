"""Retry-path benchmark (issue 11): nacked messages per second through %RETRY% and back.

One broker group of 3 in controller mode (all-ack, flush async), 1 KiB messages. N messages are
produced to a topic; one consumer of group G takes each, nacks it the first time (the broker
re-publishes it to %RETRY%G through the timing wheel, due after the group's back-off) and
consumes it when it comes back. Two ways of nacking, each on its own topic and group:

* ``process``: ``consumer.process(handler)`` (handlers in order; the nacks of a received batch
  in flight together, each answered once durable, all-ack);
* ``batched``: the application's own loop: ``receive()`` batches, every nack of a batch in
  flight at once.

Printed per mode: nacks per second (first delivery to the last nack answered), round trips per
second (first delivery to the last retried copy consumed), and the back-off. The back-off is 0 s
by default (``--delay 1s`` for one second: the round trip then includes it). Nothing is
asserted.

    python bench/retry_bench.py [--messages N] [--size BYTES] [--delay 0s]
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
from client.message import Message, ReceivedMessage

TARGET = 1_000
"""Our own yardstick for nacks per second (the issue sets none): a consumer failing 1,000
messages a second, far above what a healthy application nacks, keeps its retry path busy
without falling behind."""


class Tally:
    def __init__(self, n: int) -> None:
        self.n = n
        self.first: float | None = None
        self.nacked = 0
        self.last_nack = 0.0
        self.back = 0
        self.done = asyncio.Event()

    def seen(self) -> None:
        if self.first is None:
            self.first = time.perf_counter()

    def nack_answered(self) -> None:
        self.nacked += 1
        self.last_nack = time.perf_counter()

    def returned(self) -> None:
        self.back += 1
        if self.back >= self.n:
            self.done.set()


async def produce(addresses: str, topic: str, n: int, body: bytes) -> None:
    async with Producer(addresses) as producer:
        for first in range(0, n, 64):
            batch = [Message(body=body) for _ in range(min(64, n - first))]
            await producer.send_batch(topic, batch)


async def run_process(addresses: str, topic: str, group: str, tally: Tally) -> None:
    async def handler(msg: ReceivedMessage) -> None:
        tally.seen()
        if msg.reconsume_times == 0:
            raise RuntimeError("first delivery fails")
        tally.returned()

    async with Consumer(addresses, group, topic, **FAST_CONSUMER) as consumer:
        # process() nacks through the consumer's queue delivery (client/queue_delivery.py), not
        # through Consumer.nack: count the nacks answered there.
        delivery = consumer._delivery
        original_nack = delivery.nack

        async def counted(msg: ReceivedMessage, reason: str = "") -> None:
            await original_nack(msg, reason)
            tally.nack_answered()

        delivery.nack = counted  # type: ignore[method-assign]
        task = asyncio.ensure_future(consumer.process(handler))
        try:
            await asyncio.wait_for(tally.done.wait(), 600)
        finally:
            task.cancel()


async def run_batched(addresses: str, topic: str, group: str, tally: Tally) -> None:
    async def nack(consumer: Consumer, msg: ReceivedMessage) -> None:
        await consumer.nack(msg, "first delivery fails")
        tally.nack_answered()

    async with Consumer(addresses, group, topic, **FAST_CONSUMER) as consumer:
        deadline = time.monotonic() + 600
        while not tally.done.is_set() and time.monotonic() < deadline:
            msgs = await consumer.receive(1.0)
            if msgs:
                tally.seen()
            fresh = [m for m in msgs if m.reconsume_times == 0]
            for _ in range(len(msgs) - len(fresh)):
                tally.returned()
            await asyncio.gather(*(nack(consumer, m) for m in fresh))


def report(mode: str, tally: Tally, delay: str) -> None:
    assert tally.first is not None
    nack_s = tally.last_nack - tally.first
    round_s = time.perf_counter() - tally.first
    nack_rate = tally.nacked / nack_s if nack_s > 0 else float("nan")
    print(
        f"{mode:<8} {tally.nacked:>7,} nacks in {nack_s:6.2f} s: {nack_rate:>8,.0f} nacks/s "
        f"({nack_rate / TARGET:.2f}x our {TARGET:,}/s); all back through %RETRY% in "
        f"{round_s:6.2f} s: {tally.back / round_s:>8,.0f} msg/s (back-off {delay})",
        flush=True,
    )


async def main_async(args: argparse.Namespace) -> None:
    body = payload(args.size)
    async with group_of_three("rmq-retry-bench-") as broker_a:
        addresses = broker_a.addresses
        print(
            f"3 controllers, broker-a x3 (master {broker_a.master}), all-ack, "
            f"flush async, {args.size} B messages, {args.messages:,} per mode",
            flush=True,
        )
        async with Admin(addresses) as admin:
            for mode in ("process", "batched"):
                await admin.create_topic(f"Retry-{mode}", 4)
                await admin.update_sub_group({"groupName": f"G-{mode}", "retryDelays": args.delay})
        await asyncio.sleep(1.5)  # the slaves register the topics for routes
        for mode, run in (("process", run_process), ("batched", run_batched)):
            await produce(addresses, f"Retry-{mode}", args.messages, body)
            tally = Tally(args.messages)
            await run(addresses, f"Retry-{mode}", f"G-{mode}", tally)
            report(mode, tally, args.delay)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=5_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--delay", default="0s", help="the group's back-off, e.g. 0s or 1s")
    args = smoke.parse_args(parser, messages=200)
    run_async(lambda: main_async(args))


if __name__ == "__main__":
    main()
