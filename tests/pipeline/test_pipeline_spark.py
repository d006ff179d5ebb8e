"""The rmq and rmqstore formats and the jobs in a real local[2] Spark session against real
broker processes. Few tests, each doing several things, all sharing one session."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgpack
import pytest
from click.testing import CliRunner

from pipeline.cli import cli
from protocol.codes import RequestCode
from remoting.client import RemotingClient
from tests.pipeline.conftest import fill, produce, rmq, rmq_stream, stream_once
from tests.support.procs import BrokerProc, free_port
from tests.support.wait import wait_until

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.multiprocess]


def test_batch_read_counts_contents_ranges_and_errors(
    spark: SparkSession, shared_broker: BrokerProc
) -> None:
    address = shared_broker.address
    sent = fill(address, "SparkBatch", 4, 200)
    df = rmq(spark, address, "SparkBatch")
    assert df.rdd.getNumPartitions() == 4  # one per (broker group, queue) with data
    got = df.collect()
    assert len(got) == 200
    assert {r["msgId"] for r in got} == {s.msg_id for s in sent}
    by_id = {r["msgId"]: r for r in got}
    for i in (0, 7, 199):
        row, where = by_id[sent[i].msg_id], sent[i]
        assert (row["brokerName"], row["queueId"], row["queueOffset"]) == (
            where.broker_name,
            where.queue_id,
            where.queue_offset,
        )
        assert row["body"] == f"m{i}".encode() and row["keys"] == f"k{i}"
        assert row["tags"] == ("even" if i % 2 == 0 else "odd")
        assert row["properties"] == {"i": str(i)} and row["topic"] == "SparkBatch"
        assert row["storeTimestamp"] >= row["bornTimestamp"]

    # Ranges: end exclusive; JSON offsets name every queue (-1 latest, -2 earliest).
    ranged = rmq(
        spark,
        address,
        "SparkBatch",
        startingOffsets='{"broker-a": {"0": 10, "1": 40, "2": -1, "3": -1}}',
        endingOffsets='{"broker-a": {"0": 20, "1": 45, "2": 0, "3": -2}}',
    )
    offsets = sorted((r["queueId"], r["queueOffset"]) for r in ranged.collect())
    assert offsets == [(0, o) for o in range(10, 20)] + [(1, o) for o in range(40, 45)]
    # An end past the committed end is clamped; latest to latest is empty.
    assert (
        rmq(
            spark,
            address,
            "SparkBatch",
            endingOffsets=json.dumps({"broker-a": dict.fromkeys("0123", 9999)}),
        ).count()
        == 200
    )
    assert rmq(spark, address, "SparkBatch", startingOffsets="latest").count() == 0

    # Clear errors: at load() for options, at the first action for what the cluster says.
    with pytest.raises(Exception, match="option topic is required"):
        spark.read.format("rmq").option("controllers", address).load()
    with pytest.raises(Exception, match="option controllers is required"):
        spark.read.format("rmq").option("topic", "SparkBatch").load()
    with pytest.raises(Exception, match=r"startingOffsets must be .* not valid JSON"):
        rmq(spark, address, "SparkBatch", startingOffsets='{"broker-a": {"0": 1')
    with pytest.raises(Exception, match="topic 'NoSuchTopic' does not exist"):
        rmq(spark, address, "NoSuchTopic").count()
    dead = f"127.0.0.1:{free_port()}"
    with pytest.raises(Exception, match=f"controllers unreachable: cannot reach any of {dead}"):
        rmq(spark, dead, "SparkBatch").count()


def forget_batch(log_dir: Path, batch: int) -> None:
    """Remove a batch from one of Spark's metadata logs (and its checksum file), as if the
    process had died before writing it."""
    (log_dir / str(batch)).unlink()
    (log_dir / f".{batch}.crc").unlink(missing_ok=True)


def test_streaming_available_now_and_restart_from_checkpoint(
    spark: SparkSession, shared_broker: BrokerProc, tmp_path: Path
) -> None:
    address = shared_broker.address
    fill(address, "SparkStream", 2, 50)

    def stream(**options: str) -> DataFrame:
        return rmq_stream(
            spark, address, topic="SparkStream", startingOffsets="earliest", **options
        )

    def finish(query: Any) -> list[int]:
        query.awaitTermination(240)
        assert not query.isActive and query.exception() is None
        return [int(p["numInputRows"]) for p in query.recentProgress if p["numInputRows"]]

    memory = stream_once(
        stream(maxOffsetsPerTrigger="20"), tmp_path / "memory-checkpoint", "stream_memory"
    )
    assert finish(memory) == [20, 20, 10]
    got = spark.sql("select msgId from stream_memory").collect()
    assert len(got) == 50 and len({r["msgId"] for r in got}) == 50

    # Restart: the memory sink cannot recover, so batches are collected through foreachBatch.
    checkpoint = tmp_path / "checkpoint"
    batches: dict[int, list[tuple[str, int, int]]] = {}

    def collect(df: DataFrame, batch_id: int) -> None:
        rows = df.select("msgId", "queueId", "queueOffset").collect()
        batches.setdefault(batch_id, []).extend(tuple(r) for r in rows)

    def run() -> list[int]:
        query = (
            stream()
            .writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        return finish(query)

    assert run() == [50]
    first = sorted(batches.pop(0))
    # As if the job died after planning its batch: it is logged in offsets/ but not in
    # commits/. The restarted query replays exactly that batch, then reads what is new.
    forget_batch(checkpoint / "commits", 0)
    new = asyncio.run(produce(address, "SparkStream", 7, start=50))
    assert run() == [50, 7]
    assert sorted(batches[0]) == first  # the very same messages, none more, none less
    assert sorted(batches[1]) == sorted((s.msg_id, s.queue_id, s.queue_offset) for s in new)


def test_write_then_read_back_batch_and_streaming(
    spark: SparkSession, shared_broker: BrokerProc, tmp_path: Path
) -> None:
    address = shared_broker.address
    asyncio.run(
        _topics(address, ("SparkOut", 2), ("SparkOther", 1), ("SparkCopy", 2), ("SparkOpt", 1))
    )
    rows = [
        (
            f"body{i}",
            f"key{i}",
            "t" if i % 2 else None,
            {"n": str(i)},
            "SparkOut" if i < 30 else "SparkOther",
        )
        for i in range(40)
    ]
    df = spark.createDataFrame(
        rows, "body string, keys string, tags string, properties map<string,string>, topic string"
    ).repartition(3)
    # No topic option: each row goes to its 'topic' column's topic.
    df.write.format("rmq").option("controllers", address).mode("append").save()
    out = {r["keys"]: r for r in rmq(spark, address, "SparkOut").collect()}
    assert sorted(out) == sorted(f"key{i}" for i in range(30))
    assert out["key3"]["body"] == b"body3" and out["key3"]["tags"] == "t"
    assert out["key4"]["tags"] is None and out["key4"]["properties"] == {"n": "4"}
    other = rmq(spark, address, "SparkOther").collect()
    assert sorted(r["keys"] for r in other) == [f"key{i}" for i in range(30, 40)]
    # The option wins over the column (Kafka's sink rule): rows read from SparkOther, topic
    # column and all, written with the option go to SparkOpt, none back to SparkOther.
    rmq(spark, address, "SparkOther").write.format("rmq").option("controllers", address).option(
        "topic", "SparkOpt"
    ).mode("append").save()
    moved = rmq(spark, address, "SparkOpt").collect()
    assert sorted(r["keys"] for r in moved) == [f"key{i}" for i in range(30, 40)]
    assert len(rmq(spark, address, "SparkOther").collect()) == 10

    # Streaming write: copy a topic (the read columns that are not message fields are ignored).
    stream = rmq_stream(spark, address, topic="SparkOut", startingOffsets="earliest").select(
        "body", "keys", "tags", "properties"
    )
    query = (
        stream.writeStream.format("rmq")
        .option("controllers", address)
        .option("topic", "SparkCopy")
        .option("checkpointLocation", str(tmp_path / "copy-checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(240)
    assert query.exception() is None
    copied = rmq(spark, address, "SparkCopy").collect()
    assert sorted((r["keys"], r["body"]) for r in copied) == sorted(
        (k, r["body"]) for k, r in out.items()
    )

    # Failures are reported, not dropped.
    bad = spark.createDataFrame(
        [("x", "SparkOut"), ("y", "NoSuchTopic")], "body string, topic string"
    )
    with pytest.raises(
        Exception,
        match=r"write task failed after 2 rows: .*NoSuchTopic.*1 messages were acknowledged "
        r"and stay in the topic \(SparkOut@broker-a/\d \[\d+\.\.\d+\]\), 1 were refused",
    ):
        bad.coalesce(1).write.format("rmq").option("controllers", address).mode("append").save()
    with pytest.raises(Exception, match="save mode overwrite is not supported"):
        df.write.format("rmq").option("controllers", address).option("topic", "SparkOut").mode(
            "overwrite"
        ).save()
    with pytest.raises(Exception, match="needs a column 'body'"):
        spark.createDataFrame([("x",)], "value string").write.format("rmq").option(
            "controllers", address
        ).option("topic", "SparkOut").mode("append").save()
    with pytest.raises(Exception, match="topic 'NoSuchTopic' does not exist"):
        df.write.format("rmq").option("controllers", address).option("topic", "NoSuchTopic").mode(
            "append"
        ).save()


async def _topics(address: str, *topics: tuple[str, int]) -> None:
    from tests.pipeline.conftest import create_topic

    for name, queues in topics:
        await create_topic(address, name, queues)


def test_jobs_archive_exactly_once_and_traffic(
    spark: SparkSession, shared_broker: BrokerProc, tmp_path: Path
) -> None:
    address = shared_broker.address
    sent = fill(address, "SparkJobs", 2, 30)
    output, checkpoint = tmp_path / "archive", tmp_path / "archive-checkpoint"
    runner = CliRunner()
    archive = [
        "archive", "-a", address, "-t", "SparkJobs",
        "--output", str(output), "--checkpoint", str(checkpoint),
        "--max-offsets-per-trigger", "12",
    ]  # fmt: skip
    first = runner.invoke(cli, archive, catch_exceptions=False)
    assert first.exit_code == 0, first.output
    summary = json.loads(first.output.strip().splitlines()[-1])
    assert (summary["rows"], summary["batches"]) == (30, 3)
    assert summary["files"] == len(list(output.rglob("*.parquet"))) > 0
    sent += asyncio.run(produce(address, "SparkJobs", 10, start=30))
    # Killed after its last batch wrote files but before anything committed: the batch's
    # entries in commits/ and in the sink's log are gone; the rerun writes it again.
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    forget_batch(checkpoint / "commits", last)
    forget_batch(output / "_spark_metadata", last)
    second = runner.invoke(cli, archive, catch_exceptions=False)
    assert second.exit_code == 0, second.output
    archived = spark.read.parquet(str(output))
    ids = [r["msgId"] for r in archived.select("msgId").collect()]
    assert sorted(ids) == sorted(s.msg_id for s in sent)  # no duplicates, no gaps
    days = {r["day"] for r in archived.select("day").distinct().collect()}
    assert len(days) == 1 and str(days.pop()).count("-") == 2

    # Traffic: tables and plan to files, the plan also printed.
    traffic_dir = tmp_path / "traffic"
    result = runner.invoke(
        cli,
        [
            "traffic",
            "-a",
            address,
            "-t",
            "SparkJobs",
            "--output",
            str(traffic_dir),
            "--threshold",
            "0",
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output[result.output.index("{") :])
    assert plan == json.loads((traffic_dir / "plan.json").read_text())
    # The topic's busiest hour (the 40 messages may straddle an hour boundary).
    per_second: dict[int, int] = {}
    for r in (
        rmq(spark, address, "SparkJobs").selectExpr("unix_seconds(storeTimestamp) AS s").collect()
    ):
        per_second[r["s"]] = per_second.get(r["s"], 0) + 1
    per_hour: dict[int, int] = {}
    for second, n in per_second.items():
        per_hour[second // 3600] = per_hour.get(second // 3600, 0) + n
    assert plan["groupsBefore"] == {
        "broker-a": pytest.approx(max(per_hour.values()) / 3600, abs=1e-3)
    }
    hourly = spark.read.parquet(str(traffic_dir / "hourly"))
    assert hourly.groupBy().sum("messages").first()[0] == 40
    assert set(hourly.columns) == {
        "topic",
        "brokerName",
        "queueId",
        "hour",
        "messages",
        "msgPerSec",
        "p99MsgPerSec",
        "peakMsgPerSec",
    }
    # The busiest second of the hour, per topic, as counted from the messages themselves.
    topics = spark.read.parquet(str(traffic_dir / "topics_hourly")).collect()
    assert sum(r["messages"] for r in topics) == 40
    assert max(r["peakMsgPerSec"] for r in topics) == max(per_second.values())
    daily = spark.read.parquet(str(traffic_dir / "daily")).collect()
    assert sum(r["messages"] for r in daily) == 40
    assert all(r["msgPerSec"] == pytest.approx(r["messages"] / 86400) for r in daily)
    # Several topics take JSON offsets keyed by topic, as the source's `topics` option does
    # (they were refused: "--starting-offsets as JSON offsets needs exactly one topic").
    fill(address, "SparkJobsB", 2, 5)
    every = {"broker-a": {"0": -2, "1": -2}}
    both = runner.invoke(
        cli,
        [
            "traffic", "-a", address, "-t", "SparkJobs", "-t", "SparkJobsB",
            "--starting-offsets", json.dumps({"SparkJobs": every, "SparkJobsB": every}),
            "--output", str(tmp_path / "traffic2"),
        ],
        catch_exceptions=False,
    )  # fmt: skip
    assert both.exit_code == 0, both.output
    two = spark.read.parquet(str(tmp_path / "traffic2" / "hourly"))
    counted = {r["topic"]: r["n"] for r in two.groupBy("topic").agg({"messages": "sum"})
               .withColumnRenamed("sum(messages)", "n").collect()}  # fmt: skip
    assert counted == {"SparkJobs": 40, "SparkJobsB": 5}
    # A bad option is one line and exit status 1 (or 2 for usage).
    bad = runner.invoke(cli, ["traffic", "-a", address, "-t", "NoSuchTopic"])
    assert bad.exit_code == 1 and "topic 'NoSuchTopic' does not exist" in bad.output
    # A failure inside Spark (the offsets name a queue the topic does not have) is one line too.
    wrong = runner.invoke(
        cli,
        [
            "archive", "-a", address, "-t", "SparkJobs", "--output", str(tmp_path / "o2"),
            "--checkpoint", str(tmp_path / "c2"),
            "--starting-offsets", '{"broker-a": {"0": 0, "1": 0, "7": 0}}',
        ],
    )  # fmt: skip
    assert wrong.exit_code == 1
    assert wrong.output == (
        "rmq-pipeline: startingOffsets names broker-a/7, not a queue of topic 'SparkJobs' "
        "(its queues: broker-a/0..1)\n"
    )


def test_traffic_peaks_are_per_second_within_the_hour(spark: SparkSession) -> None:
    from pipeline.traffic import per_hour_with_peaks

    # 40 busy seconds in one hour, the k-th with k messages: p99 is the 36th busiest second.
    base = 1_700_000_000 - 1_700_000_000 % 3600
    rows = [("T", base + k * 7, n) for k in range(1, 41) for n in range(k)]
    df = spark.createDataFrame(rows, "topic string, s long, n int").selectExpr(
        "topic", "timestamp_seconds(s) AS storeTimestamp"
    )
    (hour,) = per_hour_with_peaks(df, ("topic",)).collect()
    assert hour["messages"] == sum(range(1, 41))
    assert hour["msgPerSec"] == pytest.approx(820 / 3600)
    assert (hour["peakMsgPerSec"], hour["p99MsgPerSec"]) == (40.0, 5.0)
    # Fewer than 36 busy seconds: 99% of the hour's seconds are idle.
    few = df.where(f"storeTimestamp < timestamp_seconds({base + 35 * 7})")
    (quiet,) = per_hour_with_peaks(few, ("topic",)).collect()
    assert (quiet["peakMsgPerSec"], quiet["p99MsgPerSec"]) == (34.0, 0.0)


def all_confirmed(address: str) -> bool:
    async def ask() -> bool:
        conn = await RemotingClient.connect(address)
        try:
            info = msgpack.unpackb((await conn.call(RequestCode.GET_BROKER_RUNTIME_INFO)).body)
        finally:
            conn.close()
        return bool(info["confirmOffset"] == info["maxOffset"])

    return asyncio.run(ask())


def test_rmqstore_reads_a_stopped_brokers_directory(
    spark: SparkSession, broker_factory: type[BrokerProc], tmp_path: Path
) -> None:
    broker = broker_factory(tmp_path).start_and_wait()
    a = fill(broker.address, "StoreA", 2, 25, body_size=100)
    b = fill(broker.address, "StoreB", 1, 5)
    # A lone master confirms what it stores about once a second: wait, so the checkpoint the
    # clean stop writes has everything confirmed (committedOnly below).
    wait_until(lambda: all_confirmed(broker.address), "the broker to confirm its messages", 10)
    assert broker.stop() == 0
    store = spark.read.format("rmqstore").load(str(broker.data_dir))
    rows = store.collect()
    assert sorted(r["msgId"] for r in rows) == sorted(s.msg_id for s in a + b)
    assert {r["brokerName"] for r in rows} == {broker.data_dir.name}
    one = next(r for r in rows if r["msgId"] == a[3].msg_id)
    assert (one["topic"], one["queueId"], one["queueOffset"]) == (
        "StoreA",
        a[3].queue_id,
        a[3].queue_offset,
    )
    assert one["body"] == b"m3".ljust(100, b".") and one["keys"] == "k3"
    assert one["storeHost"] == broker.address and one["size"] > 100
    only_b = spark.read.format("rmqstore").option("topic", "StoreB").option("committedOnly", "true")
    assert only_b.load(str(broker.data_dir)).count() == 5

    # A flipped byte: fail by default, or read up to the bad record.
    copy = tmp_path / "copy"
    shutil.copytree(broker.data_dir, copy)
    segment = sorted((copy / "commitlog").iterdir())[0]
    data = bytearray(segment.read_bytes())
    target = sorted(rows, key=lambda r: r["physicalOffset"])[10]
    data[target["physicalOffset"] + 80] ^= 0xFF
    segment.write_bytes(bytes(data))
    with pytest.raises(Exception, match=r"bad record in .* at CommitLog offset \d+: CRC mismatch"):
        spark.read.format("rmqstore").load(str(copy)).count()
    assert (
        spark.read.format("rmqstore").option("corruptRecords", "stop").load(str(copy)).count() == 10
    )
    with pytest.raises(Exception, match="is not a broker store directory"):
        spark.read.format("rmqstore").load(str(tmp_path / "nowhere"))


def test_rmqstore_names_the_group_its_store_records_and_checks_option_names(
    spark: SparkSession, broker_factory: type[BrokerProc], tmp_path: Path
) -> None:
    """``make run`` keeps broker-a's replicas in ``var/broker-a-0`` (``-1``, ``-2``): the
    ``brokerName`` column is the group the store records (``config/owner.json``), not the
    directory's name, so a static topic's mapping, which names groups, finds its items there.
    Before the fix the column read ``broker-a-0`` and every row of the mapped topic was left
    out: an empty result, no error. And a misspelt option (``committedOnyl``) was ignored: every
    record was read, committed or not."""
    broker = broker_factory(tmp_path).start_and_wait()
    sent = fill(broker.address, "StoreS", 2, 10)
    assert broker.stop() == 0
    replica = tmp_path / "broker-a-0"
    shutil.copytree(broker.data_dir, replica)
    mapping = tmp_path / "mapping.json"
    item = {"brokerName": "broker-a", "logicalStart": 0, "physicalStart": 0, "generation": 0}
    mapping.write_text(json.dumps({"topic": "StoreS", "queues": [
        {"queueId": q, "items": [{**item, "physicalQueue": q, "logicalEnd": None}]}
        for q in range(2)
    ]}))  # fmt: skip

    def store(**options: str) -> DataFrame:
        reader = spark.read.format("rmqstore")
        for key, value in options.items():
            reader = reader.option(key, value)
        return reader.load(str(replica))

    rows = store().collect()
    assert {r["brokerName"] for r in rows} == {"broker-a"}
    logical = store(staticTopicMapping=str(mapping), topic="StoreS").collect()
    assert sorted((r["queueId"], r["queueOffset"]) for r in logical) == sorted(
        (s.queue_id, s.queue_offset) for s in sent
    )
    # A wrong explicit brokerName read the topic as nothing, without an error.
    with pytest.raises(Exception, match="broker group 'broker-b' holds no item of static topic"):
        store(staticTopicMapping=str(mapping), topic="StoreS", brokerName="broker-b").collect()
    with pytest.raises(
        Exception, match="unknown option 'committedonyl' for reading the rmqstore format; did you "
        "mean committedOnly"
    ):  # fmt: skip
        store(committedOnyl="true")
