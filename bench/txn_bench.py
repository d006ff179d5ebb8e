"""Transaction benchmark (issue 12 item 3): transactional send + commit per second beside plain
sends of the same run.

One broker group of 3 in controller mode (all-ack, flush async), 1 KiB messages, a topic of 8
queues. ``--concurrency`` tasks each loop over: send a half message, commit it (two requests,
each answered once its records are on all three replicas). Printed beside it: plain sends with
the same concurrency (auto-batching off, so one request per message as for halves), and the ratio.
Nothing is asserted.

Measured (5,000 transactions, 64 in flight, shared 2-core machine at load average 7): plain send
7,060 msg/s, send + commit 1,438 transactions/s (0.20 of plain sends); half sends alone 4,744
msg/s, commits alone 4,094 commits/s. A transaction is two requests one after the other, each
waiting for all three replicas; a commit writes two records (op and copy).

    python bench/txn_bench.py [--transactions N] [--size BYTES] [--concurrency 64]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import smoke
from bench.broker_bench import run_async
from bench.group_of_three import group_of_three, payload
from client import Producer
from client.admin import Admin
from client.transaction import (
    Transaction,
    TransactionCheck,
    TransactionProducer,
    TransactionStatus,
)


def _unknown(check: TransactionCheck) -> TransactionStatus:
    return TransactionStatus.UNKNOWN


async def _loop(n: int, concurrency: int, one: object) -> float:
    assert callable(one)
    todo = iter(range(n))

    async def worker() -> None:
        for i in todo:
            await one(i)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return n / (time.perf_counter() - start)


async def main_async(args: argparse.Namespace) -> None:
    body = payload(args.size)
    async with group_of_three("rmq-txn-bench-") as broker_a:
        addresses = broker_a.addresses
        print(
            f"3 controllers, broker-a x3 (master {broker_a.master}), all-ack, "
            f"flush async, {args.size} B messages, {args.transactions:,} transactions, "
            f"{args.concurrency} in flight",
            flush=True,
        )
        async with Admin(addresses) as admin:
            await admin.create_topic("TxnBench", 8)
        await asyncio.sleep(1.5)  # the slaves register the topic for routes
        async with Producer(addresses, auto_batch=False) as producer:

            async def plain(i: int) -> None:
                await producer.send("TxnBench", body)

            await _loop(min(2_000, args.transactions), args.concurrency, plain)  # warm up
            sends = await _loop(args.transactions, args.concurrency, plain)
        print(f"plain send:            {sends:>9,.0f} msg/s", flush=True)
        async with TransactionProducer(
            addresses, "TxnBenchPG", _unknown, topics=["TxnBench"]
        ) as tp:

            async def txn(i: int) -> None:
                t = await tp.send_transaction("TxnBench", body)
                await t.commit()

            rate = await _loop(args.transactions, args.concurrency, txn)
            opened: list[Transaction] = []

            async def half(i: int) -> None:
                opened.append(await tp.send_transaction("TxnBench", body))

            halves = await _loop(args.transactions, args.concurrency, half)

            async def commit(i: int) -> None:
                await opened[i].commit()

            commits = await _loop(args.transactions, args.concurrency, commit)
        print(
            f"send + commit:         {rate:>9,.0f} transactions/s "
            f"({rate / sends:.2f} of plain sends)",
            flush=True,
        )
        print(f"  half sends alone:    {halves:>9,.0f} msg/s", flush=True)
        print(f"  commits alone:       {commits:>9,.0f} commits/s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--transactions", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--concurrency", type=int, default=64)
    args = smoke.parse_args(parser, transactions=300, concurrency=16)
    run_async(lambda: main_async(args))


if __name__ == "__main__":
    main()
