"""Spark pipeline benchmark: batch read, batch write and a streaming copy of a topic.

Against a real broker subprocess on loopback holding N messages of SIZE bytes (default 200k of
1 KiB over 8 queues; ``--full``: 1M), in one local Spark session (``--master``, default
``local[*]``):

  1. ``rmq -> count()``: read the topic and count the rows,
  2. ``rmq -> parquet``: read the topic and write it to a local Parquet directory,
  3. ``rmq -> noop``: read the topic, every column materialised, written nowhere,
  4. ``parquet -> noop`` (the read ceiling): read those messages back from the local Parquet
     directory, every column materialised (Spark's own columnar reader, no network),
  5. ``parquet -> rmq``: batch write of the N bodies to another topic (PySpark's Arrow writer,
     SEND_BATCH_MESSAGE), against the target of 50,000 msg/s,
  6. ``parquet -> rmq (messageGroup)``: the same with a message group per row (1000 groups),
     each group's queue picked by hash,
  7. ``rmq -> rmq streaming``: a streaming query (Trigger.AvailableNow) copying the topic to
     another topic.

Prints msg/s and MB/s (of bodies) for each, reads against the read ceiling and writes against
the write target. Nothing is asserted: these are figures. Without the spark extra only the fill
is measured (the line says what is missing). Each figure is the best of
``--repeat`` runs after one small warm-up query.

    python bench/pipeline_bench.py [--messages N | --full] [--size BYTES] [--queues Q]
        [--master URL] [--repeat R]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import smoke
from client import Producer
from client.admin import Admin
from client.message import Message
from tests.support.procs import BrokerProc

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TOPIC = "PipelineBench"
WRITE_TARGET = 50_000.0
SEGMENT_CONFIG = """\
commitlog_segment_bytes = 268435456
consumequeue_segment_entries = 300000
"""


async def create_topics(address: str, queues: int, *names: str) -> None:
    async with Admin(address) as admin:
        for name in names:
            await admin.create_topic(name, queues)


async def fill(address: str, count: int, size: int, queues: int) -> float:
    """Send ``count`` messages in batches of 64, 16 batches in flight; returns seconds."""
    await create_topics(address, queues, TOPIC)
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
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--full", action="store_true", help="1M messages (the issue's size)")
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--queues", type=int, default=8)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--repeat", type=int, default=1)
    args = smoke.parse_args(parser, messages=300, master="local[2]")
    if args.full:
        args.messages = 1_000_000

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import pipeline
    from pipeline.errors import PipelineError
    from pipeline.session import spark_session_class

    spark_class: type[SparkSession] | None = None
    try:
        spark_class = spark_session_class()
    except PipelineError as exc:  # the fill still runs and prints its figure
        missing = str(exc)

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
            if spark_class is None:
                print(f"the Spark phases are skipped: {missing}", flush=True)
                return 0
            spark = (
                spark_class.builder.master(args.master)
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

            warm_end = {"broker-a": {str(q): 100 for q in range(args.queues)}}
            warm = (
                spark.read.format("rmq")
                .option("controllers", broker.address)
                .option("topic", TOPIC)
                .option("endingOffsets", json.dumps(warm_end))
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
            writes: dict[str, float] = {}
            outs = [f"{TOPIC}Out{i}" for i in range(args.repeat * 2 + 1)]
            asyncio.run(create_topics(broker.address, args.queues, *outs, f"{TOPIC}Copy"))
            names = iter(outs)

            def write(keyed: bool) -> None:
                df = spark.read.parquet(parquet).selectExpr(
                    "body", *(["concat('g', queueOffset % 1000) AS messageGroup"] if keyed else [])
                )
                df.write.format("rmq").option("controllers", broker.address).option(
                    "topic", next(names)
                ).option("batchSize", "256").mode("append").save()

            # warm the writers' Python workers on a few rows
            spark.read.parquet(parquet).limit(1000).select("body").write.format("rmq").option(
                "controllers", broker.address
            ).option("topic", outs[-1]).mode("append").save()
            writes["parquet -> rmq"] = best(args.repeat, lambda: write(False))
            writes["parquet -> rmq (messageGroup)"] = best(args.repeat, lambda: write(True))

            def copy() -> None:
                query = (
                    spark.readStream.format("rmq")
                    .option("controllers", broker.address)
                    .option("topic", TOPIC)
                    .option("startingOffsets", "earliest")
                    .load()
                    .select("body", "keys", "tags", "properties")
                    .writeStream.format("rmq")
                    .option("controllers", broker.address)
                    .option("topic", f"{TOPIC}Copy")
                    .option("checkpointLocation", str(tmp / f"copy-{time.monotonic_ns()}"))
                    .trigger(availableNow=True)
                    .start()
                )
                query.awaitTermination()
                if query.exception() is not None:
                    raise SystemExit(f"streaming copy failed: {query.exception()}")

            writes["rmq -> rmq streaming"] = best(1, copy)
            spark.stop()
        finally:
            broker.stop()

    print(
        f"spark {spark.version}, master {args.master} ({parallelism} cores), best of {args.repeat}"
    )
    ceiling = n / results["parquet -> noop (ceiling)"]

    def line(name: str, secs: float, ratio: str) -> None:
        rate = n / secs
        print(
            f"{name:<28} {rate:>10,.0f} msg/s {n * args.size / secs / 1e6:>8.1f} MB/s"
            f"  {secs:6.1f} s  {ratio}",
            flush=True,
        )

    for name, secs in results.items():
        line(name, secs, f"ratio to ceiling {n / secs / ceiling:.2f}")
    for name, secs in writes.items():
        line(name, secs, f"ratio to target {WRITE_TARGET:,.0f} msg/s {n / secs / WRITE_TARGET:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
