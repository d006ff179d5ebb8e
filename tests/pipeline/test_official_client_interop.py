"""The official RocketMQ 5 Python client (rocketmq-python-client, from PyPI, over gRPC) and our own
tools read each other's messages, field by field: what its Producer sends is read by
``rmqctl consumeMessage --json`` and by the Spark source; what ``rmqctl sendMessage`` sends and
the Spark sink writes is received and acked by its SimpleConsumer.

One lone broker with its gRPC endpoint serves the module; the Spark session is the pipeline
tests' shared one. The official client runs in a process of its own per direction (it registers
the apache.rocketmq.v2 messages in protobuf's default pool, as protocol/rocketmq_v2 does here),
with HOME in the test's temp dir (it writes its logs there)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.pipeline.conftest import create_topic
from tests.support.official_client import pop_inflight, run_script
from tests.support.procs import GrpcBrokerProc, module_broker, rmqctl

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.multiprocess]

_PRODUCE = """
import json, sys, time
from rocketmq import ClientConfiguration, Credentials, Message, Producer

endpoint, topic = sys.argv[1], sys.argv[2]
plan = json.loads(sys.argv[3])
producer = Producer(ClientConfiguration(endpoint, Credentials(), request_timeout=10), (topic,))
producer.startup()
sent = []
try:
    for p in plan:
        m = Message()
        m.topic = topic
        m.body = p["body"].encode()
        m.tag = p["tag"]
        for key in p["keys"]:
            m.keys = key  # the setter adds one key to the message's set
        for name, value in p["properties"].items():
            m.add_property(name, value)
        if p["group"]:
            m.message_group = p["group"]
        # The client stamps born_timestamp in whole seconds (time.time() truncated).
        before = int(time.time()) * 1000
        receipt = producer.send(m)
        after = int(time.time() * 1000)
        sent.append({"id": receipt.message_id, "before": before, "after": after})
finally:
    producer.shutdown()
print(json.dumps(sent))
"""

_CONSUME = """
import json, sys, time
from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer

endpoint, topic, group, want = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
consumer = SimpleConsumer(
    ClientConfiguration(endpoint, Credentials(), request_timeout=10),
    group,
    {topic: FilterExpression("*")},
    await_duration=2,
)
consumer.startup()
got, acked = {}, []
try:
    deadline = time.time() + 60
    while len(got) < want and time.time() < deadline:
        for m in consumer.receive(16, 30):
            got[m.message_id] = {
                "topic": m.topic, "body": m.body.decode(), "tag": m.tag,
                "keys": sorted(m.keys), "properties": dict(m.properties),
                "message_id": m.message_id, "message_group": m.message_group,
                "born_timestamp": m.born_timestamp, "attempt": m.delivery_attempt,
                "corrupted": m.corrupted,
            }
            consumer.ack(m)
            acked.append(m.message_id)
finally:
    consumer.shutdown()
