"""Tag filtering by the ConsumeQueue's tag hash against a real lone broker: a pull and a POP over
thousands of messages of another tag return only the matching ones and move the offset past
the rest; two tags with the same hash (``plumless`` and ``buckeroo``, one CRC32) never mix."""

from __future__ import annotations

import time

import pytest

from client.admin import Admin
from client.message import Message
from client.producer import Producer
from client.progress import ProgressAdmin
from client.simple_consumer import PopMessage, SimpleConsumer
from protocol.codes import ResponseCode
from protocol.message import iter_records, tag_hash
from protocol.pull import PullRequest
from remoting.client import RemotingClient
from tests.support.procs import BrokerProc

pytestmark = pytest.mark.multiprocess

TWIN_A, TWIN_B = "plumless", "buckeroo"
BEFORE, AFTER = 3000, 2000
TOTAL = BEFORE + 2 + AFTER


async def _fill(address: str) -> None:
    async with Admin(address) as admin:
        await admin.create_topic("T", 1)
    async with Producer(address) as producer:

        async def run(tag: str, n: int) -> None:
            for first in range(0, n, 250):
                batch = [Message(body=b"x", tags=tag) for _ in range(min(250, n - first))]
                await producer.send_batch("T", batch)

        await run("X", BEFORE)
        await producer.send("T", b"a", tags=TWIN_A)
        await producer.send("T", b"b", tags=TWIN_B)
        await run("X", AFTER)


async def test_pull_and_pop_pass_over_other_tags_and_resolve_a_hash_collision(
    broker: BrokerProc,
) -> None:
    assert tag_hash(TWIN_A) == tag_hash(TWIN_B)
    await _fill(broker.address)
    conn = await RemotingClient.connect(broker.address, timeout=2.0)
    try:
        # Queue-bound pulls: the only record served is TWIN_A's, and the offset reaches the end.
        offset, served, pulls = 0, [], 0
        while offset < TOTAL:
            pulls += 1
            assert pulls <= 20, f"pulls do not move on (offset {offset})"
            pull = PullRequest(
                group="G", topic="T", queue_id=0, offset=offset, max_count=32, subscription=TWIN_A
            )
            resp = await conn.request(pull.code, pull.header(), None, 5.0)
            assert resp.code == ResponseCode.SUCCESS, resp.header
            next_offset = resp.header["nextBeginOffset"]
            assert isinstance(next_offset, int) and next_offset > offset
            served += [(r.queue_offset, r.tags) for r in iter_records(resp.body or b"")]
            assert resp.header["count"] == len(list(iter_records(resp.body or b"")))
            offset = next_offset
        assert served == [(BEFORE, TWIN_A)] and offset == TOTAL
    finally:
        conn.close()

    # POP: each twin's group receives its own message only; the POP offset passes the rest.
    for group, tag, at in (("PA", TWIN_A, BEFORE), ("PB", TWIN_B, BEFORE + 1)):
        async with SimpleConsumer(broker.address, group, "T", filter=tag) as consumer:
            got: list[PopMessage] = []
            deadline = time.monotonic() + 20
            while not got and time.monotonic() < deadline:
                got = await consumer.receive(16, invisible_duration=30, wait=1.0)
            assert [(m.queue_offset, m.tags) for m in got] == [(at, tag)]
            await consumer.ack(got[0])
            assert await consumer.receive(16, invisible_duration=30, wait=0.5) == []
    async with ProgressAdmin(broker.address) as progress:
        for group in ("PA", "PB"):
            (answer,) = await progress.consume_stats(group, "T")
            assert answer.stats is not None
            (row,) = answer.stats.groups[group]
            assert (row.consumer_offset, row.lag, row.inflight) == (TOTAL, 0, 0), row
