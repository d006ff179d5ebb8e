"""The classic RocketMQ Node.js client ``ali-ons`` (npm, installed from tests/alions' lockfile
with ``npm ci --ignore-scripts``) produces and consumes through RocketMQ's own remoting
protocol against a real cluster: its ``nameSrv`` is a controller (the NameServer door answers
its route requests), its producer and push consumer speak to the brokers' client ports (the
classic door, told apart from our protocol on the first bytes).

The producer sends with tags, keys and a user property; a push consumer of a new group reads
them all from the first offset (and our SDK's, sent the other way round) and commits its
offsets; our SDK reads the same messages, field by field, rmqctl finds one by its key, and a
consumer of our SDK in the ali-ons group starts after what ali-ons committed. A consumer that
fails every message gets each back through CONSUMER_SEND_MSG_BACK and the retry topic until it
lands in the group's DLQ; two consumers of one group share the queues and rebalance."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from client.admin import Admin
from client.consumer import Consumer
from client.message import ReceivedMessage
from client.producer import Producer
from tests.cluster.support import shared_cluster
from tests.support.alions import create_topic, run_alions
from tests.support.cluster import Cluster
from tests.support.procs import rmqctl
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess

TOPIC = "AlionsTopic"
GROUP = "alions-group"
COUNT = 12


classic = shared_cluster(2, name="classic")
"""One cluster for the module: each test has a topic and group of its own (AlionsTopic and
alions-group, AlionsRetryTopic and alions-failing, AlionsShareTopic and alions-sharing)."""


async def test_alions_produces_and_consumes_through_the_classic_door(
    classic: Cluster, tmp_path: Path
) -> None:
    await create_topic(classic, TOPIC, 4)
    produced = await run_alions(classic, tmp_path, "produce", TOPIC, str(COUNT))
    sent = produced["sent"]
    assert len(sent) == COUNT
    # The broker picked no queue: ali-ons spread them over the route's four.
    assert {s["queueId"] for s in sent} == {0, 1, 2, 3}, sent

    # And the other way round: what our SDK sends, ali-ons reads with its tags, keys, property.
    async with Producer(classic.controller_addresses) as producer:
        for i in range(2):
            await producer.send(
                TOPIC,
                f"sdk-{i}".encode(),
                keys=f"sdk-key-{i}",
                tags="TagS",
                properties={"seq": f"s{i}"},
            )

    consumed = await run_alions(classic, tmp_path, "consume", TOPIC, GROUP, str(COUNT + 2))
    from_sdk = sorted(
        (m for m in consumed["received"] if m["body"].startswith("sdk-")), key=lambda m: m["body"]
    )
    assert [(m["body"], m["tags"], m["keys"], m["seq"]) for m in from_sdk] == [
        (f"sdk-{i}", "TagS", f"sdk-key-{i}", f"s{i}") for i in range(2)
    ], consumed
    received = [m for m in consumed["received"] if not m["body"].startswith("sdk-")]
    assert sorted(m["body"] for m in received) == sorted(f"alions-{i}" for i in range(COUNT))
    for m in received:
        i = int(m["body"].rsplit("-", 1)[1])
        assert (m["tags"], m["keys"], m["seq"]) == (
            "TagA" if i % 2 == 0 else "TagB",
            f"key-{i}",
            str(i),
        )
    by_key = {s["key"]: s for s in sent}
    for m in received:
        s = by_key[m["keys"]]
        assert (m["queueId"], m["queueOffset"]) == (s["queueId"], s["queueOffset"]), (m, s)

    # Our SDK reads the same messages, body, tags, keys and user property intact.
    got: dict[str, ReceivedMessage] = {}
    async with Consumer(classic.controller_addresses, "sdk-reader", TOPIC) as consumer:

        async def read_all() -> bool:
            for r in await consumer.receive(timeout=0.5):
                if r.body.startswith(b"alions-"):
                    got[r.body.decode()] = r
            return len(got) >= COUNT

        await wait_until_async(
            read_all, "our SDK to read ali-ons' messages", 30, on_timeout=classic.logs
        )
    assert sorted(got) == sorted(f"alions-{i}" for i in range(COUNT))
    for body, r in got.items():
        i = int(body.rsplit("-", 1)[1])
        assert (r.tags, r.keys, r.properties["seq"]) == (
            "TagA" if i % 2 == 0 else "TagB",
            f"key-{i}",
            str(i),
        )
        s = by_key[f"key-{i}"]
        assert (r.queue_id, r.queue_offset) == (s["queueId"], s["queueOffset"])

    # rmqctl finds one by its key, with ali-ons' message id.
    found = await asyncio.to_thread(
        rmqctl, "--json", "queryMsgByKey", "-a", classic.controller_addresses, "-t", TOPIC,
        "-k", "key-3", "--body",
    )  # fmt: skip
    assert found.returncode == 0, found.stderr
    (hit,) = json.loads(found.stdout)["messages"]
    assert hit["msgId"] == by_key["key-3"]["msgId"]
    assert (hit["body"], hit["tags"], hit["keys"], hit["properties"]["seq"]) == (
        "alions-3", "TagB", "key-3", "3",
    )  # fmt: skip

    # ali-ons committed its offsets: our SDK's consumer of its group starts after them.
    async with Producer(classic.controller_addresses) as producer:
        await producer.send(TOPIC, b"after-alions")
    after: list[bytes] = []
    async with Consumer(classic.controller_addresses, GROUP, TOPIC) as consumer:

        async def read_sentinel() -> bool:
            after.extend(r.body for r in await consumer.receive(timeout=0.5))
            return b"after-alions" in after

        await wait_until_async(
            read_sentinel, "the SDK consumer of the ali-ons group", 30, on_timeout=classic.logs
        )
    assert after == [b"after-alions"], after


async def test_alions_failures_come_back_as_retries_and_reach_the_dlq(
    classic: Cluster, tmp_path: Path
) -> None:
    topic, group, count, max_retries = "AlionsRetryTopic", "alions-failing", 2, 2
    await create_topic(classic, topic, 1)
    async with Admin(classic.controller_addresses, timeout=2.0) as admin:
        await admin.update_sub_group({"groupName": group, "retryDelays": "1s"})
    produced = await run_alions(classic, tmp_path, "produce", topic, str(count))
    assert len(produced["sent"]) == count
    failed = await run_alions(classic, tmp_path, "fail", topic, group, str(count), str(max_retries))
    by_body: dict[str, list[dict[str, Any]]] = {}
    for d in failed["deliveries"]:
        by_body.setdefault(d["body"], []).append(d)
    assert sorted(by_body) == [f"alions-{i}" for i in range(count)]
    for body, ds in by_body.items():
        # The first delivery, then one per retry; ali-ons shows a retry under its first topic.
        assert [d["reconsumeTimes"] for d in ds[: max_retries + 1]] == [0, 1, 2], ds
        assert {d["topic"] for d in ds} == {topic} and {d["keys"] for d in ds} == {
            f"key-{body[7:]}"
        }

    # Past its retries each message went to the group's DLQ: the original, retried twice.
    async with Admin(classic.controller_addresses, timeout=2.0) as admin:

        async def dead() -> list[dict[str, Any]]:
            found = await admin.query_dlq(group)
            messages = [m for ms in found.values() for m in ms]
            return messages if len(messages) >= count else []

        messages = await wait_until_async(
            dead, "both messages in the DLQ", 30, on_timeout=classic.logs
        )
    assert isinstance(messages, list)
    assert sorted(m["originMsgId"] for m in messages) == sorted(
        s["msgId"] for s in produced["sent"]
    )
    assert {(m["originTopic"], m["reconsumeTimes"]) for m in messages} == {(topic, max_retries)}


async def test_two_alions_consumers_share_the_queues_and_rebalance_when_one_leaves(
    classic: Cluster, tmp_path: Path
) -> None:
    topic, group, count, queues = "AlionsShareTopic", "alions-sharing", 16, 4
    await create_topic(classic, topic, queues)
    result = await run_alions(classic, tmp_path, "share", topic, group, str(count), str(queues))
    first, second = result["first"], result["second"]
    # Both members got queues of their own (the member list of GET_CONSUMER_LIST_BY_GROUP).
    assert first["a"] and first["b"], result
    assert not set(first["a"]) & set(first["b"]), result
    assert set(first["a"]) | set(first["b"]) == {0, 1, 2, 3}, result
    # b left (UNREGISTER_CLIENT, its connection closed): a reads every queue.
    assert second["a"] == [0, 1, 2, 3] and second["b"] == [], result
    want = sorted([f"one-{i}" for i in range(count)] + [f"two-{i}" for i in range(count)])
    assert result["bodies"] == want
