"""Scheduled-delivery benchmark: three controllers and one broker group of three, all-ack.

Real processes on loopback, production segment size, flush async, 1 KiB messages. Prints
(nothing is asserted):
  1. 200,000 messages scheduled with random delays of 1-10 s (SEND_BATCH_MESSAGE, 64 items a
     request, 4 connections x 4 requests in flight), consumed meanwhile by an SDK consumer:
     scheduled msg/s written, delivered msg/s, and lateness p50/p99/max both as stored (the
     delivered copy's store time minus its due time) and as seen by the consumer (receipt time
     minus due time: a consumer reads only what every replica has); CPU seconds per process, to
     show what bounds the rate;
  2. 1,000,000 messages scheduled 1 hour ahead: the master's RssAnon (memory outside the page
     cache) before and after, and its timer's pending gauge.

    python bench/timer_bench.py [--messages N] [--max-delay S] [--far N] [--size B]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import time
from pathlib import Path

import msgpack

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import smoke
from bench.broker_bench import cpu_seconds, pct, rss_anon_mib, run_async
from bench.group_of_three import group_of_three, payload
from client import Consumer
from protocol.codes import RequestCode, ResponseCode
from protocol.remoting import Header
from protocol.timer import PROP_TIMER_DELIVER_MS, PROP_TIMER_OUT_MS
from remoting.client import RemotingClient
from tests.cluster.support import node_at
from tests.support.cluster import Cluster

TOPIC = "TimerBench"
QUEUES = 8
BATCH = 64
CONNECTIONS = 4
IN_FLIGHT = 4
TARGET_RATE = 30_000.0
TARGET_P99_MS = 200.0
TARGET_RSS_MIB = 200.0


async def write(
    master: str, count: int, body: bytes, due: object, label: str
) -> tuple[float, float]:
    """Schedule ``count`` messages (``due()`` gives each one's delivery time); (start, end)."""
    conns = [await RemotingClient.connect(master) for _ in range(CONNECTIONS)]
    batches = iter(range(0, count, BATCH))
    done = 0
    assert callable(due)

    async def worker(conn: RemotingClient, k: int) -> None:
        nonlocal done
        for lo in batches:
            n = min(BATCH, count - lo)
            items = [
                {"body": body, "properties": {PROP_TIMER_DELIVER_MS: str(due())}} for _ in range(n)
            ]
            header: Header = {"topic": TOPIC, "queueId": (lo // BATCH + k) % QUEUES}
            resp = await conn.request(
                RequestCode.SEND_BATCH_MESSAGE, header, msgpack.packb(items), 60
            )
            if resp.code != ResponseCode.SUCCESS:
                raise SystemExit(f"{label}: send failed: {resp.code} {resp.header}")
            done += n

    start = time.perf_counter()
    await asyncio.gather(
        *(worker(c, i * IN_FLIGHT + j) for i, c in enumerate(conns) for j in range(IN_FLIGHT))
    )
    end = time.perf_counter()
    for c in conns:
        c.close()
    return start, end


async def near_phase(cluster: Cluster, master: str, args: argparse.Namespace, body: bytes) -> None:
    rng = random.Random(1)
    count = args.messages
    pids = {b.name: b.pid for b in cluster.brokers}
    role = {b.name: ("master" if b.address == master else "slave") for b in cluster.brokers}
    cpu0 = {name: cpu_seconds(pid) for name, pid in pids.items()}
    self_cpu0 = time.process_time()
    stored_late: list[float] = []
    seen_late: list[float] = []
    received_at: list[float] = []
    received = 0
    writing_done = asyncio.Event()

    async def consume() -> None:
        nonlocal received
        async with Consumer(cluster.controller_addresses, "timer-bench", TOPIC) as consumer:
            while received < count:
                msgs = await consumer.receive(timeout=1.0)
                now_ms = time.time() * 1000
                for m in msgs:
                    due_ms = int(m.properties[PROP_TIMER_OUT_MS])
                    stored_late.append(m.store_timestamp - due_ms)
                    seen_late.append(now_ms - due_ms)
                if msgs:
                    received += len(msgs)
                    received_at.append(time.perf_counter())
                elif (
                    writing_done.is_set()
                    and received_at
                    and time.perf_counter() - received_at[-1] > 30
                ):
                    break

    def due() -> int:
        return int(time.time() * 1000) + rng.randint(1000, args.max_delay * 1000)

    consumer = asyncio.create_task(consume())
    await asyncio.sleep(2.0)  # the consumer has its queues before the first delivery
    start, end = await write(master, count, body, due, "near")
    writing_done.set()
    await consumer
    write_rate = count / (end - start)
    span = received_at[-1] - start if received_at else float("nan")
    first_due = start + 1.0  # the earliest a delivery can be
    deliver_rate = received / (received_at[-1] - first_due) if received_at else float("nan")
    print(
        f"scheduled (1-{args.max_delay} s ahead), written:  {write_rate:>9,.0f} msg/s "
        f"({count:,} in {end - start:.1f} s)  ratio to target {write_rate / TARGET_RATE:.2f}",
        flush=True,
    )
    print(
        f"scheduled, delivered and consumed:  {deliver_rate:>9,.0f} msg/s "
        f"({received:,} of {count:,}, last {span:.1f} s after the first write)  "
        f"ratio to target {deliver_rate / TARGET_RATE:.2f}",
        flush=True,
    )
    for name, values in (("stored", stored_late), ("seen by the consumer", seen_late)):
        p99 = pct(values, 0.99)
        print(
            f"lateness {name:<21} p50 {pct(values, 0.5):7.0f} ms  p99 {p99:7.0f} ms  "
            f"max {max(values, default=float('nan')):7.0f} ms  "
            f"p99 ratio to target {TARGET_P99_MS / max(p99, 1):.2f}",
            flush=True,
        )
    wall = received_at[-1] - start + 2.0 if received_at else float("nan")
    for name, pid in pids.items():
        used = cpu_seconds(pid) - cpu0[name]
        print(f"  CPU {name} ({role[name]}): {used:6.1f} s ({used / wall:.2f} of a core)")
    used = time.process_time() - self_cpu0
    print(f"  CPU bench (writers + consumer): {used:6.1f} s ({used / wall:.2f} of a core)")
    print(f"  load average (1 min) at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


async def far_phase(master_pid: int, master: str, args: argparse.Namespace, body: bytes) -> None:
    count = args.far
    before = rss_anon_mib(master_pid)
    hour = int(time.time() * 1000) + 3_600_000
    rng = random.Random(2)

    def due() -> int:
        return hour + rng.randint(0, 60_000)

    start, end = await write(master, count, body, due, "far")
    await asyncio.sleep(3.0)
    after = rss_anon_mib(master_pid)
    pending = await pending_gauge(master)
    print(
        f"{count:,} scheduled 1 h ahead in {end - start:.1f} s "
        f"({count / (end - start):,.0f} msg/s); master RssAnon {before:.0f} -> {after:.0f} MiB "
        f"(+{after - before:.0f}); pending {pending}; "
        f"ratio to target ({TARGET_RSS_MIB:.0f} MiB) {TARGET_RSS_MIB / after:.2f}",
        flush=True,
    )


async def pending_gauge(master: str) -> str:
    """The master's rmq_broker_timer_pending, read from its runtime info if it reports it."""
    conn = await RemotingClient.connect(master)
    try:
        resp = await conn.call(RequestCode.GET_BROKER_RUNTIME_INFO)
        doc = msgpack.unpackb(resp.body or b"\x80")
        return str(doc.get("timerPending", "n/a"))
    finally:
        conn.close()


async def main_async(args: argparse.Namespace) -> None:
    body = payload(args.size)
    async with group_of_three("rmq-timer-bench-") as broker_a:
        cluster, master = broker_a.cluster, broker_a.master
        conn = await RemotingClient.connect(master)
        await conn.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": TOPIC, "queues": QUEUES})
        conn.close()
        await asyncio.sleep(1.5)  # routes
        print(
            f"3 controllers, broker-a x3 (master {master}), all-ack, flush async, "
            f"{args.size} B messages, {os.cpu_count()} cores, load average "
            f"{os.getloadavg()[0]:.1f}",
            flush=True,
        )
        if args.messages:
            await near_phase(cluster, master, args, body)
        if args.far:
            await far_phase(node_at(cluster, master).pid, master, args, body)


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--messages", type=int, default=200_000, help="scheduled 1-MAX_DELAY s ahead")
    p.add_argument("--max-delay", type=int, default=10, help="seconds, the longest near delay")
    p.add_argument("--far", type=int, default=1_000_000, help="scheduled 1 hour ahead")
    p.add_argument("--size", type=int, default=1024)
    args = smoke.parse_args(p, messages=300, far=300, max_delay=2)
    run_async(lambda: main_async(args))


if __name__ == "__main__":
    main()
