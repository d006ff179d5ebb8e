"""The Spark source reads the trace topic like any other (issue 32 item 2): messages sent with
``Producer(trace=True)`` and consumed with ``Consumer(trace=True)`` through a broker whose
``trace_enabled`` is on; a batch read of ``RMQ_SYS_TRACE_TOPIC`` holds the client's and the
broker's records of each message (RocketMQ's trace layout, decoded with protocol/trace.py), keyed
by the ids they trace; a topic pattern leaves the trace topic out, as every system topic."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from client import Consumer, Producer
from protocol.trace import TRACE_TOPIC, decode_records
from tests.pipeline.conftest import create_topic
from tests.support.procs import BrokerProc, started
from tests.support.wait import wait_until

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.multiprocess]

TOPIC = "SparkTraced"
GROUP = "spark-traced-group"


@pytest.fixture(scope="module")
def traced_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProc]:
    path: Path = tmp_path_factory.mktemp("traced-broker")
    with started(BrokerProc(path, extra_toml="trace_enabled = true\n")) as broker:
        yield broker


async def send_and_consume(address: str, count: int) -> list[str]:
    """Send ``count`` traced messages and consume them with a traced group; their ids."""
    await create_topic(address, TOPIC, 2)
    async with Producer(address, trace=True) as producer:
        ids = [
            (await producer.send(TOPIC, f"t{i}".encode(), f"key{i}", "traced")).msg_id
            for i in range(count)
        ]
    async with Consumer(address, GROUP, TOPIC, trace=True) as consumer:
        got: set[str] = set()
        deadline = asyncio.get_running_loop().time() + 60
        while got != set(ids) and asyncio.get_running_loop().time() < deadline:
            got |= {m.msg_id for m in await consumer.receive(timeout=1.0)}
        assert got == set(ids)
        await consumer.receive(timeout=0.1)  # what was received is consumed: its SubAfter
    return ids


def trace_topic(spark: SparkSession, address: str) -> DataFrame:
    return (
        spark.read.format("rmq").option("controllers", address).option("topic", TRACE_TOPIC).load()
    )


def test_a_batch_read_of_the_trace_topic_holds_every_record(
    spark: SparkSession, traced_broker: BrokerProc
) -> None:
    address = traced_broker.address
    ids = asyncio.run(send_and_consume(address, 5))
    want = {
        (msg_id, step, source)
        for msg_id in ids
        for step, source in (
            ("Pub", "client"),
            ("Pub", "broker"),
            ("SubBefore", "client"),
            ("SubAfter", "client"),
        )
    }
    seen: list[object] = []

    def steps() -> set[tuple[str, str, str]]:
        rows = trace_topic(spark, address).select("topic", "keys", "body").collect()
        assert {r["topic"] for r in rows} <= {TRACE_TOPIC}
        out = set()
        for row in rows:
            records = decode_records(bytes(row["body"]))
            # Keyed by the ids of the messages the records trace (the key index finds them).
            assert {r.msg_id for r in records} <= set(row["keys"].split())
            out |= {(r.msg_id, str(r.type), r.source) for r in records}
        seen[:] = sorted(out)
        return out

    wait_until(
        lambda: want <= steps(),
        "the trace topic read through Spark to hold every record",
        60,
        interval=1.0,
        on_timeout=lambda: f"got {seen}",
    )
    got = steps()
    assert all(step[0] in ids for step in got)  # only these messages were traced
    groups = {
        r.group
        for row in trace_topic(spark, address).select("body").collect()
        for r in decode_records(bytes(row["body"]))
        if str(r.type).startswith("Sub")
    }
    assert groups == {GROUP}

    # A pattern leaves the trace topic out, as every system topic; by name it is read.
    pattern = (
        spark.read.format("rmq")
        .option("controllers", address)
        .option("topicPattern", ".*Trac.*")
        .load()
    )
    assert {r["topic"] for r in pattern.select("topic").collect()} == {TOPIC}
