"""queryMsgByTime and printMsg on a static topic whose logical queue 1 moved from broker-a to
broker-b (three controllers, one broker each): a range that spans the move finds every message
on both items, the sealed one on broker-a and the new one on broker-b, each shown at its
physical queue."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from client import Producer
from client.lookup import Lookup
from client.message import SendResult
from tests.cluster.support import masters_of, remap_static_topic, two_groups
from tests.support.cli import rmqctl, rmqctl_json
from tests.support.cluster import Cluster
from tests.support.wait import wait_until

pytestmark = pytest.mark.multiprocess

TOPIC = "Moved"


async def send(addrs: str, key: str, count: int) -> list[tuple[SendResult, int]]:
    async with Producer(addrs, send_deadline=30.0) as producer:
        sent = [await producer.send(TOPIC, f"{key}-{i}".encode(), keys=key) for i in range(count)]
    async with Lookup(addrs) as lookup:
        found = [await lookup.by_id(r.msg_id) for r in sent]
    return [(r, m.record.store_timestamp) for r, m in zip(sent, found, strict=True)]


async def test_a_range_across_a_remap_reads_both_items(cluster: Cluster) -> None:
    addrs = two_groups(cluster)
    await masters_of(cluster, "broker-a", "broker-b")
    code, _, err = await asyncio.to_thread(
        rmqctl, "updateStaticTopic", "-a", addrs, "-t", TOPIC, "-q", "2", "-b", "broker-a"
    )
    assert code == 0, err
    before = await send(addrs, "before", 12)
    assert {r.broker_name for r, _ in before} == {"broker-a"}
    await remap_static_topic(cluster, addrs, TOPIC, 1, "broker-b")
    wait_until(lambda: time.time() * 1000 > max(t for _, t in before) + 2, "a new ms", 5)
    after = await send(addrs, "after", 12)
    assert {r.broker_name for r, _ in after} == {"broker-a", "broker-b"}

    everything = before + after
    begin, end = min(t for _, t in everything), max(t for _, t in everything)
    doc = await asyncio.to_thread(
        rmqctl_json, addrs, "queryMsgByTime", "-t", TOPIC, "-b", str(begin), "-e", str(end)
    )
    assert sorted(m["msgId"] for m in doc["messages"]) == sorted(r.msg_id for r, _ in everything)
    shown = {m["msgId"]: (m["brokerName"], m["queueId"]) for m in doc["messages"]}
    assert all(shown[r.msg_id] == (r.broker_name, r.queue_id) for r, _ in everything)
    # printMsg of broker-a: both its physical queues, the sealed item's messages included.
    code, out, err = await asyncio.to_thread(
        rmqctl, "--json", "printMsg", "-a", addrs, "-t", TOPIC, "--broker", "broker-a",
        "--no-body",
    )  # fmt: skip
    assert code == 0, err
    on_a = sorted(m["msgId"] for q in json.loads(out)["queues"] for m in q["messages"])
    assert on_a == sorted(r.msg_id for r, _ in everything if r.broker_name == "broker-a")
