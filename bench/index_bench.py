"""Key index benchmark: what the index costs a send, and how fast a lookup by key is.

1. Send throughput with the key index on and off: one lone broker process (development mode,
   flush async, 1 KiB messages, every message with its own key: the worst case, each send
   writes an index entry), batched sends (64 per request) and single sends (64 in flight),
   alternating on/off runs and keeping each side's best. Target: on within 10% of off.
2. Lookup latency by key over N indexed messages (default 10M): the messages are put straight
   into a MessageStore in this process (sending 10M over the wire would take an hour here), so
   the index is built exactly as a broker builds it, from real CommitLog records; then random
   keys are looked up (index chain walk plus the confirming CommitLog read) in-process, and a
   broker process is started on that store and asked QUERY_MESSAGE over loopback. Target p99
   under 5 ms.

Figures are printed, never asserted.

    python bench/index_bench.py [--messages N] [--indexed N] [--lookups N]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import msgpack

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import smoke
from bench.broker_bench import cpu_seconds, pct, run_async
from protocol.broker_requests.query import MessagesFound, QueryMessage
from protocol.codes import RequestCode, ResponseCode
from protocol.message import Message
from remoting.client import RemotingClient
from storage.store import MessageStore, StoreConfig
from tests.support.procs import BrokerProc

TOPIC = "Bench"


async def send_phase(address: str, n: int, size: int, queues: int, batch: int) -> float:
    """Send ``n`` keyed messages (``batch`` per request; 1: single sends, 64 in flight);
    returns msg/s."""
    conn = await RemotingClient.connect(address)
    try:
        await conn.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": TOPIC, "queues": queues})
        body = os.urandom(size // 2).hex().encode()[:size]
        requests = n // batch
        counter = iter(range(requests))
        tag = os.urandom(4).hex()

        async def worker() -> None:
            for i in counter:
                if batch == 1:
                    resp = await conn.request(
                        RequestCode.SEND_MESSAGE,
                        {"topic": TOPIC, "queueId": i % queues, "keys": f"{tag}-{i}"},
                        body,
                    )
                else:
                    items = [{"body": body, "keys": f"{tag}-{i}-{j}"} for j in range(batch)]
                    resp = await conn.request(
                        RequestCode.SEND_BATCH_MESSAGE,
                        {"topic": TOPIC, "queueId": i % queues},
                        msgpack.packb(items),
                    )
                if resp.code != ResponseCode.SUCCESS:
                    raise SystemExit(f"send failed: {resp.code} {resp.header}")

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(64 if batch == 1 else 8)))
        return requests * batch / (time.perf_counter() - t0)
    finally:
        conn.close()


def bench_sends(args: argparse.Namespace) -> None:
    print(
        f"== send throughput, key index on vs off: one lone broker process, flush async, "
        f"{args.size} B messages each with its own key, {args.messages:,} messages per run, "
        f"best of {args.rounds} alternating runs (the best throughput and the lowest broker CPU per "
        "message of each side)"
    )
    for name, batch in (("batch sends (64 per request)", 64), ("single sends (64 in flight)", 1)):
        best: dict[bool, float] = {True: 0.0, False: 0.0}
        cpu: dict[bool, float] = {True: float("inf"), False: float("inf")}
        for _ in range(args.rounds):
            for enabled in (True, False):
                with tempfile.TemporaryDirectory(prefix="rmq-index-bench-") as tmp:
                    config = Path(tmp) / "index.toml"
                    config.write_text(f"index_enable = {'true' if enabled else 'false'}\n")
                    broker = BrokerProc(
                        Path(tmp),
                        extra=["--flush", "async", "--config", str(config)],
                        segment_bytes=1 << 30,
                    )
                    broker.start_and_wait()
                    try:
                        c0 = cpu_seconds(broker.pid)
                        rate = run_async(
                            functools.partial(
                                send_phase, broker.address, args.messages, args.size, 8, batch
                            )
                        )
                        used = (cpu_seconds(broker.pid) - c0) / args.messages * 100_000
                    finally:
                        broker.stop()
                best[enabled] = max(best[enabled], rate)
                cpu[enabled] = min(cpu[enabled], used)
        ratio = best[True] / best[False]
        print(
            f"{name:<30} index on {best[True]:>9,.0f} msg/s ({cpu[True]:.2f} broker CPU s/100k)"
            f"   off {best[False]:>9,.0f} msg/s ({cpu[False]:.2f} s/100k)   on/off {ratio:.3f}"
            f"   (target >= 0.90: {'met' if ratio >= 0.9 else 'missed'}); broker CPU per "
            f"message on/off {cpu[True] / cpu[False]:.3f} (less disturbed by a loaded machine)",
            flush=True,
        )


def build_store(data_dir: Path, indexed: int) -> tuple[MessageStore, float]:
    store = MessageStore(
        StoreConfig(data_dir=data_dir, commitlog_segment_bytes=1 << 30, warm_ahead_bytes=0)
    )
    store.open()
    batch = 512
    body = b"x" * 16
    t0 = time.perf_counter()
    now = 1_700_000_000_000
    for first in range(0, indexed, batch):
        msgs = [
            Message(topic=TOPIC, body=body, keys=f"key-{i}")
            for i in range(first, min(indexed, first + batch))
        ]
        store.put(TOPIC, (first // batch) % 8, msgs, now + first // 1000)
        if first and first % 1_000_000 == 0:
            rate = first / (time.perf_counter() - t0)
            print(f"   {first:,} put and indexed ({rate:,.0f} msg/s)", flush=True)
    return store, time.perf_counter() - t0


def bench_lookups(args: argparse.Namespace) -> None:
    print(
        f"== lookup latency by key over {args.indexed:,} indexed messages (each its own key; "
        f"files of 1,000,000 entries and 250,000 slots, the defaults)"
    )
    tmp = Path(tempfile.mkdtemp(prefix="rmq-index-bench-", dir=args.dir))
    try:
        data_dir = tmp / "broker-a"
        store, seconds = build_store(data_dir, args.indexed)
        assert store.index is not None
        stats = store.index.stats()
        print(
            f"built by MessageStore.put (16 B bodies, 512 per put) in {seconds:.0f} s "
            f"({args.indexed / seconds:,.0f} msg/s with indexing); {stats.files} index files, "
            f"{stats.entries:,} entries",
            flush=True,
        )
        lat: list[float] = []
        for key in random_keys(7, args):
            t0 = time.perf_counter()
            found = store.query_by_key(TOPIC, key, 0, 1 << 62, 64)
            lat.append(time.perf_counter() - t0)
            if len(found) != 1:
                raise SystemExit(f"{key}: {len(found)} messages found")
        report("in-process (MessageStore.query_by_key)", lat)
        t0 = time.perf_counter()
        store.close()
        print(
            f"store closed (index files sealed with their CRC) in {time.perf_counter() - t0:.1f} s"
        )
        run_async(lambda: over_the_wire(tmp, args))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


async def over_the_wire(tmp: Path, args: argparse.Namespace) -> None:
    broker = BrokerProc(tmp, extra=["--flush", "async"], segment_bytes=1 << 30)
    t0 = time.perf_counter()
    broker.start_and_wait(timeout=600)
    try:
        conn = await RemotingClient.connect(broker.address)
        # The broker listens before its store is open: the first answer says it serves.
        await conn.call(
            RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": TOPIC, "queues": 8}, timeout=900
        )
        print(
            f"broker process serving on that store {time.perf_counter() - t0:.1f} s after "
            "its start (clean stop: the index files are verified, not rebuilt)",
            flush=True,
        )
        lat: list[float] = []
        for key in random_keys(11, args):
            t1 = time.perf_counter()
            query = QueryMessage(topic=TOPIC, key=key, max_num=64)
            resp = await conn.request(query.code, *query.encode())
            lat.append(time.perf_counter() - t1)
            if resp.code != ResponseCode.SUCCESS or MessagesFound.parse(resp.header).count != 1:
                raise SystemExit(f"{key}: {resp.code} {resp.header}")
        conn.close()
        report("over loopback (QUERY_MESSAGE)", lat)
    finally:
        broker.stop(timeout=120)


def random_keys(seed: int, args: argparse.Namespace) -> Iterator[str]:
    """``--lookups`` keys drawn from the ``--indexed`` messages' keys, in the order ``seed``
    gives."""
    rng = random.Random(seed)
    for _ in range(args.lookups):
        yield f"key-{rng.randrange(args.indexed)}"


def report(name: str, lat: list[float]) -> None:
    p50, p99 = pct(lat, 0.5) * 1000, pct(lat, 0.99) * 1000
    print(
        f"{name:<42} {len(lat):,} random keys  p50 {p50:.3f} ms  p99 {p99:.3f} ms  "
        f"max {max(lat) * 1000:.2f} ms   (target p99 < 5 ms: {'met' if p99 < 5 else 'missed'})",
        flush=True,
    )


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--messages", type=int, default=100_000, help="messages per send run")
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--rounds", type=int, default=2, help="alternating on/off runs per mode")
    p.add_argument("--indexed", type=int, default=10_000_000, help="messages indexed")
    p.add_argument("--lookups", type=int, default=5000, help="random keys looked up")
    p.add_argument("--dir", default=None, help="where the indexed store goes (default: $TMPDIR)")
    p.add_argument("--only", choices=("sends", "lookups"), default=None)
    args = smoke.parse_args(p, messages=300, rounds=1, indexed=2_000, lookups=100)
    if args.only != "lookups":
        bench_sends(args)
    if args.only != "sends":
        bench_lookups(args)


if __name__ == "__main__":
    main()
