"""A group catching up from the start of a cold log beside a producer (issue 30 item 4).

One lone broker process (flush async, ``--segment-mib`` segments, the scrub and the timer off so
nothing else reads the old log), real sockets on loopback:

  1. fill: ``--fill-gib`` GiB of 16 KiB messages in topic ColdLog (4 queues), then the broker
     is restarted (its mapping of the pages goes) and the page cache dropped:
     ``echo 1 > /proc/sys/vm/drop_caches`` where this process may write it, otherwise (and with
     ``--evict fadvise``, as ``--smoke`` does: the machine's other work keeps its cache)
     POSIX_FADV_DONTNEED on every CommitLog file, which evicts the pages no process maps (the
     line says which was used, and how much of the log ``mincore`` then finds cached);
  2. the producer alone: ``--messages`` 1 KiB sends to topic Hot over one connection, 64 in
     flight: msg/s, p50, p99;
  3. the same producer, ``--messages`` at a time, while a new consumer group pulls
     ``--read-gib`` GiB of ColdLog from offset 0 of each queue (4 pullers, 32 messages a pull):
     the producer's figures over all its sends, and the reader's MiB/s, with the broker's
     cold-read counters (cold reads, bytes, seconds throttled) over the phase;
  4. the producer alone again.

Printed: each phase, then the producer's p99 with the cold reader over its median p99 alone (the
target is at most 1.5), and the reader's throughput. ``--rate`` sets ``cold_read_bytes_per_s``
(default the key's default). Nothing is asserted; the load average is printed with every figure.

    python bench/cold_read_bench.py [--fill-gib G] [--read-gib R] [--messages N] [--rate BYTES_PER_S]
        [--segment-mib M] [--evict drop_caches|fadvise] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import mmap
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import smoke
from bench.broker_bench import fill_log, load, pct, run_async, send_requests
from bench.group_of_three import payload
from broker.config import BrokerConfig
from protocol.codes import RequestCode, ResponseCode
from protocol.pull import PullRequest
from remoting.client import RemotingClient
from storage.cold_read import MincoreResidency
from storage.segment import Segment
from tests.support.page_cache import evict
from tests.support.procs import BrokerProc, free_port

COLD_TOPIC = "ColdLog"
HOT_TOPIC = "Hot"
QUEUES = 4
FILL_BODY = 16 * 1024
DEFAULT_RATE: int = BrokerConfig().cold_read_bytes_per_s


def counters(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out = {"reads": 0.0, "bytes": 0.0, "throttled": 0.0}
    names = {
        "rmq_broker_cold_reads_total": "reads",
        "rmq_broker_cold_read_bytes_total": "bytes",
        "rmq_broker_cold_read_throttled_seconds_total": "throttled",
    }
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in names:
            out[names[name]] += float(line.rsplit(" ", 1)[1])
    return out


def drop_cache(data_dir: Path, how: str) -> str:
    """Drop the CommitLog's pages from the page cache; how it was done."""
    if how == "drop_caches":
        try:
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("1\n")
            return "echo 1 > /proc/sys/vm/drop_caches"
        except OSError:
            pass
    for path in (data_dir / "commitlog").iterdir():
        evict(path)
    return "POSIX_FADV_DONTNEED on each CommitLog file"


def cached_share(data_dir: Path, upto: int) -> float:
    """The share of the CommitLog's first ``upto`` bytes in the page cache (mincore)."""
    probe = MincoreResidency.load()
    if probe is None:
        return float("nan")
    cached = total = 0
    for path in sorted((data_dir / "commitlog").iterdir()):
        start = int(path.name)
        if start >= upto:
            break
        seg = Segment.open(path, start)
        try:
            end = min(seg.end, upto)
            for lo in range(start, end, 1 << 20):
                hi = min(lo + (1 << 20), end)
                step = mmap.PAGESIZE * 16
                for at in range(lo, hi, step):
                    total += 1
                    cached += probe.resident(seg, at, min(at + step, hi))
        finally:
            seg.close()
    return cached / total if total else float("nan")


