"""rmq-console's pages with many topics and groups, and its CPU under browsers refreshing
(issue 33, docs/console.md).

Three controllers and broker group broker-a of two as processes; N topics of 4 queues made
through the SDK and G consumer groups, each with an offset on one of them (UPDATE_CONSUMER_OFFSET
to the master); then rmq-console as a process. For the cluster, topics and groups pages (and the
vendored htmx) it prints the median time to first byte and to the last byte of 10 loads after a
warm-up, and the page's size; then C clients load the cluster page's live part every 2 s, as
that many open browsers do, for S seconds, and it prints the console's CPU over that time. The
figures depend on the machine's load, printed with them. Nothing is asserted.

    python bench/console_bench.py [--topics 1000] [--groups 200] [--clients 10] [--seconds 30]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from bench import smoke
from bench.broker_bench import cpu_seconds, run_async
from client.admin import Admin
from client.errors import ClientError
from protocol.pull import ConsumerOffsetUpdate
from remoting.client import ConnectionPool
from tests.support.cluster import Cluster
from tests.support.procs import Daemon, free_port, port_open
from tests.support.wait import wait_until

PAGES = ("/c/default/cluster", "/c/default/topics", "/c/default/groups", "/static/htmx.min.js")
LOADS = 10


async def fill(addresses: str, topics: int, groups: int) -> None:
    """``topics`` topics of 4 queues, and ``groups`` groups with an offset on one each."""
    async with Admin(addresses) as admin:
        wait = asyncio.Semaphore(16)

        async def one(i: int) -> None:
            async with wait:
                await admin.create_topic(f"BenchTopic{i:05d}", 4)

        await asyncio.gather(*(one(i) for i in range(topics)))
        clusters = await admin.cluster_info()
    master = next(b.address for bs in clusters.values() for b in bs if b.is_master)
    pool = ConnectionPool(5.0)
    try:
        conn = await pool.get(master)
        for g in range(groups):
            up = ConsumerOffsetUpdate(
                group=f"bench-group-{g:04d}", topic=f"BenchTopic{g % topics:05d}", queue_id=0,
                offset=0,
            )  # fmt: skip
            await conn.call(up.code, *up.encode(), timeout=5.0)
    finally:
        pool.close()


async def load_times(url: str) -> tuple[float, float, int]:
    """Median ms to the first byte and to the last of :data:`LOADS` loads, and the size."""
    first_ms, full_ms = [], []
    size = 0
    async with httpx.AsyncClient(timeout=60) as client:
        (await client.get(url)).raise_for_status()  # warm-up
        for _ in range(LOADS):
            started = time.perf_counter()
            first: float | None = None
            size = 0
            async with client.stream("GET", url) as resp:
                resp.raise_for_status()
                async for chunk in resp.aiter_raw():
                    first = first or time.perf_counter()
                    size += len(chunk)
            done = time.perf_counter()
            first_ms.append(((first or done) - started) * 1000)
            full_ms.append((done - started) * 1000)
    return statistics.median(first_ms), statistics.median(full_ms), size


async def refreshing(url: str, clients: int, seconds: float) -> int:
    """``clients`` clients loading the cluster page's live part every 2 s; the loads made."""
    loads = 0

    async def one(i: int) -> None:
        nonlocal loads
        async with httpx.AsyncClient(timeout=60) as client:
            await asyncio.sleep(2.0 * i / clients)  # spread, as browsers opened one by one
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                (await client.get(url, headers={"HX-Request": "true"})).raise_for_status()
                loads += 1
                await asyncio.sleep(2.0)

    await asyncio.gather(*(one(i) for i in range(clients)))
    return loads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--groups", type=int, default=200)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = smoke.parse_args(parser, topics=20, groups=5, clients=2, seconds=3.0)
    tmp = Path(tempfile.mkdtemp(prefix="console-bench-"))
    cluster = Cluster(tmp)
    port = free_port()
    console = Daemon(
        "console",
        [
            sys.executable, "-m", "console", "--controllers", cluster.controller_addresses,
            "--listen", f"127.0.0.1:{port}", "--log-format", "json",
        ],
        tmp / "console.log",
    )  # fmt: skip
    try:
        cluster.start_controllers()
        cluster.add_group("broker-a", 2)

        async def created() -> None:
            await fill(cluster.controller_addresses, args.topics, args.groups)

        started = time.monotonic()
        wait_until(lambda: _try(created), "a master to create the topics on", 60, interval=0.5)
        print(
            f"made {args.topics} topics (4 queues) and {args.groups} groups in "
            f"{time.monotonic() - started:.1f} s"
        )
        console.start()
        wait_until(lambda: port_open(port), "the console to listen", 30, on_timeout=console.log)
        base = f"http://127.0.0.1:{port}"
        for page in PAGES:
            first, full, size = run_async(functools.partial(load_times, base + page))
            print(
                f"{page}: first byte {first:.0f} ms, last byte {full:.0f} ms ({size:,} bytes; "
                f"median of {LOADS})"
            )
        cpu_before, wall_before = cpu_seconds(console.pid), time.monotonic()
        loads = run_async(
            lambda: refreshing(f"{base}/c/default/cluster/live", args.clients, args.seconds)
        )
        cpu = cpu_seconds(console.pid) - cpu_before
        wall = time.monotonic() - wall_before
        print(
            f"{args.clients} clients refreshing the cluster page every 2 s: console CPU "
            f"{100 * cpu / wall:.1f}% of a core ({loads} loads in {wall:.0f} s)"
        )
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    finally:
        console.stop()
        cluster.stop()


def _try(work: Callable[[], Coroutine[Any, Any, None]]) -> bool:
    """Run the coroutine function ``work``; False while the cluster has no master yet."""
    try:
        run_async(work)
    except ClientError:
        return False
    return True


if __name__ == "__main__":
    main()
