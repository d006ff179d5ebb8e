"""The ``rmq`` source's options against a real broker on the shared local[2] session: names
checked on the driver before any task, timestamps, minPartitions, minOffsetsPerTrigger with
maxTriggerDelay, the properties column, and JSON offsets that must name every queue."""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")

from tests.pipeline.conftest import (
    fill,
    positions,
    produce,
    rmq,
    rmq_read,
    rmq_stream,
    stream_once,
    stream_reader,
)
from tests.support.procs import BrokerProc
from tests.support.wait import wait_until

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.multiprocess]


class NoJobs:
    """Runs a block under its own Spark job group and tells whether any job ran in it."""

    def __init__(self, spark: SparkSession, name: str) -> None:
        self.sc = spark.sparkContext
        self.name = name

    def __enter__(self) -> NoJobs:
        self.sc.setJobGroup(self.name, self.name)
        return self

    def __exit__(self, *exc: object) -> None:
        self.sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]

    def jobs(self) -> list[int]:
        return list(self.sc.statusTracker().getJobIdsForGroup(self.name))


def test_misspelled_options_fail_on_the_driver_before_any_task(
    spark: SparkSession, shared_broker: BrokerProc
) -> None:
    address = shared_broker.address
    fill(address, "OptNames", 2, 10)
    with NoJobs(spark, "misspelled-read") as group:
        with pytest.raises(Exception, match=r"unknown option 'startingoffset'.*startingOffsets"):
            rmq(spark, address, "OptNames", startingOffset="latest").count()
        with pytest.raises(Exception, match=r"unknown option 'minpartition'.*minPartitions"):
            rmq(spark, address, "OptNames", minPartition="3").count()
        with pytest.raises(Exception, match=r"unknown option 'frobnicate'.*the options are"):
            rmq(spark, address, "OptNames", frobnicate="1").count()
        stream = (
            spark.readStream.format("rmq")
            .option("controllers", address)
            .option("topic", "OptNames")
            .option("maxOfsetsPerTrigger", "5")
        )
        with pytest.raises(Exception, match="did you mean maxOffsetsPerTrigger"):
            stream.load()
        df = rmq(spark, address, "OptNames")
        with pytest.raises(Exception, match=r"unknown option 'batchsise'.*batchSize"):
            df.select("body").write.format("rmq").option("controllers", address).option(
                "topic", "OptNames"
            ).option("batchSise", "10").mode("append").save()
        assert group.jobs() == []  # nothing reached a task
    with NoJobs(spark, "well-spelled-read") as control:  # the check sees jobs when they run
        assert rmq(spark, address, "OptNames", startingOffsets="earliest").count() == 10
        assert control.jobs() != []


def _millis(df: DataFrame) -> list[tuple[int, int, int]]:
    from pyspark.sql import functions as F

    rows = df.select("queueId", "queueOffset", F.unix_millis("storeTimestamp").alias("ts"))
    return sorted((r["queueId"], r["queueOffset"], r["ts"]) for r in rows.collect())


