"""``rmqctl queryMsgById`` and ``queryMsgByUniqueKey`` find a message by the id the official
RocketMQ 5 clients show: their unique key, which the client generated and the broker stores as
the UNIQ_KEY property (34 hex digits), as well as by our offset id. Before, queryMsgById refused
the client's id: ``not a message id: '01...' (32 hex digits: store host and offset)``.

The official Python client (rocketmq-python-client, a dev dependency) sends through the broker's
gRPC endpoint in a process of its own; rmqctl runs as a subprocess."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.cluster.support import add_grpc_group, create_once_registered
from tests.support.cli import ok_json
from tests.support.cli import rmqctl_run as rmqctl
from tests.support.cluster import Cluster
from tests.support.official_client import run_script

pytestmark = pytest.mark.multiprocess

TOPIC = "UniqTopic"
OTHER = "UniqOther"

_PRODUCE = """
import json, sys
from rocketmq import ClientConfiguration, Credentials, Message, Producer

endpoint, topics = sys.argv[1], sys.argv[2:]
producer = Producer(ClientConfiguration(endpoint, Credentials(), request_timeout=10), tuple(topics))
producer.startup()
sent = []
try:
    for topic in topics:
        for i in range(3):
            m = Message()
            m.topic = topic
            m.body = f"{topic}-{i}".encode()
            m.keys = f"key-{i}"
            receipt = producer.send(m)
            sent.append({"id": receipt.message_id, "topic": topic, "body": f"{topic}-{i}"})
finally:
    producer.shutdown()
print(json.dumps(sent))
"""


def one_line_error(args: list[str], needle: str) -> None:
    done = rmqctl(*args)
    assert (done.returncode, done.stdout) == (1, ""), done.stderr
    assert done.stderr.startswith("rmqctl: ") and done.stderr.count("\n") == 1, done.stderr
    assert needle in done.stderr, done.stderr


async def test_a_message_is_found_by_the_official_clients_id_and_by_its_offset_id(
    cluster: Cluster, tmp_path: Path
) -> None:
    (grpc_port,) = add_grpc_group(cluster, 1)
    for topic in (TOPIC, OTHER):
        await create_once_registered(cluster, topic, 2, f"topic {topic} created on a master")
    last = await asyncio.to_thread(
        run_script, _PRODUCE, tmp_path, f"127.0.0.1:{grpc_port}", TOPIC, OTHER, logs=cluster.logs
    )
    sent = json.loads(last)
    assert len(sent) == 6 and len({s["id"] for s in sent}) == 6
    assert all(len(s["id"]) == 34 and s["id"].startswith("01") for s in sent), sent
    a = cluster.controller_addresses

    for s in sent:
        # The client's id, with and without the topic: the message, whose offset id differs.
        by_uniq = await asyncio.to_thread(ok_json, "queryMsgById", "-a", a, "-i", s["id"], "--body")
        assert by_uniq["topic"] == s["topic"] and by_uniq["body"] == s["body"], by_uniq
        assert by_uniq["properties"]["UNIQ_KEY"] == s["id"]
        assert by_uniq["msgId"] != s["id"]
        with_topic = await asyncio.to_thread(
            ok_json, "queryMsgById", "-a", a, "-i", s["id"].lower(), "-t", s["topic"]
        )
        assert with_topic["msgId"] == by_uniq["msgId"]
        # Our offset id finds the same message.
        by_offset = await asyncio.to_thread(
            ok_json, "queryMsgById", "-a", a, "-i", by_uniq["msgId"], "--body"
        )
        assert by_offset == by_uniq
        # mqadmin's queryMsgByUniqueKey -i MSGID -t TOPIC.
        doc = await asyncio.to_thread(
            ok_json, "queryMsgByUniqueKey", "-a", a, "-i", s["id"], "-t", s["topic"]
        )
        assert doc["topic"] == s["topic"] and doc["msgId"] == s["id"]
        assert [m["msgId"] for m in doc["messages"]] == [by_uniq["msgId"]]

    # The human form names both ids.
    human = await asyncio.to_thread(rmqctl, "queryMsgByUniqueKey", "-a", a, "-i", sent[0]["id"],
                                    "-t", TOPIC)  # fmt: skip
    assert human.returncode == 0, human.stderr
    assert f'"UNIQ_KEY": "{sent[0]["id"]}"' in human.stdout, human.stdout

    # Not found, or in another topic: one line, exit 1.
    other_id = next(s["id"] for s in sent if s["topic"] == OTHER)
    missing = "01" + "0" * 32
    await asyncio.to_thread(
        one_line_error,
        ["queryMsgByUniqueKey", "-a", a, "-i", other_id, "-t", TOPIC],
        f"no message with unique key '{other_id}' in topic '{TOPIC}'",
    )
    await asyncio.to_thread(
        one_line_error,
        ["queryMsgById", "-a", a, "-i", missing],
        f"message {missing} not found: no message has unique key {missing} in any topic",
    )
    await asyncio.to_thread(
        one_line_error, ["queryMsgById", "-a", a, "-i", "not-an-id"], "not a message id"
    )
