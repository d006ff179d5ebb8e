"""Logical reads of a static topic against real processes: three controllers, broker-a and
broker-b (one broker each).

An SDK producer and an SDK consumer run while ``rmqctl remapStaticTopic`` moves logical queue 1
from broker-a to broker-b: the consumer reads queue 1 from broker-a up to the seal, then from
broker-b, and gets every acknowledged message once, with logical offsets 0, 1, 2, ... per logical
queue (the ones on broker-b: the seal plus their physical offset). The group's lag
(``rmqctl consumerProgress``) is logical, one row per logical queue, and returns to 0. Queue
0 then moves too while no member runs, and a consumer of the same group started after that
resumes from the group's logical offsets (queue 0's only on its old item): it gets exactly the
messages sent meanwhile, on from where the first one stopped, and the lag returns to 0 again.

The ``rmq`` source (its reader, as a Spark task runs it) reads the topic by logical queue: the
same (logical queue, logical offset, body) as the consumers, also from a store time on; and
``rmqstore`` on the two groups' store directories, given the mapping, together shows the same.
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from client import Consumer, Producer
from client.errors import ClientError
from client.message import ReceivedMessage
from tests.cluster.support import masters_of, remap_static_topic, two_groups
from tests.support.cli import rmqctl
from tests.support.cluster import Cluster
from tests.support.wait import stays_async, wait_until_async

pytestmark = pytest.mark.multiprocess

TOPIC = "Readings"
GROUP = "readers"


def consumer(addrs: str) -> Consumer:
    return Consumer(
        addrs,
        GROUP,
        TOPIC,
        suspend_ms=500,
        commit_interval=0.2,
        heartbeat_interval=0.5,
        route_refresh_interval=2.0,
    )


async def consume_until(stop: asyncio.Event, c: Consumer, got: list[ReceivedMessage]) -> None:
    while not stop.is_set():
        got.extend(await c.receive(timeout=0.3))


async def produce(stop: asyncio.Event, addrs: str, acked: list[str]) -> None:
    async with Producer(addrs, retries=6) as producer:
        n = 0
        while not stop.is_set():
            body = f"m-{n}"
            n += 1
            try:
                await producer.send(TOPIC, body.encode())
            except ClientError:
                continue
            acked.append(body)


def check_logical_order(got: list[ReceivedMessage], start: dict[int, int]) -> dict[int, int]:
    """Per logical queue, the offsets come once each, in order, from ``start`` (0 when absent)
    with no gap; returns each queue's next offset."""
    by_queue: dict[int, list[int]] = defaultdict(list)
    for m in got:
        assert m.logical_queue is not None and m.logical_offset == m.queue_offset
        by_queue[m.queue_id].append(m.queue_offset)
    nxt = dict(start)
    for queue, offsets in by_queue.items():
        first = start.get(queue, 0)
        assert offsets == list(range(first, first + len(offsets))), (queue, offsets[:20])
        nxt[queue] = first + len(offsets)
    return nxt


async def progress(addrs: str) -> Any:
    code, out, _ = await asyncio.to_thread(
        rmqctl, "--json", "consumerProgress", "-a", addrs, "-g", GROUP, "-t", TOPIC
    )
    return json.loads(out) if code == 0 else None


Row = tuple[int, int, bytes]


def test_a_consumer_reads_across_a_move_by_logical_offset_and_resumes(
    cluster: Cluster, tmp_path: Path
) -> None:
    addrs = two_groups(cluster)
    everything, later, later_from = asyncio.run(scenario(cluster, addrs))
    pipeline_reads(cluster, addrs, tmp_path, everything, later, later_from)


def pipeline_reads(
    cluster: Cluster,
    addrs: str,
    tmp_path: Path,
    everything: set[Row],
    later: set[Row],
    later_from: int,
) -> None:
    pytest.importorskip("pyspark", reason="the spark extra is not installed")
    from pipeline.batch_reader import RmqBatchReader
    from pipeline.options import ReadOptions
    from pipeline.rows import message_schema
    from pipeline.store import RmqStoreReader, StoreOptions

    def rows(reader: RmqBatchReader | RmqStoreReader) -> list[Row]:
        return [
            (r["queueId"], r["queueOffset"], r["body"])
            for part in reader.partitions()
            for batch in reader.read(part)
            for r in batch.to_pylist()
        ]

    source = rows(
        RmqBatchReader(
            ReadOptions.parse({"controllers": addrs, "topic": TOPIC, "minPartitions": "3"}),
            message_schema(),
        )
    )
    assert len(source) == len(set(source)) and set(source) == everything
    since = rows(
        RmqBatchReader(
            ReadOptions.parse(
                {"controllers": addrs, "topic": TOPIC, "startingTimestamp": str(later_from)}
            ),
            message_schema(),
        )
    )
    assert set(since) == later

    code, out, err = rmqctl("--json", "staticTopicMapping", "-a", addrs, "-t", TOPIC)
    assert code == 0, err
    mapping = tmp_path / "mapping.json"
    mapping.write_text(out)
    stored: list[Row] = []
    for node in cluster.brokers:
        options = {
            "path": str(node.data_dir),
            "brokerName": node.broker_name,
            "topic": TOPIC,
            "staticTopicMapping": str(mapping),
        }
        stored += rows(RmqStoreReader(StoreOptions.parse(options), message_schema(store=True)))
    assert len(stored) == len(set(stored)) and set(stored) == everything


