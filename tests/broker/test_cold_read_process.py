"""Cold reads against a real broker process (issue 30 item 4): a new group reading from the start
of a log whose pages were evicted from the page cache reads at ``cold_read_bytes_per_s``, off
the event loop, while a producer's sends go on; every record it gets is intact and in order."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from client.message import Message
from client.producer import Producer
from client.simple_consumer import SimpleConsumer
from protocol.codes import RequestCode, ResponseCode
from protocol.message import iter_records
from remoting.client import RemotingClient
from storage.cold_read import READ_AHEAD
from tests.broker.test_lone_scrub import figure
from tests.support.page_cache import evict
from tests.support.procs import BrokerProc, free_port
from tests.support.wait import wait_until

pytestmark = pytest.mark.multiprocess

SEGMENT = 8 << 20
COUNT = 24_000  # about 26 MiB: three full segments and a part
SIZE = 1000
RATE = 1 << 20
COLD = 6 << 20
"""Bytes read from the start of the log: the first segment less its end, which the restart's
recovery reads (the newest timestamp of each segment) with the device's readahead."""


def body(i: int) -> bytes:
    return f"c{i}:".encode().ljust(SIZE, b"x")


def evict_log(data_dir: Path) -> None:
    """Drop the CommitLog's pages from the page cache: those the broker has not mapped in (a
    restart maps none but the few recovery touched) leave for real."""
    for path in (data_dir / "commitlog").iterdir():
        evict(path)


async def fill(address: str) -> None:
    conn = await RemotingClient.connect(address)
    try:
        for topic in ("Cold", "Hot"):
            resp = await conn.call(
                RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": topic, "queues": 1}
            )
            assert resp.code == ResponseCode.SUCCESS
    finally:
        conn.close()
    async with Producer(address) as producer:
        for start in range(0, COUNT, 200):
            batch = [Message(body=body(i)) for i in range(start, start + 200)]
            await producer.send_batch("Cold", batch)


async def read_cold(address: str) -> tuple[int, float]:
    """Pull queue Cold:0 from 0 until ``COLD`` bytes came: (bytes, seconds)."""
    conn = await RemotingClient.connect(address)
    got = offset = 0
    began = time.monotonic()
    try:
        while got < COLD:
            header: dict[str, str | int] = {
                "consumerGroup": "catching-up",
                "topic": "Cold",
                "queueId": 0,
                "queueOffset": offset,
                "maxMsgNums": 32,
            }
            resp = await conn.request(RequestCode.PULL_MESSAGE, header, timeout=30)
            assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.header)
            for record in iter_records(resp.body or b""):
                assert record.queue_offset == offset and record.body == body(offset)
                offset += 1
            got += len(resp.body or b"")
    finally:
        conn.close()
    return got, time.monotonic() - began


async def send_while(address: str, done: asyncio.Event) -> list[float]:
    """Single sends to Hot, 8 in flight, until ``done``: each one's latency."""
    latencies: list[float] = []
    async with Producer(address) as producer:

        async def sender() -> None:
            while not done.is_set():
                began = time.monotonic()
                await producer.send("Hot", b"h" * 200)
                latencies.append(time.monotonic() - began)

        await asyncio.gather(*(sender() for _ in range(8)))
    return latencies


async def cold_broker(broker_factory: type[BrokerProc], tmp_path: Path) -> tuple[BrokerProc, int]:
    """A broker over a filled log, restarted, the log's pages evicted: (it, its metrics port)."""
    metrics = free_port()
    broker = broker_factory(
        tmp_path,
        segment_bytes=SEGMENT,
        # Nothing else reads the old log at start or in the background: the scrub is off; so
        # is the timer, which re-reads the CommitLog from its saved progress when it opens
        # (from the start here: no message was scheduled); and the idempotent producers'
        # state, rebuilt at the first send after the restart, is snapshotted every MiB (by
        # default every 64 MiB: it would read this whole log from its start).
        extra_toml=(
            "scrub_bytes_per_s = 0\ntimer_enable = false\nproducer_snapshot_bytes = 1048576\n"
            f"cold_read_bytes_per_s = {RATE}\n"
        ),
    )
    broker.argv[broker.argv.index("--metrics-port") + 1] = str(metrics)
    broker.start_and_wait()
    await fill(broker.address)
    assert broker.stop() == 0
    broker.start_and_wait()
    evict_log(broker.data_dir)
    wait_until(lambda: figure(metrics, "rmq_broker_cold_reads_total") == 0, "metrics", 20)
    return broker, metrics


async def test_a_group_catching_up_reads_at_the_cold_rate_while_sends_go_on(
    broker_factory: type[BrokerProc], tmp_path: Path
) -> None:
    broker, metrics = await cold_broker(broker_factory, tmp_path)
    done = asyncio.Event()
    sending = asyncio.create_task(send_while(broker.address, done))
    try:
        got, seconds = await read_cold(broker.address)
    finally:
        done.set()
    latencies = await sending

    cold = figure(metrics, "rmq_broker_cold_read_bytes_total")
    # Much of what the group read was cold (the restart's recovery and the first send read
    # some of it), loaded a MiB at a time (storage.cold_read.READ_AHEAD), and it came at the
    # rate, not at the disk's speed.
    assert cold >= COLD / 3, (cold, got)
    assert figure(metrics, "rmq_broker_cold_reads_total") >= cold // READ_AHEAD
    assert seconds >= (cold - RATE * 0.1) / RATE * 0.9, (seconds, cold)
    assert figure(metrics, "rmq_broker_cold_read_throttled_seconds_total") > 1.0
    # The producer's sends went on all along.
    assert len(latencies) >= 20 * seconds, (len(latencies), seconds)
    latencies.sort()
    assert latencies[int(len(latencies) * 0.99)] < 1.0, latencies[-10:]


async def test_a_pop_of_cold_messages_loads_them_off_the_loop_first(
    broker_factory: type[BrokerProc], tmp_path: Path
) -> None:
    broker, metrics = await cold_broker(broker_factory, tmp_path)
    offsets: list[int] = []
    async with SimpleConsumer(broker.address, "pop-catching-up", "Cold") as consumer:
        while len(offsets) < 400:
            got = await consumer.receive(32, 60.0, wait=5.0)
            assert got, f"no message after {len(offsets)}"
            for msg in got:
                assert msg.body == body(msg.queue_offset)
                offsets.append(msg.queue_offset)
                await consumer.ack(msg)
    assert offsets == list(range(len(offsets)))  # in order, none twice, none missing
    # The first POPs' records were cold, loaded a MiB at a time before the POP read them.
    assert figure(metrics, "rmq_broker_cold_reads_total") >= 1
    assert figure(metrics, "rmq_broker_cold_read_bytes_total") >= 400 * SIZE