def test_timestamps_pick_the_first_message_stored_at_or_after(
    spark: SparkSession, shared_broker: BrokerProc
) -> None:
    address = shared_broker.address
    fill(address, "OptTime", 2, 20)
    everything = _millis(rmq(spark, address, "OptTime"))
    newest = max(ts for _, _, ts in everything)
    # The second round is stored strictly later than every message of the first.
    wait_until(lambda: time.time() * 1000 > newest + 5, "the clock past the first round")
    asyncio.run(produce(address, "OptTime", 20, start=20))
    everything = _millis(rmq(spark, address, "OptTime"))
    assert len(everything) == 40
    cut = min(ts for _, _, ts in everything if ts > newest)
    later = [r for r in everything if r[2] >= cut]
    earlier = [r for r in everything if r[2] < cut]
    assert len(later) == 20 and len(earlier) == 20

    assert _millis(rmq(spark, address, "OptTime", startingTimestamp=str(cut))) == later
    assert _millis(rmq(spark, address, "OptTime", endingTimestamp=str(cut))) == earlier
    # Past every message: the queues' ends, so nothing.
    assert rmq(spark, address, "OptTime", startingTimestamp=str(newest * 2)).count() == 0
    # Per queue: queue 0 from the cut, queue 1 from the beginning (timestamp 0).
    per_queue = f'{{"broker-a": {{"0": {cut}, "1": 0}}}}'
    got = _millis(rmq(spark, address, "OptTime", startingOffsetsByTimestamp=per_queue))
    assert got == [r for r in everything if r[0] == 1 or r[2] >= cut]
    got = _millis(rmq(spark, address, "OptTime", endingOffsetsByTimestamp=per_queue))
    assert got == [r for r in everything if r[0] == 0 and r[2] < cut]

    # Every queue must be named, as Kafka requires every partition.
    with pytest.raises(Exception, match=r"must name every queue.*missing: broker-a/1"):
        rmq(
            spark, address, "OptTime", startingOffsetsByTimestamp=f'{{"broker-a": {{"0": {cut}}}}}'
        ).count()
    with pytest.raises(Exception, match=r"startingOffsets must name every queue.*broker-a/0"):
        rmq(spark, address, "OptTime", startingOffsets='{"broker-a": {"1": 3}}').count()
    with pytest.raises(Exception, match="startingOffsets and startingTimestamp exclude"):
        rmq(spark, address, "OptTime", startingOffsets="earliest", startingTimestamp="1")


def test_min_partitions_splits_a_queue_and_the_union_is_the_unsplit_read(
    spark: SparkSession, shared_broker: BrokerProc
) -> None:
    address = shared_broker.address
    fill(address, "OptSplit", 1, 103)
    whole = rmq(spark, address, "OptSplit")
    assert whole.rdd.getNumPartitions() == 1
    split = rmq(spark, address, "OptSplit", minPartitions="4")
    assert split.rdd.getNumPartitions() == 4
    sizes = split.rdd.glom().map(len).collect()
    assert sorted(sizes) == [25, 26, 26, 26]
    assert positions(split) == positions(whole) and len(positions(whole)) == 103
    # Fewer partitions asked than queues with data: nothing is split.
    assert rmq(spark, address, "OptSplit", minPartitions="1").rdd.getNumPartitions() == 1


def test_the_properties_column_can_be_left_out(
    spark: SparkSession, shared_broker: BrokerProc
) -> None:
    address = shared_broker.address
    fill(address, "OptProps", 1, 5)
    assert "properties" in rmq(spark, address, "OptProps").columns
    for name in ("includeProperties", "includeHeaders"):
        df = rmq(spark, address, "OptProps", **{name: "false"})
        assert "properties" not in df.columns
        got = sorted((r["keys"], r["tags"]) for r in df.collect())
        assert got == sorted((f"k{i}", "even" if i % 2 == 0 else "odd") for i in range(5))
    with pytest.raises(Exception, match="includeProperties and includeHeaders disagree"):
        rmq(spark, address, "OptProps", includeProperties="true", includeHeaders="false")


@pytest.fixture
def min_topic(shared_broker: BrokerProc) -> Iterator[str]:
    fill(shared_broker.address, "OptMin", 2, 4)
    yield "OptMin"


def test_min_offsets_per_trigger_waits_for_rows_or_the_delay(
    shared_broker: BrokerProc, min_topic: str
) -> None:
    address = shared_broker.address
    patient = stream_reader(
        address, min_topic, startingOffsets="earliest", minOffsetsPerTrigger="10"
    )
    start = patient.initialOffset()
    limit: Any = patient.getDefaultReadLimit()
    assert type(limit).__name__ == "ReadMinRows" and limit.min_rows == 10
    # 4 new messages, fewer than 10, and the 15-minute default delay not passed: no batch.
    assert patient.latestOffset(start, limit) == start
    asyncio.run(produce(address, min_topic, 8, start=4))
    end = patient.latestOffset(start, limit)
    assert sum(end["broker-a"].values()) == 12  # now 12 >= 10: one batch of everything
    # maxTriggerDelay passed (0 ms here): a batch even with fewer rows.
    eager = stream_reader(
        address,
        min_topic,
        startingOffsets="earliest",
        minOffsetsPerTrigger="100",
        maxTriggerDelay="0ms",
    )
    first = eager.initialOffset()
    assert sum(eager.latestOffset(first, eager.getDefaultReadLimit())["broker-a"].values()) == 12
    # Trigger.AvailableNow ignores the minimum (it must finish).
    now = stream_reader(address, min_topic, startingOffsets="earliest", minOffsetsPerTrigger="100")
    begin = now.initialOffset()
    now.prepareForTriggerAvailableNow()
    assert sum(now.latestOffset(begin, now.getDefaultReadLimit())["broker-a"].values()) == 12


