"""A long-polling pull with a tag filter against a real lone broker waits for a matching message:
messages of other tags that land while it waits are passed over without answering it; a
matching one answers it with that message; at the timeout PULL_NOT_FOUND's ``nextBeginOffset``
is past what it passed over, so the consumer's offset (and the group's commit) covers them."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from client.admin import Admin
from client.producer import Producer
from protocol.codes import ResponseCode
from protocol.message import iter_records
from protocol.pull import PullFound, PullNotFound, PullRequest, decode_pull_answer
from protocol.remoting import Frame
from remoting.client import RemotingClient
from tests.support.metrics import scrape
from tests.support.procs import BrokerProc, free_port
from tests.support.wait import stays_async, wait_until_async

pytestmark = pytest.mark.multiprocess

TOPIC = "T"
HIT, MISS = "Hit", "Miss"


def waiting(port: int) -> float:
    """rmq_broker_pulls_waiting on the broker's /metrics."""
    for line in scrape(port).splitlines():
        if line.startswith("rmq_broker_pulls_waiting"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("rmq_broker_pulls_waiting is not served")


async def test_a_filtered_long_poll_passes_over_other_tags_while_it_waits(tmp_path: Path) -> None:
    port = free_port()
    broker = BrokerProc(tmp_path, extra=["--metrics-port", str(port)]).start_and_wait()
    try:
        async with Admin(broker.address) as admin:
            await admin.create_topic(TOPIC, 1)
        conn = await RemotingClient.connect(broker.address, timeout=2.0)
        async with Producer(broker.address) as producer:

            async def send(*tags: str) -> None:
                for tag in tags:
                    await producer.send(TOPIC, tag.encode(), tags=tag)

            def pull(offset: int, suspend_ms: int) -> asyncio.Task[Frame]:
                req = PullRequest(
                    group="G",
                    topic=TOPIC,
                    queue_id=0,
                    offset=offset,
                    suspend_ms=suspend_ms,
                    subscription=HIT,
                )
                return asyncio.ensure_future(
                    conn.request(req.code, req.header(), None, suspend_ms / 1000 + 10)
                )

            async def parked(task: asyncio.Task[Frame]) -> None:
                await wait_until_async(
                    lambda: task.done() or waiting(port) == 1, "the pull to wait", 10
                )
                assert not task.done(), task.result().header

            try:
                # A pull that passes over entries answers at once: nothing matched, past them.
                await send(MISS, MISS, MISS)
                answer = decode_pull_answer(await pull(0, 0))
                assert answer == PullFound(next_offset=3, count=0, body=b"")

                # Waiting at the end: other tags land and the pull goes on waiting ...
                task = pull(3, 8000)
                await parked(task)
                await send(MISS, MISS)
                await stays_async(lambda: not task.done(), 1.5, "the pull waiting past other tags")
                # ... until a matching message lands: that message, and past it.
                await send(HIT)
                answer = decode_pull_answer(await asyncio.wait_for(task, 10))
                assert isinstance(answer, PullFound) and answer.next_offset == 6
                assert [(r.queue_offset, r.tags) for r in iter_records(answer.body)] == [(5, HIT)]

                # Nothing matching before the timeout: PULL_NOT_FOUND past what landed.
                task = pull(6, 2500)
                await parked(task)
                await send(MISS, MISS, MISS)
                resp = await asyncio.wait_for(task, 10)
                assert resp.code == ResponseCode.PULL_NOT_FOUND, resp.header
                assert decode_pull_answer(resp) == PullNotFound(next_offset=9)
            finally:
                conn.close()
    finally:
        broker.stop()
