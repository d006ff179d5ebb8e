"""The Kafka source's options added in issue 28 (item 6), against a real broker on the shared
local[2] session: ``assign`` (only the named queues), ``startingOffsetsByTimestampStrategy``
(error or latest), ``maxRecordsPerPartition``, the ``timestamp``/``timestampType`` columns and
the sink's ``queue`` column. Bad values fail on the driver, naming the option."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")

from pipeline.options import ReadOptions
from pipeline.rows import message_schema
from pipeline.stream_reader import RmqStreamReader
from tests.pipeline.conftest import fill, positions, produce, rmq_read
from tests.pipeline.test_pipeline_options import NoJobs
from tests.support.procs import BrokerProc
from tests.support.wait import wait_until

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.multiprocess]


def test_assign_reads_only_the_named_queues(spark: SparkSession, shared_broker: BrokerProc) -> None:
    address = shared_broker.address
    sent = fill(address, "OptAssign", 3, 30)
    other = fill(address, "OptAssign2", 2, 10)
    one = rmq_read(spark, address, assign='{"OptAssign": {"broker-a": [0, 2]}}')
    got = sorted((r["topic"], r["queueId"], r["queueOffset"]) for r in one.collect())
    assert got == sorted(("OptAssign", s.queue_id, s.queue_offset) for s in sent if s.queue_id != 1)
    assert one.rdd.getNumPartitions() == 2
    # One topic assigned: positions in the one-topic form, naming the assigned queues only.
    tail = rmq_read(
        spark,
        address,
        assign='{"OptAssign": {"broker-a": [2]}}',
        startingOffsets='{"broker-a": {"2": 5}}',
    )
    assert sorted(r["queueOffset"] for r in tail.collect()) == list(range(5, 10))
    # Several topics: by topic first, as with topics.
    both = rmq_read(
        spark, address, assign='{"OptAssign": {"broker-a": [1]}, "OptAssign2": {"broker-a": [0]}}'
    )
    got = sorted((r["topic"], r["queueId"], r["queueOffset"]) for r in both.collect())
    assert got == sorted(
        [("OptAssign", s.queue_id, s.queue_offset) for s in sent if s.queue_id == 1]
        + [("OptAssign2", s.queue_id, s.queue_offset) for s in other if s.queue_id == 0]
    )
    # Streaming: the offsets hold the assigned queues only.
    opts = ReadOptions.parse(
        {
            "controllers": address,
            "assign": '{"OptAssign": {"broker-a": [0, 2]}}',
            "startingOffsets": "earliest",
        },
        "stream",
    )
    stream = RmqStreamReader(opts, message_schema())
    start = stream.initialOffset()
    assert start == {"broker-a": {"0": 0, "2": 0}}
    ends = {str(q): sum(1 for s in sent if s.queue_id == q) for q in (0, 2)}
    assert stream.latestOffset(start, stream.getDefaultReadLimit()) == {"broker-a": ends}

    with NoJobs(spark, "bad-assign") as group:
        with pytest.raises(Exception, match=r"assign names broker-a/7, not a queue of topic"):
            rmq_read(spark, address, assign='{"OptAssign": {"broker-a": [0, 7]}}').count()
        with pytest.raises(Exception, match=r"startingOffsets names broker-a/1, not a queue"):
            rmq_read(
                spark,
                address,
                assign='{"OptAssign": {"broker-a": [0]}}',
                startingOffsets='{"broker-a": {"0": 0, "1": 0}}',
            ).count()
        with pytest.raises(Exception, match="options topic and assign exclude each other"):
            rmq_read(spark, address, topic="OptAssign", assign='{"OptAssign": {"broker-a": [0]}}')
        with pytest.raises(Exception, match="option assign must be a JSON object"):
            rmq_read(spark, address, assign="OptAssign:0")
        with pytest.raises(Exception, match=r"queues of OptAssign@broker-a must be a non-empty"):
            rmq_read(spark, address, assign='{"OptAssign": {"broker-a": []}}')
        assert group.jobs() == []


def test_a_start_by_time_past_every_message_fails_with_strategy_error(
    spark: SparkSession, shared_broker: BrokerProc
) -> None:
    from pyspark.sql import functions as F

    address = shared_broker.address
    fill(address, "OptStrategy", 2, 10)
    stamps = rmq_read(spark, address, topic="OptStrategy").select(F.unix_millis("storeTimestamp"))
    newest = max(r[0] for r in stamps.collect())
    wait_until(lambda: time.time() * 1000 > newest + 5, "the clock past the first round")
    asyncio.run(produce(address, "OptStrategy", 1, start=10))  # one queue gets a later one
    (late,) = [
        r
        for r in rmq_read(spark, address, topic="OptStrategy").collect()
        if r["body"] == bytearray(b"m10")
    ]
    quiet = 1 - late["queueId"]
    future = str(newest * 2)
    with NoJobs(spark, "strategy-error") as group:
        with pytest.raises(
            Exception, match=r"no message stored at or after the starting time in broker-a/0..1"
        ):
            rmq_read(
                spark,
                address,
                topic="OptStrategy",
                startingTimestamp=future,
                startingOffsetsByTimestampStrategy="error",
            ).count()
        per_queue = (
            f'{{"broker-a": {{"{late["queueId"]}": {newest + 1}, "{quiet}": {newest + 1}}}}}'
        )
        with pytest.raises(Exception, match=rf"starting time in broker-a/{quiet} \("):
            rmq_read(
                spark,
                address,
                topic="OptStrategy",
                startingOffsetsByTimestamp=per_queue,
                startingOffsetsByTimestampStrategy="ERROR",
            ).count()
        with pytest.raises(
            Exception, match="startingOffsetsByTimestampStrategy must be latest or error"
        ):
            rmq_read(spark, address, topic="OptStrategy", startingOffsetsByTimestampStrategy="fail")
        assert group.jobs() == []
    # latest (the default): such queues start at their end.
    for strategy in ({}, {"startingOffsetsByTimestampStrategy": "latest"}):
        df = rmq_read(spark, address, topic="OptStrategy", startingTimestamp=future, **strategy)
        assert df.count() == 0
    # error with a message at or after the time in every queue read: as latest.
    df = rmq_read(
        spark,
        address,
        assign=f'{{"OptStrategy": {{"broker-a": [{late["queueId"]}]}}}}',
        startingTimestamp=str(newest + 1),
        startingOffsetsByTimestampStrategy="error",
    )
    assert [bytes(r["body"]) for r in df.collect()] == [b"m10"]


def test_max_records_per_partition_splits_and_the_union_is_the_unsplit_read(
    spark: SparkSession, shared_broker: BrokerProc
) -> None:
    address = shared_broker.address
    fill(address, "OptMaxRecords", 1, 103)

    whole = positions(rmq_read(spark, address, topic="OptMaxRecords"))
    assert len(whole) == 103
    for options, sizes in (
        ({"maxRecordsPerPartition": "30"}, [25, 26, 26, 26]),
        ({"maxRecordsPerPartition": "200"}, [103]),
        ({"maxRecordsPerPartition": "30", "minPartitions": "6"}, [17, 17, 17, 17, 17, 18]),
        ({"maxRecordsPerPartition": "30", "minPartitions": "2"}, [25, 26, 26, 26]),
    ):
        df = rmq_read(spark, address, topic="OptMaxRecords", **options)
        assert sorted(df.rdd.glom().map(len).collect()) == sizes, options
        assert positions(df) == whole
    with pytest.raises(Exception, match="option maxRecordsPerPartition must be >= 1"):
        rmq_read(spark, address, topic="OptMaxRecords", maxRecordsPerPartition="0")


def test_the_timestamp_column_is_born_or_store_time_as_timestamp_type_says(
    spark: SparkSession, shared_broker: BrokerProc
) -> None:
    address = shared_broker.address
    fill(address, "OptTsType", 1, 5)
    born = rmq_read(spark, address, topic="OptTsType").collect()
    assert len(born) == 5
    assert all(r["timestamp"] == r["bornTimestamp"] and r["timestampType"] == 0 for r in born)
    stored = rmq_read(spark, address, topic="OptTsType", timestampType="store").collect()
    assert all(r["timestamp"] == r["storeTimestamp"] and r["timestampType"] == 1 for r in stored)
    with pytest.raises(Exception, match="option timestampType must be born or store"):
        rmq_read(spark, address, topic="OptTsType", timestampType="CreateTime")


def test_the_queue_column_sends_each_row_to_its_queue(
    spark: SparkSession, shared_broker: BrokerProc
) -> None:
    address = shared_broker.address
    fill(address, "OptQueue", 4, 0)

    def write(df: DataFrame) -> None:
        df.write.format("rmq").option("controllers", address).option("topic", "OptQueue").mode(
            "append"
        ).save()

    rows = spark.range(40).selectExpr(
        "concat('q-', cast(id AS string)) AS body",
        "cast(id % 3 AS int) AS queue",
        "CASE WHEN id % 2 = 0 THEN concat('g-', cast(id AS string)) END AS messageGroup",
    )
    write(rows)
    write(spark.createDataFrame([("by-name", "broker-a/3")], "body string, queue string"))
    got = {
        bytes(r["body"]).decode(): (r["queueId"], r["properties"].get("__SHARDINGKEY"))
        for r in rmq_read(spark, address, topic="OptQueue").collect()
    }
    expected = {f"q-{i}": (i % 3, f"g-{i}" if i % 2 == 0 else None) for i in range(40)}
    assert got == {**expected, "by-name": (3, None)}

    with pytest.raises(Exception, match=r"row 1 has queue 4, topic 'OptQueue' has 4 queues"):
        write(spark.createDataFrame([("x", 4)], "body string, queue int"))
    with pytest.raises(Exception, match=r"row 1 has queue 'broker-b/0', not a queue of topic"):
        write(spark.createDataFrame([("x", "broker-b/0")], "body string, queue string"))
    with NoJobs(spark, "bad-queue-type") as group:
        with pytest.raises(Exception, match=r"column 'queue' must be integer or long"):
            write(spark.createDataFrame([("x", 1.5)], "body string, queue double"))
        assert group.jobs() == []
    assert rmq_read(spark, address, topic="OptQueue").count() == 41  # the failures wrote nothing