print(json.dumps({"got": list(got.values()), "acked": acked}))
"""

# What the official producer sends: a normal message, a FIFO one (its message group), one with
# no keys and no properties.
_PLAN = [
    {
        "body": "official-0",
        "tag": "TagA",
        "keys": ["k0", "other0"],
        "properties": {"color": "red", "size": "L"},
        "group": None,
    },
    {
        "body": "official-1",
        "tag": "TagB",
        "keys": ["k1"],
        "properties": {"color": "blue"},
        "group": "order-1",
    },
    {"body": "official-2", "tag": "TagA", "keys": [], "properties": {}, "group": None},
]


broker = module_broker("interop", GrpcBrokerProc)


def _official(script: str, tmp_path: Path, *args: str) -> Any:
    return json.loads(run_script(script, tmp_path, *args))


def _ok_json_lines(*args: str) -> list[dict[str, Any]]:
    done = rmqctl("--json", *args)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_what_the_official_producer_sends_is_read_by_rmqctl_and_the_spark_source(
    spark: SparkSession, broker: GrpcBrokerProc, tmp_path: Path
) -> None:
    topic, address = "InteropFromOfficial", broker.address
    asyncio.run(create_topic(address, topic, 1))  # one queue: one Spark partition to read
    endpoint = f"127.0.0.1:{broker.grpc_port}"
    sent = _official(_PRODUCE, tmp_path, endpoint, topic, json.dumps(_PLAN))
    assert len(sent) == len(_PLAN) and len({s["id"] for s in sent}) == len(_PLAN)

    def expect(uniq_key: str) -> tuple[dict[str, Any], dict[str, Any]]:
        (i,) = [i for i, s in enumerate(sent) if s["id"] == uniq_key]
        return _PLAN[i], sent[i]

    # rmqctl consumeMessage --json: one line per message, every field the producer set.
    lines = _ok_json_lines(
        "consumeMessage", "-a", address, "-t", topic, "-g", "interop-rmqctl",
        "--count", str(len(_PLAN)), "--timeout", "30",
    )  # fmt: skip
    assert len(lines) == len(_PLAN), lines
    for line in lines:
        props = dict(line["properties"])
        plan, where = expect(props.pop("UNIQ_KEY"))  # the id the official client got
        assert line["body"] == plan["body"]
        assert line["tags"] == plan["tag"]
        assert sorted(line["keys"].split()) == sorted(plan["keys"])
        assert line["messageGroup"] == plan["group"] == props.pop("__SHARDINGKEY", None)
        assert props == plan["properties"]  # nothing else of the broker's, nothing lost
        assert where["before"] <= line["bornTimestamp"] <= where["after"]
        assert line["storeTimestamp"] >= line["bornTimestamp"]

    # The Spark source, a batch read with the properties column.
    rows = (
        spark.read.format("rmq")
        .option("controllers", address)
        .option("topic", topic)
        .option("includeProperties", "true")
        .load()
        .collect()
    )
    assert len(rows) == len(_PLAN)
    for row in rows:
        assert row["topic"] == topic
        props = dict(row["properties"])
        plan, where = expect(props.pop("UNIQ_KEY"))
        assert row["body"] == plan["body"].encode()
        assert row["tags"] == plan["tag"]
        assert sorted((row["keys"] or "").split()) == sorted(plan["keys"])
        group = props.pop("__SHARDINGKEY", None)
        assert group == plan["group"]
        assert props == plan["properties"]
        born = int(row["bornTimestamp"].timestamp() * 1000)
        assert where["before"] <= born <= where["after"]


def test_what_rmqctl_sends_and_the_spark_sink_writes_the_official_consumer_receives(
    spark: SparkSession, broker: GrpcBrokerProc, tmp_path: Path
) -> None:
    topic, address = "InteropToOfficial", broker.address
    asyncio.run(create_topic(address, topic, 2))
    before = int(time.time() * 1000)
    by_rmqctl = rmqctl(
        "--json", "sendMessage", "-a", address, "-t", topic, "-p", "from-rmqctl",
        "--tags", "TagR", "--keys", "rk1 rk2", "--message-group", "rmqctl-group",
        "--property", "color=green", "--property", "formula=a=b",
    )  # fmt: skip
    assert by_rmqctl.returncode == 0, by_rmqctl.stderr
    rows = [
        ("spark-0", "sk0 other0", "TagS", {"color": "red", "n": "0"}, "spark-group"),
        ("spark-1", "sk1", "TagS", {"color": "blue"}, None),
        ("spark-2", None, None, None, None),
    ]
    df = spark.createDataFrame(
        rows,
        "body string, keys string, tags string, properties map<string,string>, messageGroup string",
    ).coalesce(1)  # one write task
    df.write.format("rmq").option("controllers", address).option("topic", topic).mode(
        "append"
    ).save()
    after = int(time.time() * 1000)

    group = "interop-official"
    endpoint = f"127.0.0.1:{broker.grpc_port}"
    out = _official(_CONSUME, tmp_path, endpoint, topic, group, "4")
    got = {m["body"]: m for m in out["got"]}
    assert sorted(got) == ["from-rmqctl", "spark-0", "spark-1", "spark-2"], out
    assert sorted(out["acked"]) == sorted(m["message_id"] for m in out["got"])
    expected = {
        "from-rmqctl": (
            ["rk1", "rk2"],
            "TagR",
            {"color": "green", "formula": "a=b"},
            "rmqctl-group",
        ),
        **{
            body: (sorted((keys or "").split()), tags, props or {}, message_group)
            for body, keys, tags, props, message_group in rows
        },
    }
    for body, (keys, tag, props, message_group) in expected.items():
        m = got[body]
        assert m["topic"] == topic
        assert m["keys"] == keys, m
        assert m["tag"] == tag, m
        assert m["properties"] == props, m
        assert m["message_group"] == message_group, m
        assert before <= m["born_timestamp"] <= after, m
        assert m["attempt"] == 1 and m["corrupted"] is False, m
    assert asyncio.run(pop_inflight(address, group)) == 0
