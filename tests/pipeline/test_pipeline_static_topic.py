"""A static topic read by Spark (the shared local[2] session) after one of its queues moved:
three controllers, broker-a and broker-b (one broker each), logical queue 1 moved from broker-a
to broker-b between two rounds of sends.

A batch read shows each message once, by logical queue and logical offset (0, 1, 2, ... per
queue, queue 1's second round on broker-b from the seal on); a streaming query with
``groupId`` reads the same, checkpoints logical offsets and commits them as the group's, so
``rmqctl consumerProgress`` shows the query's logical lag at 0. A write with message groups
hashes them over the logical queues, as the SDK producer does (none to the sealed item).
"""

from __future__ import annotations

import asyncio
import json
import zlib
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")

from click.testing import CliRunner

from client import Producer
from rmqctl.cli import cli
from tests.cluster.support import masters_of
from tests.pipeline.conftest import rmq_stream, stream_once
from tests.support.cluster import Cluster, controllers_started
from tests.support.wait import wait_until

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.multiprocess]

TOPIC = "SparkStatic"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with controllers_started(tmp_path) as c:
        c.add_group("broker-a", 1)
        c.add_group("broker-b", 1)
        yield c


def rmqctl(*args: str) -> tuple[int, str]:
    done = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return done.exit_code, done.stdout + done.stderr


async def fill(cluster: Cluster) -> tuple[set[bytes], int]:
    """Two rounds of 30 sends with queue 1 moved in between; the bodies and the seal."""
    addrs = cluster.controller_addresses
    await masters_of(cluster, "broker-a", "broker-b")
    code, out = await asyncio.to_thread(
        rmqctl, "updateStaticTopic", "-a", addrs, "-t", TOPIC, "-q", "2", "-b", "broker-a"
    )
    assert code == 0, out
    bodies: set[bytes] = set()

    async def send(first: int) -> None:
        async with Producer(addrs, retries=6) as producer:
            for n in range(first, first + 30):
                body = f"s-{n}".encode()
                await producer.send(TOPIC, body)
                bodies.add(body)

    await send(0)
    code, out = await asyncio.to_thread(
        rmqctl, "--json", "remapStaticTopic", "-a", addrs, "-t", TOPIC, "-q", "1", "-b", "broker-b"
    )
    assert code == 0, out
    seal = int(json.loads(out)["queues"][1]["items"][0]["logicalEnd"])
    await send(30)
    return bodies, seal


def check_rows(rows: list[Any], bodies: set[bytes], seal: int) -> None:
    assert sorted(bytes(r["body"]) for r in rows) == sorted(bodies)
    by_queue: dict[int, list[int]] = defaultdict(list)
    for r in rows:
        by_queue[r["queueId"]].append(r["queueOffset"])
        moved = r["queueId"] == 1 and r["queueOffset"] >= seal
        assert r["brokerName"] == ("broker-b" if moved else "broker-a"), r
    assert sorted(by_queue) == [0, 1]
    for offsets in by_queue.values():
        assert sorted(offsets) == list(range(len(offsets)))
    assert len(by_queue[1]) > seal > 0


def test_spark_reads_a_moved_static_topic_by_logical_queue(
    spark: SparkSession, cluster: Cluster, tmp_path: Path
) -> None:
    addrs = cluster.controller_addresses
    bodies, seal = asyncio.run(fill(cluster))

    def read() -> Any:
        return spark.read.format("rmq").option("controllers", addrs).option("topic", TOPIC)

    check_rows(read().load().collect(), bodies, seal)

    frame = rmq_stream(
        spark, addrs, topic=TOPIC, startingOffsets="earliest", groupId="spark-static"
    )
    query = stream_once(frame, tmp_path / "checkpoint", "static_memory")
    assert not query.isActive and query.exception() is None
    check_rows(spark.sql("select * from static_memory").collect(), bodies, seal)
    end = json.loads([p for p in query.recentProgress if p["numInputRows"]][-1]["sources"][0]
                     ["endOffset"])  # fmt: skip
    assert sum(end["%LOGICAL%"].values()) == len(bodies)

    def caught_up() -> Any:
        code, out = rmqctl(
            "--json", "consumerProgress", "-a", addrs, "-g", "spark-static", "-t", TOPIC
        )
        doc = json.loads(out) if code == 0 else None
        return doc if doc and doc["totalLag"] == 0 and len(doc["queues"]) == 2 else None

    doc = wait_until(caught_up, "the query's logical offsets committed", 30, interval=0.3)
    assert {(q["queueId"], q["consumerOffset"], q["logical"]) for q in doc["queues"]} == {
        (int(q), o, True) for q, o in end["%LOGICAL%"].items()
    }

    # Message groups go to the logical queue the SDK producer picks for them. Before the fix
    # they were hashed over every physical queue of the route: the sealed item, and queues no
    # item maps (the first send can make broker-a create the topic with its default count),
    # where 14 of these 16 were acknowledged and never read by logical queue.
    groups = [f"g{i}" for i in range(8)]
    spark.createDataFrame(
        [(f"w-{g}-{n}", g) for g in groups for n in range(2)], "body string, messageGroup string"
    ).write.format("rmq").option("controllers", addrs).option("topic", TOPIC).mode("append").save()
    written = [r for r in read().load().collect() if bytes(r["body"]).startswith(b"w-")]
    assert len(written) == 2 * len(groups)
    for r in written:
        group = bytes(r["body"]).decode().split("-")[1]
        assert r["queueId"] == zlib.crc32(group.encode()) % 2, r
