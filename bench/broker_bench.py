"""Broker benchmark: one broker process, 1 KiB messages, flush async.

Measures, against a real broker subprocess on loopback:
  1. single sends over one connection with 64 in flight,
  2. batched sends (64 messages per request),
  3. consuming everything back with pulls (one connection, several queues in flight),
  4. the SDK producer's sends with 64 in flight, auto-batching on and off, and its lone sends'
     p50 on and off (bench/sdk_phases.py; ``--profile`` profiles the client side),
and prints msg/s, MB/s, p50/p99 latency, the broker's CPU seconds per 100k messages, the broker's
memory outside the page cache (RssAnon) while it holds every message, and the ratio to the issue's
target. Nothing is asserted: these are figures.

    python bench/broker_bench.py [--messages N] [--size BYTES]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import msgpack

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import sdk_phases, smoke

# Re-exported (``as``): the other benches import them from here.
from bench.figures import cpu_resolution as cpu_resolution
from bench.figures import cpu_seconds as cpu_seconds
from bench.figures import pct as pct
from bench.master_link import MasterLink
from protocol.codes import RequestCode, ResponseCode
from protocol.idempotence import SEQ_FIELD, pack_producer_seq
from protocol.message import iter_records
from protocol.pull import PullFound, PullRequest, decode_pull_answer
from protocol.remoting import Scalar
from remoting.client import DEFAULT_TIMEOUT, RemotingClient
from tests.support.procs import BrokerProc

T = TypeVar("T")

TARGETS = {"single": 40_000, "batch": 150_000, "consume": 150_000}


def _running_threads(pid: int) -> int:
    """How many of ``pid``'s threads are running or runnable (state R in /proc)."""
    running = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            if task.joinpath("stat").read_text().rsplit(")", 1)[1].split()[0] == "R":
                running += 1
    return running


def idle_cpu_seconds(pid: int, wait: float = 0.25) -> tuple[float, bool]:
    """:func:`cpu_seconds` of ``pid`` read once none of its threads runs (polled every
    millisecond for at most ``wait`` seconds), and whether that was so. The kernel brings a
    thread's CPU time up to date when it stops running; a thread running on another core at the
    reading is counted only as of its last scheduler tick (tens of ms late on this 2-core VM), so
    a reading of a busy process is that much short while one of a sleeping one is exact."""
    end = time.monotonic() + wait
    while True:
        idle = _running_threads(pid) == 0
        if idle or time.monotonic() >= end:
            return cpu_seconds(pid), idle
        time.sleep(0.001)


