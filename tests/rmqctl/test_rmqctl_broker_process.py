"""rmqctl as a subprocess against a real broker process."""

from __future__ import annotations

import asyncio
import json

import pytest

from client.producer import Producer
from tests.support.procs import BrokerProc, rmqctl

pytestmark = pytest.mark.multiprocess


def ok_json(*args: str) -> object:
    proc = rmqctl("--json", *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_topic_and_cluster_commands_describe_the_lone_broker(broker: BrokerProc) -> None:
    a = broker.address
    assert ok_json("updateTopic", "-a", a, "-t", "T", "-q", "4") == {
        "topic": "T",
        "queues": 4,
        "brokers": ["broker-a"],
    }
    assert ok_json("topicRoute", "-a", a, "-t", "T") == {
        "topic": "T",
        "brokers": [
            {
                "brokerName": "broker-a",
                "masterAddress": a,
                "slaves": [],
                "queues": 4,
                "perm": 6,
                "messageType": "NORMAL",
            }
        ],
    }
    # A lone broker's own route carries the topic's permission and type too.
    assert ok_json("updateTopic", "-a", a, "-t", "T", "-q", "4", "-p", "4")["perm"] == 4
    (shown,) = ok_json("topicRoute", "-a", a, "-t", "T")["brokers"]
    assert (shown["perm"], shown["messageType"]) == (4, "NORMAL")
    clusters = ok_json("clusterList", "-a", a)
    assert isinstance(clusters, dict)
    (members,) = clusters["clusters"].values()
    assert [(m["brokerName"], m["address"], m["role"]) for m in members] == [
        ("broker-a", a, "MASTER")
    ]
    human = rmqctl("topicRoute", "-a", a, "-t", "T")
    assert human.returncode == 0 and "broker-a" in human.stdout


def test_unknown_topic_route_is_one_line_and_exit_1(broker: BrokerProc) -> None:
    proc = rmqctl("topicRoute", "-a", broker.address, "-t", "missing")
    assert proc.returncode == 1
    assert proc.stderr.startswith("rmqctl: ") and proc.stderr.count("\n") == 1


def test_messages_sent_by_rmqctl_and_the_sdk_are_all_consumed_by_rmqctl(
    broker: BrokerProc,
) -> None:
    a = broker.address
    ok_json("updateTopic", "-a", a, "-t", "T", "-q", "4")
    sent = ok_json("sendMessage", "-a", a, "-t", "T", "-p", "from-cli", "-k", "K", "--count", "150")
    assert isinstance(sent, dict) and sent["sent"] == 150
    expected = {
        (r["queueId"], r["queueOffset"]): ("from-cli", "K", r["msgId"]) for r in sent["results"]
    }

    async def sdk_send() -> None:
        async with Producer(a) as p:
            for i in range(50):
                r = await p.send("T", f"sdk-{i}".encode(), keys=f"s{i}")
                expected[(r.queue_id, r.queue_offset)] = (f"sdk-{i}", f"s{i}", r.msg_id)

    asyncio.run(sdk_send())

    proc = rmqctl(
        "--json",
        "consumeMessage",
        "-a",
        a,
        "-t",
        "T",
        "-g",
        "G",
        "--count",
        "200",
        "--timeout",
        "45",
    )
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    got = {(m["queueId"], m["queueOffset"]): (m["body"], m["keys"], m["msgId"]) for m in lines}
    assert len(lines) == 200
    assert got == expected
    assert all(m["brokerName"] == "broker-a" and m["storeTimestamp"] > 0 for m in lines)

    # Everything was committed: the group has nothing left, and the command stops on time.
    proc = rmqctl("--json", "consumeMessage", "-a", a, "-t", "T", "-g", "G", "--timeout", "2")
    assert (proc.returncode, proc.stdout) == (0, "")