async def fill(conn: RemotingClient, gib: float) -> int:
    for topic in (COLD_TOPIC, HOT_TOPIC):
        resp = await conn.call(
            RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": topic, "queues": QUEUES}
        )
        if resp.code != ResponseCode.SUCCESS:
            raise SystemExit(f"create topic {topic}: {resp.code} {resp.remark}")
    count = max(QUEUES, int(gib * (1 << 30)) // FILL_BODY)
    await fill_log(conn, COLD_TOPIC, QUEUES, payload(FILL_BODY), count)
    return count


async def produce(
    address: str, messages: int, until: asyncio.Task[tuple[int, int]] | None = None
) -> tuple[float, float, float, int]:
    """(msg/s, p50 ms, p99 ms, sends) of ``messages`` 1 KiB sends, 64 in flight; with
    ``until``, more of them (``messages`` at a time) until it is done."""
    conn = await RemotingClient.connect(address, timeout=5.0)
    lat: list[float] = []
    try:
        t0 = time.perf_counter()
        while True:
            lat += await send_requests(
                conn,
                RequestCode.SEND_MESSAGE,
                HOT_TOPIC,
                QUEUES,
                payload(1024),
                messages,
                64,
                timeout=60,
            )
            if until is None or until.done():
                break
        dt = time.perf_counter() - t0
    finally:
        conn.close()
    return len(lat) / dt, pct(lat, 0.5) * 1e3, pct(lat, 0.99) * 1e3, len(lat)


async def read_cold(address: str, group: str, nbytes: int) -> tuple[int, int]:
    """Pull ColdLog from 0 of each queue until ``nbytes`` came or its end: (bytes, messages)."""
    got = [0, 0]

    async def puller(queue_id: int) -> None:
        conn = await RemotingClient.connect(address, timeout=5.0)
        offset = 0
        try:
            while got[0] < nbytes:
                ask = PullRequest(
                    group=group, topic=COLD_TOPIC, queue_id=queue_id, offset=offset, max_count=32
                )
                resp = await conn.request(ask.code, *ask.encode(), timeout=60)
                if resp.code != ResponseCode.SUCCESS:
                    return  # the queue's end (PULL_NOT_FOUND) or a refusal: this queue is done
                offset = int(str(resp.header["nextBeginOffset"]))
                got[0] += len(resp.body or b"")
                got[1] += int(str(resp.header.get("count", 0)))
        finally:
            conn.close()

    await asyncio.gather(*(puller(q) for q in range(QUEUES)))
    return got[0], got[1]


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="rmq-cold-read-bench-") as tmp:
        metrics = free_port()
        broker = BrokerProc(
            Path(tmp),
            segment_bytes=args.segment_mib << 20,
            extra_toml=(
                "scrub_bytes_per_s = 0\ntimer_enable = false\n"
                f"cold_read_bytes_per_s = {args.rate}\n"
            ),
        )
        broker.argv[broker.argv.index("--metrics-port") + 1] = str(metrics)
        try:
            broker.start_and_wait(timeout=120)
            conn = await RemotingClient.connect(broker.address, timeout=5.0)
            try:
                count = await fill(conn, args.fill_gib)
            finally:
                conn.close()
            if broker.stop() != 0:
                raise SystemExit(f"broker stop failed:\n{broker.log()[-2000:]}")
            broker.start_and_wait(timeout=300)
            # A few sends first: what the first send after a start reads is not the reader's.
            await produce(broker.address, 64)
            how = drop_cache(broker.data_dir, args.evict)
            log_bytes = count * (FILL_BODY + 200)
            share = cached_share(broker.data_dir, log_bytes)
            print(
                f"page cache dropped ({how}); of the first {log_bytes / (1 << 30):.2f} GiB of "
                f"CommitLog {share:.1%} cached (mincore), {load()}",
                flush=True,
            )
            alone: list[float] = []
            for phase in ("alone", "with the cold reader", "alone again"):
                before = counters(metrics)
                reader = None
                t0 = time.perf_counter()
                if phase == "with the cold reader":
                    want = int(args.read_gib * (1 << 30))
                    reader = asyncio.create_task(read_cold(broker.address, "catching-up", want))
                rate, p50, p99, sent = await produce(broker.address, args.messages, reader)
                line = (
                    f"producer {phase}: {rate:,.0f} msg/s  p50 {p50:.2f} ms  p99 {p99:.2f} ms "
                    f"({sent:,} sends)"
                )
                if reader is None:
                    alone.append(p99)
                    print(f"{line}  {load()}", flush=True)
                    continue
                nbytes, msgs = await reader
                dt = time.perf_counter() - t0
                after = counters(metrics)
                with_reader = p99
                print(
                    f"{line}  {load()}\n"
                    f"cold reader: {nbytes / (1 << 20) / dt:,.1f} MiB/s ({msgs / dt:,.0f} msg/s, "
                    f"{nbytes / (1 << 20):,.0f} MiB in {dt:.1f} s); cold reads "
                    f"{after['reads'] - before['reads']:,.0f}, "
                    f"{(after['bytes'] - before['bytes']) / (1 << 20):,.0f} MiB loaded off the "
                    f"loop, {after['throttled'] - before['throttled']:.1f} s throttled "
                    f"(cold_read_bytes_per_s {args.rate / (1 << 20):g} MiB/s)",
                    flush=True,
                )
            ratio = with_reader / statistics.median(alone)
            print(
                f"producer p99 with the cold reader / alone: {ratio:.2f} "
                f"({with_reader:.2f} ms against {statistics.median(alone):.2f} ms; target <= 1.5)",
                flush=True,
            )
        finally:
            broker.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fill-gib", type=float, default=2.0)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--rate", type=int, default=DEFAULT_RATE)
    parser.add_argument(
        "--read-gib",
        type=float,
        default=2.0,
        help="what the cold reader reads from the start of the log (at most what was filled); "
        "the producer sends --messages at a time until it is done",
    )
    parser.add_argument("--segment-mib", type=int, default=1024)
    parser.add_argument(
        "--evict",
        choices=("drop_caches", "fadvise"),
        default="drop_caches",
        help="drop the whole page cache where allowed (falling back to fadvise), or only the "
        "CommitLog files' pages (POSIX_FADV_DONTNEED)",
    )
    args = smoke.parse_args(
        parser, fill_gib=0.01, read_gib=0.005, messages=640, segment_mib=4, evict="fadvise"
    )
    run_async(lambda: main(args))