def test_register_points_workers_at_this_interpreter(
    spark: SparkSession, shared_broker: BrokerProc, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pipeline
    from pipeline.errors import PipelineError

    address = shared_broker.address
    fill(address, "OptPython", 1, 3)
    sc = spark.sparkContext
    before = sc.pythonExec
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    try:
        # What a script run as .venv/bin/python without the venv activated gets: a worker
        # interpreter (python3 from PATH) that has neither pyspark nor rmq-py.
        sc.pythonExec = "/nonexistent/python3"
        pipeline.register(spark)
        assert sc.pythonExec == sys.executable
        assert rmq(spark, address, "OptPython").count() == 3
        monkeypatch.setenv("PYSPARK_PYTHON", "/nonexistent/python3")
        with pytest.raises(
            PipelineError,
            match=rf"PYSPARK_PYTHON=/nonexistent/python3 is not an interpreter on this machine: "
            rf"unset it or set PYSPARK_PYTHON={re.escape(sys.executable)} ",
        ):
            pipeline.register(spark)
    finally:
        monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
        sc.pythonExec = before
        pipeline.register(spark)


def test_several_topics_by_list_or_pattern(
    spark: SparkSession, shared_broker: BrokerProc, tmp_path: Any
) -> None:
    address = shared_broker.address
    fill(address, "MultiA", 2, 10)
    fill(address, "MultiB", 1, 5)
    fill(address, "OtherMulti", 1, 3)

    def read(**options: str) -> DataFrame:
        return rmq_read(spark, address, **options)

    def per_topic(df: DataFrame) -> dict[str, int]:
        return {r["topic"]: r["count"] for r in df.groupBy("topic").count().collect()}

    assert per_topic(read(topics="MultiA, MultiB")) == {"MultiA": 10, "MultiB": 5}
    assert per_topic(read(topicPattern="Multi[AB]")) == {"MultiA": 10, "MultiB": 5}
    # Offsets by topic, every topic and queue named; minPartitions shares over all topics.
    starting = '{"MultiA": {"broker-a": {"0": 2, "1": -2}}, "MultiB": {"broker-a": {"0": 4}}}'
    assert per_topic(read(topics="MultiA,MultiB", startingOffsets=starting)) == {
        "MultiA": 8,
        "MultiB": 1,
    }
    split = read(topics="MultiA,MultiB", minPartitions="6")
    assert split.rdd.getNumPartitions() == 6 and split.count() == 15
    with pytest.raises(Exception, match=r"must name every topic read; missing: 'MultiB'"):
        read(
            topics="MultiA,MultiB", startingOffsets='{"MultiA": {"broker-a": {"0": 0, "1": 0}}}'
        ).count()
    with pytest.raises(Exception, match="names Nope, not a topic this query reads"):
        read(topicPattern="Multi[AB]", startingOffsets='{"Nope": {}}').count()
    with pytest.raises(Exception, match="options topic and topics exclude each other"):
        read(topic="MultiA", topics="MultiB")
    with pytest.raises(Exception, match="topicPattern '\\(' is not a regular expression"):
        read(topicPattern="(")

    # Streaming over a pattern: offsets kept by topic in the checkpoint.
    frame = rmq_stream(spark, address, topicPattern="Multi[AB]", startingOffsets="earliest")
    query = stream_once(frame, tmp_path / "checkpoint", "multi_topics")
    assert query.exception() is None
    assert per_topic(spark.sql("select topic from multi_topics")) == {"MultiA": 10, "MultiB": 5}
    end = json.loads(query.lastProgress["sources"][0]["endOffset"])
    assert end == {"MultiA": {"broker-a": {"0": 5, "1": 5}}, "MultiB": {"broker-a": {"0": 5}}}
