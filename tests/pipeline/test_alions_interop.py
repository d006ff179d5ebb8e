"""What the classic Node.js client ali-ons sends through RocketMQ's remoting protocol (its
``nameSrv`` a controller, its sends through the broker's classic door) is read by the Spark
source, body, tags, keys and user property intact, at the queue, offset and message id ali-ons
was answered: the pipeline's half of the issue's
"read by our SDK, rmqctl and the Spark source" (tests/cluster/test_classic_alions.py reads them
with our SDK and rmqctl). The Spark session is the pipeline tests' shared one."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.alions import create_topic, run_alions
from tests.support.cluster import Cluster, controllers_started

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.multiprocess]

TOPIC = "AlionsToSpark"
COUNT = 6


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with controllers_started(tmp_path) as c:
        c.add_group("broker-a", 1)
        yield c


def test_what_alions_sends_is_read_by_the_spark_source(
    spark: SparkSession, cluster: Cluster, tmp_path: Path
) -> None:
    asyncio.run(create_topic(cluster, TOPIC, 2))
    sent = asyncio.run(run_alions(cluster, tmp_path, "produce", TOPIC, str(COUNT)))["sent"]
    assert len(sent) == COUNT
    by_key = {s["key"]: s for s in sent}

    rows = (
        spark.read.format("rmq")
        .option("controllers", cluster.controller_addresses)
        .option("topic", TOPIC)
        .option("includeProperties", "true")
        .load()
        .collect()
    )
    assert sorted(row["body"] for row in rows) == sorted(
        f"alions-{i}".encode() for i in range(COUNT)
    ), rows
    for row in rows:
        i = int(row["body"].decode().rsplit("-", 1)[1])
        assert row["topic"] == TOPIC
        assert row["tags"] == ("TagA" if i % 2 == 0 else "TagB"), row
        assert row["keys"] == f"key-{i}", row
        # The user property, and nothing of the client's or the broker's besides.
        assert dict(row["properties"]) == {"seq": str(i)}, row
        # Where ali-ons was told its message went, under the id it was given.
        s = by_key[f"key-{i}"]
        assert (row["queueId"], row["queueOffset"], row["msgId"]) == (
            s["queueId"],
            s["queueOffset"],
            s["msgId"],
        ), row
