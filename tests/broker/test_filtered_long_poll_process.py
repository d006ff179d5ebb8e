"""A long-polling pull with a tag filter against a real lone broker waits for a matching message:
messages of other tags that land while it waits are passed over without answering it; a
matching one answers it with that message; at the timeout PULL_NOT_FOUND's ``nextBeginOffset``
is past what it passed over, so the consumer's offset (and the group's commit) covers them."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from client.producer import Producer
from protocol.codes import ResponseCode
from protocol.message import iter_records
from protocol.pull import PullFound, PullNotFound, PullRequest, decode_pull_answer
from tests.broker.support import long_polls
from tests.support.procs import BrokerProc, free_port
from tests.support.wait import stays_async

pytestmark = pytest.mark.multiprocess

TOPIC = "T"
HIT, MISS = "Hit", "Miss"
TAG_PULL = PullRequest(group="G", topic=TOPIC, queue_id=0, offset=0, subscription=HIT)


async def test_a_filtered_long_poll_passes_over_other_tags_while_it_waits(tmp_path: Path) -> None:
    port = free_port()
    broker = BrokerProc(tmp_path, extra=["--metrics-port", str(port)]).start_and_wait()
    try:
        async with (
            long_polls(broker, port, TAG_PULL) as polls,
            Producer(broker.address) as producer,
        ):

            async def send(*tags: str) -> None:
                for tag in tags:
                    await producer.send(TOPIC, tag.encode(), tags=tag)

            # A pull that passes over entries answers at once: nothing matched, past them.
            await send(MISS, MISS, MISS)
            answer = decode_pull_answer(await polls.pull(0, 0))
            assert answer == PullFound(next_offset=3, count=0, body=b"")

            # Waiting at the end: other tags land and the pull goes on waiting ...
            task = polls.pull(3, 8000)
            await polls.parked(task)
            await send(MISS, MISS)
            await stays_async(lambda: not task.done(), 1.5, "the pull waiting past other tags")
            # ... until a matching message lands: that message, and past it.
            await send(HIT)
            answer = decode_pull_answer(await asyncio.wait_for(task, 10))
            assert isinstance(answer, PullFound) and answer.next_offset == 6
            assert [(r.queue_offset, r.tags) for r in iter_records(answer.body)] == [(5, HIT)]

            # Nothing matching before the timeout: PULL_NOT_FOUND past what landed.
            task = polls.pull(6, 2500)
            await polls.parked(task)
            await send(MISS, MISS, MISS)
            resp = await asyncio.wait_for(task, 10)
            assert resp.code == ResponseCode.PULL_NOT_FOUND, resp.header
            assert decode_pull_answer(resp) == PullNotFound(next_offset=9)
    finally:
        broker.stop()
