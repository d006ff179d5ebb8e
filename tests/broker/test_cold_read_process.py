"""Cold reads against a real broker process (issue 30 item 4): a new group reading from the start
of a log whose pages were evicted from the page cache reads at ``cold_read_bytes_per_s``, off
the event loop, while a producer's sends go on; every record it gets is intact and in order."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator
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
SENDERS = 8
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


async def read_cold(address: str, order: Iterator[int]) -> tuple[int, float, list[tuple[int, int]]]:
    """Pull queue Cold:0 from 0 until ``COLD`` bytes came: (bytes, seconds, each pull's (asked,
    answered) places in ``order``)."""
    conn = await RemotingClient.connect(address)
    got = offset = 0
    pulls: list[tuple[int, int]] = []
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
            asked = next(order)
            resp = await conn.request(RequestCode.PULL_MESSAGE, header, timeout=30)
            pulls.append((asked, next(order)))
            assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.header)
            for record in iter_records(resp.body or b""):
                assert record.queue_offset == offset and record.body == body(offset)
                offset += 1
            got += len(resp.body or b"")
    finally:
        conn.close()
    return got, time.monotonic() - began, pulls


async def send_while(
    address: str, done: asyncio.Event, order: Iterator[int]
) -> tuple[list[float], list[int]]:
    """Single sends to Hot, SENDERS in flight, until ``done``: each one's latency, and the
    places in ``order`` where each was answered."""
    latencies: list[float] = []
    answered: list[int] = []
    async with Producer(address) as producer:

        async def sender() -> None:
            while not done.is_set():
                began = time.monotonic()
                await producer.send("Hot", b"h" * 200)
                answered.append(next(order))
                latencies.append(time.monotonic() - began)

        await asyncio.gather(*(sender() for _ in range(SENDERS)))
    return latencies, answered


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
    order = itertools.count()  # one order of the pulls' and the sends' events
    sending = asyncio.create_task(send_while(broker.address, done, order))
    try:
        got, seconds, pulls = await read_cold(broker.address, order)
    finally:
        done.set()
    latencies, answered = await sending

    cold = figure(metrics, "rmq_broker_cold_read_bytes_total")
    # Much of what the group read was cold (the restart's recovery and the first send read
    # some of it), loaded a MiB at a time (storage.cold_read.READ_AHEAD), and it came at the
    # rate, not at the disk's speed.
    assert cold >= COLD / 3, (cold, got)
    assert figure(metrics, "rmq_broker_cold_reads_total") >= cold // READ_AHEAD
    assert seconds >= (cold - RATE * 0.1) / RATE * 0.9, (seconds, cold)
    assert figure(metrics, "rmq_broker_cold_read_throttled_seconds_total") > 1.0
    # The producer's sends went on while the pulls waited for their cold loads: a pull held
    # by a load the loop waited for (read or throttled on it) lets the SENDERS sends in flight
    # be answered about once or twice while it is pending (16 at most when tried); a load off
    # the loop lets the senders go round many times (thousands here). The sends answered
    # between each pull's ask and answer are counted in one order of events, not timed.
    during = [sum(1 for a in answered if asked < a < back) for asked, back in pulls]
    latencies.sort()
    print(
        f"{got:,} bytes in {seconds:.1f} s by {len(pulls)} pulls; {len(latencies)} sends, p99 "
        f"{latencies[int(len(latencies) * 0.99)]:.3f} s; most sends answered during one pull "
        f"{max(during)}"
    )
    assert max(during) > 4 * SENDERS, (
        f"at most {max(during)} sends answered while a pull waited ({SENDERS} in flight): "
        f"the cold loads held the loop"
    )


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
