"""The ``rmq`` sink on the shared local[2] session and broker: rows with a message group land on
the queue its hash picks, in order per group (5k rows here, the issue's 100k in a soak variant); a failed write leaves what was acknowledged and a
rerun writes it again (at-least-once)."""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")

from client.routes import MessageQueue
from pipeline.queue_sender import queue_for
from tests.pipeline.conftest import create_topic, rmq
from tests.support.procs import BrokerProc

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.multiprocess]


def write(df: DataFrame, address: str, topic: str, **options: str) -> None:
    writer = df.write.format("rmq").option("controllers", address).option("topic", topic)
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.mode("append").save()


def keyed_write_lands_by_hash(spark: SparkSession, address: str, rows: int, topic: str) -> None:
    asyncio.run(create_topic(address, topic, 4))
    groups = 50
    # Two partitions of consecutive ids; keys carry the partition, since a group's order holds
    # within the task that wrote it.
    df = spark.range(0, rows, 1, 2).selectExpr(
        "id",
        f"concat('user-', cast(id % {groups} AS string)) AS messageGroup",
        "concat('m', cast(id AS string)) AS body",
        "concat(cast(spark_partition_id() AS string), ':', cast(id AS string)) AS keys",
    )
    write(df, address, topic, batchSize="500")
    got = rmq(spark, address, topic).select("queueId", "queueOffset", "keys").collect()
    assert len(got) == rows and len({r["keys"] for r in got}) == rows
    queues = [MessageQueue("broker-a", q) for q in range(4)]
    by_group: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for r in got:
        task, _, number = r["keys"].partition(":")
        i = int(number)
        group = f"user-{i % groups}"
        assert r["queueId"] == queue_for(group.encode(), queues).queue_id, (group, r)
        by_group.setdefault((group, task), []).append((r["queueOffset"], i))
    assert len({queue_for(f"user-{g}".encode(), queues) for g in range(groups)}) == 4
    assert len({task for _, task in by_group}) == 2
    for group, seen in by_group.items():
        ids = [i for _, i in sorted(seen)]
        assert ids == sorted(ids), group  # one group keeps its order in its queue


def test_message_groups_land_on_the_queue_their_hash_picks_in_order(
    spark: SparkSession, shared_broker: BrokerProc
) -> None:
    keyed_write_lands_by_hash(spark, shared_broker.address, 5_000, "SinkKeyed")


@pytest.mark.soak
def test_message_groups_land_by_hash_100k_rows(
    spark: SparkSession, shared_broker: BrokerProc
) -> None:
    keyed_write_lands_by_hash(spark, shared_broker.address, 100_000, "SinkKeyed100k")


def test_a_failed_write_keeps_what_was_acknowledged_and_a_rerun_writes_it_again(
    spark: SparkSession, shared_broker: BrokerProc
) -> None:
    address = shared_broker.address
    asyncio.run(create_topic(address, "SinkAtLeastOnce", 2))

    def rows(bad: bool) -> DataFrame:
        body = "CASE WHEN id = 500 THEN NULL ELSE cast(id AS string) END" if bad else "id"
        return (
            spark.range(1000)
            .selectExpr(f"cast({body} AS string) AS body", "cast(id AS string) AS keys")
            .coalesce(1)
        )

    # Row 501 has no body: the task fails after its first 500 rows were acknowledged.
    with pytest.raises(Exception) as failed:
        write(rows(bad=True), address, "SinkAtLeastOnce", batchSize="100")
    found = re.search(
        r"write task failed after 500 rows: row 501 has a null body\. (\d+) messages were "
        r"acknowledged and stay in the topic",
        str(failed.value),
    )
    assert found is not None, str(failed.value)[:2000]
    acknowledged = int(found.group(1))
    assert acknowledged == 500
    first = sorted(int(r["keys"]) for r in rmq(spark, address, "SinkAtLeastOnce").collect())
    assert first == list(range(500))  # what was acknowledged stayed
    # Run again (as Spark's task retry or a rerun of the job does): every row at least once,
    # the acknowledged ones twice.
    write(rows(bad=False), address, "SinkAtLeastOnce", batchSize="100")
    keys = [int(r["keys"]) for r in rmq(spark, address, "SinkAtLeastOnce").collect()]
    assert set(keys) == set(range(1000)) and len(keys) == 1500