def rss_anon_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_async(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run ``main()`` on uvloop (a runtime dependency), on asyncio's loop if it is missing."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main())
    return uvloop.run(main())


def report(
    name: str,
    count: int,
    nbytes: int,
    seconds: float,
    cpu: float,
    lat: list[float] | None,
    client_cpu: float,
) -> None:
    rate = count / seconds
    line = f"{name:<28} {rate:>10,.0f} msg/s {nbytes / seconds / 1e6:>8.1f} MB/s"
    if lat:
        line += f"  p50 {pct(lat, 0.5) * 1000:6.2f} ms  p99 {pct(lat, 0.99) * 1000:6.2f} ms"
    line += f"  broker CPU {cpu / count * 100_000:5.2f} s/100k"
    line += f"  client CPU {client_cpu / count * 100_000:5.2f} s/100k"
    line += f"  ratio to target {rate / TARGETS[name.split()[0]]:.2f}"
    print(line, flush=True)


async def send_requests(
    conn: RemotingClient,
    code: int,
    topic: str,
    queues: int,
    payload: bytes,
    requests: int,
    workers: int,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    failed: str = "send failed",
    producer_id: int | None = None,
    link: MasterLink | None = None,
) -> list[float]:
    """``requests`` requests of ``code`` (SEND_MESSAGE or SEND_BATCH_MESSAGE, ``payload`` the
    body) to ``topic``'s ``queues`` queues in turn, from ``workers`` concurrent loops over one
    connection: each one's latency (s). A refused one ends the bench, saying ``failed``; with
    ``link`` (``conn`` its connection when the phase starts), a refusal a production client
    retries is sent again as :class:`bench.master_link.MasterLink` says, its latency counted
    from its first attempt, and the link's connection of the moment carries each request.
    ``producer_id``: as an idempotent producer (docs/idempotence.md), epoch 0, each queue's
    requests numbered from 0 in the order sent."""
    lat: list[float] = []
    counter = iter(range(requests))

    async def worker() -> None:
        for i in counter:
            t0 = time.perf_counter()
            header: dict[str, Scalar] = {"topic": topic, "queueId": i % queues}
            if producer_id is not None:
                header[SEQ_FIELD] = pack_producer_seq(producer_id, 0, i // queues)
            on = conn if link is None else link.conn
            resp = await on.request(code, header, payload, timeout)
            if resp.code != ResponseCode.SUCCESS:
                if link is None:
                    raise SystemExit(f"{failed}: {resp.code} {resp.header}")
                await link.retry(resp, on, code, header, payload, timeout, failed)
            lat.append(time.perf_counter() - t0)

    await asyncio.gather(*(worker() for _ in range(workers)))
    return lat


def load() -> str:
    """The load averages, as a bench prints them beside its figures."""
    return "load " + " ".join(f"{x:.1f}" for x in os.getloadavg())


async def fill_log(conn: RemotingClient, topic: str, queues: int, body: bytes, count: int) -> None:
    """``count`` messages of ``body`` sent to ``topic``'s ``queues`` queues (16 in flight) to
    fill the log, and a line saying how much and how fast."""
    t0 = time.perf_counter()
    await send_requests(conn, RequestCode.SEND_MESSAGE, topic, queues, body, count, 16, timeout=60)
    dt = time.perf_counter() - t0
    mib = count * len(body) / (1 << 20)
    print(f"fill: {mib / 1024:.2f} GiB in {dt:.0f} s ({mib / dt:.0f} MiB/s), {load()}", flush=True)


async def bench_single(
    conn: RemotingClient, n: int, body: bytes, inflight: int, pid: int, queues: int
) -> None:
    cpu0, t0, c0 = cpu_seconds(pid), time.perf_counter(), time.process_time()
    lat = await send_requests(conn, RequestCode.SEND_MESSAGE, "Bench", queues, body, n, inflight)
    dt = time.perf_counter() - t0
    report(
        "single sends (64 in flight)",
        n,
        n * len(body),
        dt,
        cpu_seconds(pid) - cpu0,
        lat,
        time.process_time() - c0,
    )


async def bench_batch(
    conn: RemotingClient, n: int, body: bytes, batch: int, pid: int, queues: int
) -> None:
    payload = msgpack.packb([{"body": body}] * batch)
    requests = n // batch
    cpu0, t0, c0 = cpu_seconds(pid), time.perf_counter(), time.process_time()
    lat = await send_requests(
        conn,
        RequestCode.SEND_BATCH_MESSAGE,
        "Bench",
        queues,
        payload,
        requests,
        8,
        failed="batch send failed",
    )
    dt = time.perf_counter() - t0
    report(
        "batch sends (64 per request)",
        requests * batch,
        requests * batch * len(body),
        dt,
        cpu_seconds(pid) - cpu0,
        lat,
        time.process_time() - c0,
    )


async def bench_consume(conn: RemotingClient, queues: int, expected: int, pid: int) -> None:
    total = 0
    nbytes = 0

    async def drain(qid: int) -> None:
        nonlocal total, nbytes
        offset = 0
        while True:
            pull = PullRequest(
                group="bench", topic="Bench", queue_id=qid, offset=offset, max_count=256
            )
            answer = decode_pull_answer(await conn.request(pull.code, pull.header(), timeout=30))
            if not isinstance(answer, PullFound):
                return
            for rec in iter_records(answer.body):
                total += 1
                nbytes += len(rec.body)
            offset = answer.next_offset

    cpu0, t0, c0 = cpu_seconds(pid), time.perf_counter(), time.process_time()
    await asyncio.gather(*(drain(q) for q in range(queues)))
    dt = time.perf_counter() - t0
    if total != expected:
        print(f"warning: consumed {total} of {expected}")
    report(
        "consume (pull, decode)",
        total,
        nbytes,
        dt,
        cpu_seconds(pid) - cpu0,
        None,
        time.process_time() - c0,
    )


async def main_async(args: argparse.Namespace) -> None:
    body = os.urandom(args.size // 2).hex().encode()[: args.size]
    with tempfile.TemporaryDirectory(prefix="rmq-bench-") as tmp:
        broker = BrokerProc(
            Path(tmp), extra=["--flush", "async", "--log-format", "json"], segment_bytes=1 << 30
        )
        broker.start_and_wait()
        try:
            conn = await RemotingClient.connect(broker.address)
            await conn.call(
                RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "Bench", "queues": args.queues}
            )
            print(
                f"broker pid {broker.pid}, {args.messages:,} messages of {args.size} B per phase, {args.queues} queues"
            )
            await bench_single(conn, args.messages, body, 64, broker.pid, args.queues)
            await bench_batch(conn, args.messages, body, 64, broker.pid, args.queues)
            await bench_consume(
                conn, args.queues, args.messages + (args.messages // 64) * 64, broker.pid
            )
            sdk_sent = await bench_sdk(broker.address, broker.pid, body, args)
            held = 0
            while held < args.hold:
                await bench_batch_quiet(conn, body, min(64 * 500, args.hold - held), args.queues)
                held += min(64 * 500, args.hold - held)
            total = 2 * args.messages + sdk_sent + held
            print(
                f"broker memory outside the page cache (RssAnon) holding {total:,} messages: {rss_anon_mib(broker.pid):.0f} MiB (target < 200 MiB)"
            )
            conn.close()
        finally:
            broker.stop()


async def bench_sdk(address: str, pid: int, body: bytes, args: argparse.Namespace) -> int:
    """The SDK phases (auto-batching on, then off; lone sends interleaved): messages sent."""
    _, lat = await sdk_phases.both_modes(
        address,
        "Bench",
        body,
        messages=args.sdk_messages,
        lone=args.one_at_a_time,
        where=("1 broker", "(1 broker)"),
        target=TARGETS["single"],
        profile=args.profile,
        server_pid=pid,
    )
    return int(2 * (args.sdk_messages + 1) + 2 * (len(lat[True]) + 1))


async def bench_batch_quiet(conn: RemotingClient, body: bytes, n: int, queues: int) -> None:
    payload = msgpack.packb([{"body": body}] * 64)
    await asyncio.gather(
        *(
            conn.call(
                RequestCode.SEND_BATCH_MESSAGE,
                {"topic": "Bench", "queueId": i % queues},
                payload,
                timeout=30,
            )
            for i in range(n // 64)
        )
    )


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--messages", type=int, default=200_000, help="messages per phase")
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--queues", type=int, default=8)
    p.add_argument(
        "--sdk-messages", type=int, default=50_000, help="messages per SDK 64-in-flight phase"
    )
    p.add_argument("--one-at-a-time", type=int, default=2000, help="lone SDK sends per mode")
    p.add_argument(
        "--profile", action="store_true", help="cProfile the client of the auto-batching phase"
    )
    p.add_argument(
        "--hold",
        type=int,
        default=600_000,
        help="extra messages stored before reading memory (total about 1M)",
    )
    args = smoke.parse_args(p, messages=300, sdk_messages=300, one_at_a_time=50, hold=0)
    run_async(lambda: main_async(args))


if __name__ == "__main__":
    main()
