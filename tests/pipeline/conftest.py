"""Fixtures of the pipeline tests: one local[2] SparkSession and one broker for the whole session.

Spark takes tens of seconds to start on a small machine, so every Spark test shares the session
(each uses its own topics). The shared broker is a real subprocess, stopped by its PID at the end
(also when tests fail). Python workers run this interpreter (PYSPARK_PYTHON).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from client import Producer
from client.admin import Admin
from client.message import SendResult
from pipeline.options import ReadOptions
from pipeline.rows import message_schema
from pipeline.stream_reader import RmqStreamReader
from tests.support.procs import BrokerProc, started

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    pytest.importorskip("pyspark", reason="the spark extra is not installed")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import pipeline

    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("rmq-pipeline-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.driver.memory", "1g")
        .config("spark.sql.streaming.numRecentProgressUpdates", "1000")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    pipeline.register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProc]:
    """One lone broker (development mode: it is also the bootstrap address) for the session."""
    with started(BrokerProc(tmp_path_factory.mktemp("pipeline-broker"))) as proc:
        yield proc


async def create_topic(address: str, topic: str, queues: int) -> None:
    async with Admin(address) as admin:
        await admin.create_topic(topic, queues)


async def produce(
    address: str,
    topic: str,
    count: int,
    *,
    start: int = 0,
    body_size: int = 0,
    properties: bool = True,
) -> list[SendResult]:
    """Send ``count`` messages ``m<i>`` (padded to ``body_size``) with keys ``k<i>``, tag
    ``even``/``odd`` and a property ``i``; returns where each went."""
    results = []
    async with Producer(address) as producer:
        for i in range(start, start + count):
            body = f"m{i}".encode().ljust(body_size, b".")
            props = {"i": str(i)} if properties else None
            tag = "even" if i % 2 == 0 else "odd"
            results.append(await producer.send(topic, body, f"k{i}", tag, props))
    return results


def fill(address: str, topic: str, queues: int, count: int, **kw: Any) -> list[SendResult]:
    """Create ``topic`` and send ``count`` messages (synchronously, for sync tests)."""

    async def go() -> list[SendResult]:
        await create_topic(address, topic, queues)
        return await produce(address, topic, count, **kw)

    return asyncio.run(go())


def rmq(spark: SparkSession, address: str, topic: str, **options: str) -> DataFrame:
    """``spark.read.format("rmq")`` of ``topic`` at the controllers (or lone broker) ``address``,
    with ``options``."""
    return rmq_read(spark, address, topic=topic, **options)


def rmq_read(spark: SparkSession, address: str, **options: str) -> DataFrame:
    """``spark.read.format("rmq")`` at the controllers (or lone broker) ``address``, with
    ``options`` (topic, topics, topicPattern or assign among them)."""
    reader = spark.read.format("rmq").option("controllers", address)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def positions(df: DataFrame) -> list[tuple[str, int]]:
    """The message id and queue offset of each row of ``df``, sorted."""
    return sorted((r["msgId"], r["queueOffset"]) for r in df.collect())


def rmq_stream(spark: SparkSession, address: str, **options: str) -> DataFrame:
    """``spark.readStream.format("rmq")`` at the controllers (or lone broker) ``address``, with
    ``options`` (topic or topicPattern among them)."""
    reader = spark.readStream.format("rmq").option("controllers", address)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def stream_reader(address: str, topic: str, **options: str) -> RmqStreamReader:
    """The streaming source's reader (no Spark) of ``topic`` at ``address``, with ``options``."""
    opts = ReadOptions.parse({"controllers": address, "topic": topic, **options}, "stream")
    return RmqStreamReader(opts, message_schema())


def stream_once(frame: DataFrame, checkpoint: Path, memory: str | None = None) -> StreamingQuery:
    """``frame`` streamed through what is there now (availableNow) into the memory table
    ``memory`` (without one, the noop sink), checkpointed in ``checkpoint``: the query, waited
    for (240 s at most)."""
    writer = frame.writeStream
    writer = writer.format("memory").queryName(memory) if memory else writer.format("noop")
    query = writer.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    query.awaitTermination(240)
    return query


def small_retention_config(directory: Path) -> Path:
    """64 KiB CommitLog segments deleted once full and 0.36 s old."""
    path = directory / "retention.toml"
    directory.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "commitlog_segment_bytes = 65536\n"
        "consumequeue_segment_entries = 64\n"
        "retention_hours = 0.0001\n"
        "retention_check_interval_ms = 100\n"
    )
    return path
