"""Static topics against real processes: three controllers, two broker groups of one broker.

The mapping is created through rmqctl (UPDATE_AND_CREATE_STATIC_TOPIC on the active
controller), its physical queues reach the groups' routes, the SDK producer sends through the
static topic to each logical queue's newest item, bad requests are refused with one line, and after kill -9 of the controller leader the new leader answers the same mapping.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from client import Producer
from client.routes import MessageQueue, TopicRoute
from tests.cluster.support import two_groups
from tests.support.cli import has_master, rmqctl, rmqctl_json
from tests.support.cluster import Cluster
from tests.support.wait import wait_until

pytestmark = pytest.mark.multiprocess


def test_a_static_topic_is_created_refused_when_bad_and_survives_the_controller_leader(
    cluster: Cluster,
) -> None:
    addrs = two_groups(cluster)
    for group in ("broker-a", "broker-b"):
        wait_until(
            lambda g=group: has_master(addrs, g),
            f"{group} has a master",
            30,
            interval=0.2,
            on_timeout=cluster.logs,
        )

    created = rmqctl_json(addrs, "updateStaticTopic", "-t", "Orders", "-q", "4")
    placed = [
        (q["items"][0]["brokerName"], q["items"][0]["physicalQueue"]) for q in created["queues"]
    ]
    assert placed == [("broker-a", 0), ("broker-b", 0), ("broker-a", 1), ("broker-b", 1)]
    assert all(q["items"][0]["logicalEnd"] is None for q in created["queues"])
    assert rmqctl_json(addrs, "staticTopicMapping", "-t", "Orders") == created

    # The physical queues are topics of the groups: their brokers got them, the route shows them.
    def routed() -> bool:
        code, out, _ = rmqctl("--json", "topicRoute", "-a", addrs, "-t", "Orders")
        if code != 0:
            return False
        brokers = {b["brokerName"]: b for b in json.loads(out)["brokers"]}
        return {n: b["queues"] for n, b in brokers.items()} == {
            "broker-a": 2,
            "broker-b": 2,
        } and all(b["masterAddress"] for b in brokers.values())

    wait_until(
        routed, "the physical queues in the route", 20, interval=0.2, on_timeout=cluster.logs
    )

    # The SDK producer, unchanged, sends to each logical queue's newest item.
    async def send_all() -> tuple[list[tuple[str, int]], TopicRoute]:
        async with Producer(addrs, retries=4) as producer:
            sent = [await producer.send("Orders", f"m-{i}".encode()) for i in range(8)]
            return [(r.broker_name, r.queue_id) for r in sent], await producer.routes.get("Orders")

    landed, route = asyncio.run(send_all())
    assert route.logical_queues == tuple(MessageQueue(n, q) for n, q in placed)
    assert set(landed) == set(placed)  # round-robin over the 4 logical queues

    for args, line in [
        (("-t", "Orders", "-q", "5"), "static topic Orders already exists with 4 queues"),
        (("-t", "Orders2", "-q", "2", "-b", "broker-z"), "broker group broker-z does not exist"),
        (("-t", "bad name", "-q", "2"), "topic may hold letters"),
    ]:
        code, out, err = rmqctl("updateStaticTopic", "-a", addrs, *args)
        assert code == 1 and out == "" and len(err.splitlines()) == 1 and line in err, (args, err)
    code, _, err = rmqctl("staticTopicMapping", "-a", addrs, "-t", "Orders2")
    assert code == 1 and "Orders2 is not a static topic" in err and len(err.splitlines()) == 1

    leader_id = rmqctl_json(addrs, "getControllerMetaData")["leaderId"]
    leader = next(c for c in cluster.controllers if c.node_id == leader_id)
    leader.kill9()
    others = ";".join(c.address for c in cluster.controllers if c is not leader)

    def new_leader() -> bool:
        code, out, _ = rmqctl("--json", "getControllerMetaData", "-a", others)
        return code == 0 and json.loads(out)["leaderId"] not in (None, leader_id)

    wait_until(new_leader, "a new controller leader", 30, interval=0.2, on_timeout=cluster.logs)
    assert rmqctl_json(others, "staticTopicMapping", "-t", "Orders") == created
    # The new leader decides on the same state: the same create is a no-op, another refused.
    assert rmqctl_json(others, "updateStaticTopic", "-t", "Orders", "-q", "4") == created
    code, _, err = rmqctl("updateStaticTopic", "-a", others, "-t", "Orders", "-q", "3")
    assert code == 1 and "already exists with 4 queues" in err
