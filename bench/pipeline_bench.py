"""Spark pipeline benchmark: a batch read of a topic from one broker.

Against a real broker subprocess on loopback holding N messages of SIZE bytes (default 1M of
1 KiB over 8 queues), in one local Spark session (``--master``, default ``local[*]``):

  1. ``rmq -> count()``: read the topic and count the rows,
  2. ``rmq -> parquet``: read the topic and write it to a local Parquet directory,
  3. ``rmq -> noop``: read the topic, every column materialised, written nowhere,
  4. ``parquet -> noop`` (the ceiling): read those messages back from the local Parquet
     directory, every column materialised (Spark's own columnar reader, no network).

Prints msg/s and MB/s (of bodies) for each and the ratios to the ceiling. Nothing is asserted:
these are figures. Each figure is the best of ``--repeat`` runs after one small warm-up query.

    python bench/pipeline_bench.py [--messages N] [--size BYTES] [--queues Q] [--master URL]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from client import Producer
from client.admin import Admin
from client.message import Message
from tests.support.procs import BrokerProc

TOPIC = "PipelineBench"
SEGMENT_CONFIG = """\
commitlog_segment_bytes = 268435456
consumequeue_segment_entries = 300000
"""


async def fill(address: str, count: int, size: int, queues: int) -> float:
    """Send ``count`` messages in batches of 64, 16 batches in flight; returns seconds."""
    async with Admin(address) as admin:
        await admin.create_topic(TOPIC, queues)
    body = os.urandom(size)
    batch = [Message(body=body, keys="") for _ in range(64)]
    started = time.perf_counter()
    async with Producer(address, send_timeout=30, send_deadline=30) as producer:
        sem = asyncio.Semaphore(16)

        async def one(n: int) -> None:
            async with sem:
                await producer.send_batch(TOPIC, batch[:n])

        tasks = []
        left = count
        while left > 0:
            n = min(64, left)
            tasks.append(asyncio.ensure_future(one(n)))
            left -= n
            if len(tasks) >= 512:
                await asyncio.gather(*tasks)
                tasks.clear()
        await asyncio.gather(*tasks)
    return time.perf_counter() - started


def best(repeat: int, run: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--queues", type=int, default=8)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import pipeline

    with tempfile.TemporaryDirectory(prefix="pipeline-bench-") as tmp_dir:
        tmp = Path(tmp_dir)
        config = tmp / "broker.toml"
        config.write_text(SEGMENT_CONFIG)
        broker = BrokerProc(tmp, extra=["--config", str(config)])
        try:
            broker.start_and_wait()
            seconds = asyncio.run(fill(broker.address, args.messages, args.size, args.queues))
            print(
                f"filled {args.messages:,} x {args.size} B over {args.queues} queues in "
                f"{seconds:.1f} s ({args.messages / seconds:,.0f} msg/s)",
                flush=True,
            )
            spark = (
                SparkSession.builder.master(args.master)
                .appName("pipeline-bench")
                .config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false")
                .config("spark.sql.shuffle.partitions", "4")
                .config("spark.driver.memory", "2g")
                .getOrCreate()
            )
            spark.sparkContext.setLogLevel("ERROR")
            pipeline.register(spark)
            parallelism = spark.sparkContext.defaultParallelism

            def source() -> object:
                return (
                    spark.read.format("rmq")
                    .option("controllers", broker.address)
                    .option("topic", TOPIC)
                    .load()
                )

            warm = (
                spark.read.format("rmq")
                .option("controllers", broker.address)
                .option("topic", TOPIC)
                .option("endingOffsets", '{"broker-a": {"0": 1000}}')
                .load()
            )
            warm.count()
            parquet = str(tmp / "messages.parquet")
            n = args.messages
            results: dict[str, float] = {}

            def count() -> None:
                got = source().count()  # type: ignore[attr-defined]
                if got != n:
                    raise SystemExit(f"count() saw {got} messages, not {n}")

            results["rmq -> count()"] = best(args.repeat, count)
            results["rmq -> parquet"] = best(
                args.repeat,
                lambda: source().write.mode("overwrite").parquet(parquet),  # type: ignore[attr-defined]
            )
            results["rmq -> noop"] = best(
                args.repeat,
                lambda: source().write.format("noop").mode("overwrite").save(),  # type: ignore[attr-defined]
            )
            spark.read.parquet(parquet).write.format("noop").mode("overwrite").save()  # warm
            results["parquet -> noop (ceiling)"] = best(
                args.repeat,
                lambda: spark.read.parquet(parquet).write.format("noop").mode("overwrite").save(),
            )
            spark.stop()
        finally:
            broker.stop()

    print(
        f"spark {spark.version}, master {args.master} ({parallelism} cores), best of {args.repeat}"
    )
    ceiling = n / results["parquet -> noop (ceiling)"]
    for name, secs in results.items():
        rate = n / secs
        print(
            f"{name:<28} {rate:>10,.0f} msg/s {n * args.size / secs / 1e6:>8.1f} MB/s"
            f"  {secs:6.1f} s  ratio to ceiling {rate / ceiling:.2f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
