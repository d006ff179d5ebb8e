"""A streaming query with ``groupId`` on the shared local[2] session and broker: its processed
offsets are committed as the group's, so ``rmqctl consumerProgress`` shows its lag; its progress
gives the Kafka source's offsets-behind-latest figures."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")

from click.testing import CliRunner

from pipeline.progress import offsets_behind
from rmqctl.cli import cli as rmqctl
from tests.pipeline.conftest import fill, produce, rmq_stream, stream_once
from tests.support.procs import BrokerProc
from tests.support.wait import wait_until

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.multiprocess]


def progress(address: str, group: str) -> dict[str, Any]:
    done = CliRunner().invoke(
        rmqctl, ["--json", "consumerProgress", "-a", address, "-g", group, "-t", "GroupLag"]
    )
    assert done.exit_code == 0, done.output
    doc: dict[str, Any] = json.loads(done.output)
    return doc


def test_a_streaming_query_commits_its_offsets_as_its_group(
    spark: SparkSession, shared_broker: BrokerProc, tmp_path: Path
) -> None:
    address = shared_broker.address
    fill(address, "GroupLag", 2, 30)
    frame = rmq_stream(
        spark,
        address,
        topic="GroupLag",
        startingOffsets="earliest",
        maxOffsetsPerTrigger="10",
        groupId="spark-lag",
    )
    query = stream_once(frame, tmp_path / "checkpoint")
    assert not query.isActive and query.exception() is None
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    assert [p["numInputRows"] for p in batches] == [10, 10, 10]
    # Offsets behind latest, as the Kafka source reports them: 15 per queue, 5 read from each.
    assert offsets_behind(batches[0]["sources"][0]) == {
        "avgOffsetsBehindLatest": 10.0,
        "maxOffsetsBehindLatest": 10.0,
        "minOffsetsBehindLatest": 10.0,
    }
    assert offsets_behind(batches[-1]["sources"][0])["maxOffsetsBehindLatest"] == 0.0  # type: ignore[index]
    end = json.loads(batches[-1]["sources"][0]["endOffset"])
    assert sum(end["broker-a"].values()) == 30

    # The group's committed offsets are the query's processed ends: no lag.
    def committed() -> dict[int, int]:
        doc = progress(address, "spark-lag")
        return {q["queueId"]: q["consumerOffset"] for q in doc["queues"]}

    wait_until(
        lambda: committed() == {int(q): o for q, o in end["broker-a"].items()},
        "the last batch's offsets committed",
    )
    assert progress(address, "spark-lag")["totalLag"] == 0
    # New messages the query has not read are the group's lag.
    asyncio.run(produce(address, "GroupLag", 5, start=30))
    assert progress(address, "spark-lag")["totalLag"] == 5