async def scenario(cluster: Cluster, addrs: str) -> tuple[set[Row], set[Row], int]:
    await masters_of(cluster, "broker-a", "broker-b")
    code, _, err = await asyncio.to_thread(
        rmqctl, "updateStaticTopic", "-a", addrs, "-t", TOPIC, "-q", "2", "-b", "broker-a"
    )
    assert code == 0, err

    acked: list[str] = []
    got: list[ReceivedMessage] = []
    stop_sending, stop_reading = asyncio.Event(), asyncio.Event()
    first = consumer(addrs)
    await first.start()
    reading = asyncio.create_task(consume_until(stop_reading, first, got))
    sending = asyncio.create_task(produce(stop_sending, addrs, acked))
    try:
        await wait_until_async(lambda: len(got) >= 30, "reads before the move", 30, interval=0.05)
        moved = await remap_static_topic(cluster, addrs, TOPIC, 1, "broker-b")
        old, new = moved["queues"][1]["items"]
        seal = old["logicalEnd"]
        assert (new["brokerName"], new["logicalStart"]) == ("broker-b", seal)

        def read_on_b() -> bool:
            return sum(m.broker_name == "broker-b" for m in got) >= 20

        await wait_until_async(
            read_on_b, "reads from broker-b", 30, interval=0.05, on_timeout=cluster.logs
        )
        stop_sending.set()
        await sending
        await wait_until_async(
            lambda: set(acked) <= {m.body.decode() for m in got}, "every acked message read", 30
        )

        # For more than a commit interval nothing may come again (no duplicates).
        def read_once() -> bool:
            bodies = [m.body.decode() for m in got]
            return len(bodies) == len(set(bodies))

        await stays_async(read_once, 1.0, "every message read once", interval=0.05)
    finally:
        stop_sending.set()
        stop_reading.set()
        await asyncio.gather(sending, reading, return_exceptions=True)
    # Until a receive hands out nothing more: it confirms everything handed out before.
    while more := await first.receive(timeout=0.5):
        got.extend(more)

    bodies = [m.body.decode() for m in got]
    assert len(bodies) == len(set(bodies)), "a message was read twice"
    assert set(acked) <= set(bodies)
    nxt = check_logical_order(got, {})
    for m in got:
        if m.queue_id == 1 and m.broker_name == "broker-b":
            assert m.queue_offset == seal + m.physical_queue_offset
        elif m.queue_id == 1:
            assert m.queue_offset == m.physical_queue_offset < seal

    # The group's lag is logical, per logical queue, and comes back to 0.
    async def caught_up() -> Any:
        doc = await progress(addrs)
        return doc if doc and doc["totalLag"] == 0 and len(doc["queues"]) == 2 else None

    doc = await wait_until_async(caught_up, "lag back to 0", 30, interval=0.3)
    rows = {q["queueId"]: q for q in doc["queues"]}
    assert all(q["logical"] for q in rows.values())
    assert rows[1]["brokerName"] == "broker-b"
    assert rows[1]["maxOffset"] == rows[1]["consumerOffset"] == nxt[1]
    assert rows[0]["maxOffset"] == rows[0]["consumerOffset"] == nxt[0]
    await first.close()

    # Queue 0 moves while no member runs: the group's position in it is on its old item only.
    code, _, err = await asyncio.to_thread(
        rmqctl, "remapStaticTopic", "-a", addrs, "-t", TOPIC, "-q", "0", "-b", "broker-b"
    )
    assert code == 0, err

    # Sent while no member runs, then read by a new member from the group's logical offsets.
    async with Producer(addrs) as producer:
        later = {f"later-{i}" for i in range(20)}
        for body in sorted(later):
            await producer.send(TOPIC, body.encode())
    resumed: list[ReceivedMessage] = []
    async with consumer(addrs) as second:

        def all_later() -> bool:
            return later <= {m.body.decode() for m in resumed}

        async def read_some() -> bool:
            resumed.extend(await second.receive(timeout=0.3))
            return all_later()

        await wait_until_async(read_some, "the later messages", 30, interval=0.0)
        resumed.extend(await second.receive(timeout=1.0))
    assert {m.body.decode() for m in resumed} == later
    check_logical_order(resumed, nxt)
    assert {(m.queue_id, m.broker_name) for m in resumed} == {(0, "broker-b"), (1, "broker-b")}
    doc = await wait_until_async(caught_up, "lag back to 0 after the restart", 30, interval=0.3)
    assert {(q["queueId"], q["brokerName"]) for q in doc["queues"]} == {
        (0, "broker-b"),
        (1, "broker-b"),
    }
    everything = {(m.queue_id, m.queue_offset, m.body) for m in [*got, *resumed]}
    return (
        everything,
        {(m.queue_id, m.queue_offset, m.body) for m in resumed},
        min(m.store_timestamp for m in resumed),
    )
