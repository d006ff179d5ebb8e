"""Retention of old static topic items against real processes: three controllers (checking the
items every 0.3 s), broker-a with a tiny retention (64 KiB CommitLog segments deleted 0.36 s
after they are full) and broker-b.

Logical queue 0 of a static topic holds logical 0-9 on broker-a, then moves to broker-b (10-19
there). A consumer group's position is at logical 3, committed as the SDK consumer commits it
(3 on broker-a's item, the start of broker-b's). Other traffic on broker-a rolls its CommitLog,
retention deletes the segment holding the old item, and the active controller drops the item:
``rmqctl staticTopicMapping`` shows only broker-b's, from logical 10. The group, restarted with
``start_from="latest"``, goes on from the first remaining item's start: it reads exactly 10-19,
in logical order, not the logical max.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from client import Consumer, Producer
from client.message import ReceivedMessage
from protocol.codes import RequestCode, ResponseCode
from protocol.pull import ConsumerOffsetUpdate
from protocol.static_topic import commit_points, parse_queue
from remoting.client import RemotingClient
from tests.cluster.support import masters_of
from tests.support.cli import rmqctl, rmqctl_json
from tests.support.cluster import Cluster
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess

TOPIC = "Kept"
GROUP = "behind"
CONTROLLER_TOML = "static_item_check_interval_ms = 300\n"
SMALL_RETENTION = "retention_hours = 0.0001\nretention_check_interval_ms = 100\n"


def test_retention_drops_an_old_item_and_a_group_behind_it_reads_what_remains(
    tmp_path: Path,
) -> None:
    cluster = Cluster(tmp_path)
    cluster.configure_controllers(CONTROLLER_TOML)
    try:
        cluster.start_controllers()
        cluster.add_group("broker-a", 1, config=SMALL_RETENTION, segment_bytes=64 * 1024)
        cluster.add_group("broker-b", 1)
        asyncio.run(scenario(cluster, cluster.controller_addresses))
    finally:
        cluster.stop()


async def call(address: str, code: int, header: dict[str, Any], body: bytes | None) -> None:
    conn = await RemotingClient.connect(address)
    try:
        resp = await conn.request(code, header, body, 10)
        assert resp.code == ResponseCode.SUCCESS, resp.header
    finally:
        conn.close()


async def scenario(cluster: Cluster, addrs: str) -> None:
    masters = await masters_of(cluster, "broker-a", "broker-b")

    def mapping() -> Any:
        return rmqctl_json(addrs, "staticTopicMapping", "-t", TOPIC)

    code, _, err = await asyncio.to_thread(
        rmqctl, "updateStaticTopic", "-a", addrs, "-t", TOPIC, "-q", "1", "-b", "broker-a"
    )
    assert code == 0, err
    async with Producer(addrs, retries=6) as producer:
        for n in range(10):
            await producer.send(TOPIC, f"old-{n}".encode())
        code, _, err = await asyncio.to_thread(
            rmqctl, "remapStaticTopic", "-a", addrs, "-t", TOPIC, "-q", "0", "-b", "broker-b"
        )
        assert code == 0, err
        for n in range(10):
            await producer.send(TOPIC, f"new-{n}".encode())
    items = parse_queue((await asyncio.to_thread(mapping))["queues"][0]["items"])
    assert [(i.broker_name, i.logical_start, i.logical_end) for i in items] == [
        ("broker-a", 0, 10),
        ("broker-b", 10, None),
    ]
    # The group consumed logical 0-2: committed on every item, as the SDK consumer commits.
    for item, physical in commit_points(items, 3):
        update = ConsumerOffsetUpdate(
            group=GROUP, topic=TOPIC, queue_id=item.physical_queue, offset=physical
        )
        await call(masters[item.broker_name], update.code, update.header(), None)

    # Other traffic on broker-a: its CommitLog rolls, retention deletes the old item's segment.
    filler = b"f" * 1024
    conn = await RemotingClient.connect(masters["broker-a"])
    try:
        for _ in range(160):
            resp = await conn.request(
                RequestCode.SEND_MESSAGE, {"topic": "Filler", "queueId": 0}, filler, 10
            )
            assert resp.code == ResponseCode.SUCCESS, resp.header
    finally:
        conn.close()

    async def dropped() -> bool:
        doc = await asyncio.to_thread(mapping)
        return len(doc["queues"][0]["items"]) == 1

    await wait_until_async(
        dropped, "the old item dropped", 20, interval=0.2, on_timeout=cluster.logs
    )
    (kept,) = (await asyncio.to_thread(mapping))["queues"][0]["items"]
    assert (kept["brokerName"], kept["logicalStart"], kept["generation"]) == ("broker-b", 10, 1)

    consumer = Consumer(
        addrs, GROUP, TOPIC, start_from="latest", suspend_ms=300, heartbeat_interval=0.5
    )
    got: list[ReceivedMessage] = []
    await consumer.start()
    try:

        async def read_all() -> bool:
            got.extend(await consumer.receive(timeout=0.3))
            return len(got) >= 10

        await wait_until_async(read_all, "the remaining messages", 20, interval=0.0)
    finally:
        await consumer.close()
    assert [m.queue_offset for m in got] == list(range(10, 20))
    assert [m.body for m in got] == [f"new-{n}".encode() for n in range(10)]
