"""A broker with more queues than it may open file descriptors (issue 34: "a file descriptor per
queue left open"): every queue takes messages, the broker starts again on them and serves them.

Each ConsumeQueue segment was kept mapped from its queue's first message (or the store's open)
until the broker stopped, and a mapping holds a descriptor: past ``LimitNOFILE`` the next
queue's first put failed, and a broker with that many queues on disk could not start. The
broker runs here under ``prlimit --nofile`` with a soft limit below its queue count; the short
variant runs in ``make test``, the 10x column of bench/scale_bench.py's brokers (10,000 queues)
in ``make soak``."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from protocol.codes import RequestCode, ResponseCode
from protocol.message import iter_records, parse_msg_id
from protocol.pull import MaxOffsetQuery
from protocol.remoting import Header
from remoting.client import RemotingClient
from tests.support.procs import BrokerProc

pytestmark = pytest.mark.multiprocess

QUEUES = 8


def limited_broker(tmp: Path, nofile: int) -> BrokerProc:
    broker = BrokerProc(tmp, extra_toml="consumequeue_segment_entries = 64\n")
    broker.argv = ["prlimit", f"--nofile={nofile}:", *broker.argv]  # the soft limit only
    return broker


async def each(n: int, one: Callable[[int], Awaitable[None]], inflight: int = 32) -> None:
    todo = iter(range(n))

    async def worker() -> None:
        for i in todo:
            await one(i)

    await asyncio.gather(*(worker() for _ in range(inflight)))


async def create_and_fill(broker: BrokerProc, topics: int) -> int:
    """``topics`` topics of 8 queues (``Many00000``...), one message in every queue; returns
    the CommitLog offset of the last record stored."""
    conn = await RemotingClient.connect(broker.address)
    starts: list[int] = []
    try:

        async def create(t: int) -> None:
            header: Header = {"topic": f"Many{t:05d}", "queues": QUEUES}
            await conn.call(RequestCode.UPDATE_AND_CREATE_TOPIC, header, timeout=60)

        await each(topics, create, inflight=8)

        async def send(q: int) -> None:
            header: Header = {"topic": f"Many{q // QUEUES:05d}", "queueId": q % QUEUES}
            resp = await conn.request(RequestCode.SEND_MESSAGE, header, b"m%d" % q, 60)
            assert resp.code == ResponseCode.SUCCESS, (q, resp.code, resp.header)
            starts.append(parse_msg_id(str(resp.header["msgId"]))[1])

        await each(topics * QUEUES, send)
    finally:
        conn.close()
    return max(starts)


async def one_more_everywhere(broker: BrokerProc, queues: int, bodies: list[bytes]) -> None:
    """Every queue holds ``bodies`` (``%d`` its number), takes one more message at the offset
    after them and serves them all by PULL."""
    conn = await RemotingClient.connect(broker.address)
    try:

        async def again(q: int) -> None:
            topic, queue_id = f"Many{q // QUEUES:05d}", q % QUEUES
            held = [body % q for body in bodies]
            ask = MaxOffsetQuery(topic=topic, queue_id=queue_id)
            resp = await conn.request(ask.code, *ask.encode(), 30)
            assert int(str(resp.header["offset"])) == len(held), (q, resp.header)
            header: Header = {"topic": topic, "queueId": queue_id}
            more = b"n%d-%d" % (len(held), q)
            resp = await conn.request(RequestCode.SEND_MESSAGE, header, more, 60)
            assert resp.code == ResponseCode.SUCCESS, (q, resp.code, resp.header)
            assert int(str(resp.header["queueOffset"])) == len(held), (q, resp.header)
            pull: Header = {
                "consumerGroup": "g",
                "topic": topic,
                "queueId": queue_id,
                "queueOffset": 0,
                "maxMsgNums": len(held) + 1,
                "suspendTimeoutMillis": 0,
            }
            resp = await conn.request(RequestCode.PULL_MESSAGE, pull, timeout=30)
            assert resp.code == ResponseCode.SUCCESS, (q, resp.code, resp.header)
            got = [r.body for r in iter_records(resp.body or b"")]
            assert got == [*held, more], (q, got)

        await each(queues, again)
    finally:
        conn.close()


async def fill_restart_and_read(tmp: Path, topics: int, nofile: int) -> None:
    queues = topics * QUEUES
    assert queues > nofile  # a descriptor per queue cannot fit
    broker = limited_broker(tmp, nofile)
    try:
        broker.start_and_wait(60)
        await create_and_fill(broker, topics)
        fds = len(os.listdir(f"/proc/{broker.pid}/fd"))
        assert fds < nofile / 2, fds
        broker.stop()
        broker.start_and_wait(120)  # every queue's files on disk, opened again
        await one_more_everywhere(broker, queues, [b"m%d"])
        fds = len(os.listdir(f"/proc/{broker.pid}/fd"))
        assert fds < nofile / 2, fds
    finally:
        broker.stop()


async def test_a_broker_serves_more_queues_than_it_may_open_descriptors(tmp_path: Path) -> None:
    await fill_restart_and_read(tmp_path, topics=64, nofile=256)  # 512 queues


@pytest.mark.soak
async def test_ten_thousand_queues_under_a_limit_of_four_thousand_descriptors(
    tmp_path: Path,
) -> None:
    await fill_restart_and_read(tmp_path, topics=1250, nofile=4096)
