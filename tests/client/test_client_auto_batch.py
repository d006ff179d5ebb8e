"""Auto-batching against a real broker process: concurrent sends gathered into SEND_BATCH_MESSAGE
requests keep their own results and errors."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from client.admin import Admin
from client.errors import BrokerError
from client.message import SendResult
from client.producer import Producer
from protocol.codes import ResponseCode
from tests.client.receiving import consume
from tests.support.procs import BrokerProc, small_segments_config

pytestmark = pytest.mark.multiprocess


async def create_topic(address: str, topic: str, queues: int) -> None:
    async with Admin(address) as admin:
        await admin.create_topic(topic, queues)


async def test_gathered_sends_get_their_own_ids_and_consecutive_offsets(
    broker: BrokerProc,
) -> None:
    await create_topic(broker.address, "One", 1)
    scheduled = {5, 50, 150}  # scheduled messages ride in the batches too
    async with Producer(broker.address) as p:
        await p.send("One", b"warm-up")  # route cached: the sends below gather
        results: list[SendResult] = await asyncio.gather(
            *(
                p.send("One", b"m%d" % i, keys=f"k{i}", delay=600 if i in scheduled else None)
                for i in range(200)
            )
        )
        # A scheduled message's id recalls it: the id is that message's own.
        await p.recall("One", results[50].msg_id)
    assert len({r.msg_id for r in results}) == 200
    plain = [r for i, r in enumerate(results) if i not in scheduled]
    assert sorted(r.queue_offset for r in plain) == list(range(1, 198))
    assert all(results[i].queue_offset == -1 and results[i].scheduled for i in scheduled)
    got = await consume(broker.address, "One", 198)
    by_offset = {m.queue_offset: m for m in got}
    for i, r in enumerate(results):
        if i not in scheduled:
            m = by_offset[r.queue_offset]
            assert (m.body, m.keys, m.msg_id) == (b"m%d" % i, f"k{i}", r.msg_id)


async def test_a_message_the_broker_refuses_fails_alone(
    broker_factory: type[BrokerProc], tmp_path: Path
) -> None:
    config = small_segments_config(tmp_path, "limits", "max_message_bytes = 4096\n")
    broker = broker_factory(tmp_path, extra=["--config", str(config)]).start_and_wait()
    await create_topic(broker.address, "T", 2)
    bodies = [b"x" * (8192 if i == 7 else 100) + b"%d" % i for i in range(30)]
    async with Producer(broker.address) as p:  # its own limit (4 MiB) lets 8 KiB through
        await p.send("T", b"warm-up")
        outcomes = await asyncio.gather(*(p.send("T", b) for b in bodies), return_exceptions=True)
    error = outcomes[7]
    assert isinstance(error, BrokerError) and error.code == ResponseCode.MESSAGE_ILLEGAL
    sent = {o.msg_id: bodies[i] for i, o in enumerate(outcomes) if isinstance(o, SendResult)}
    assert len(sent) == 29
    got = await consume(broker.address, "T", 30)
    assert {m.msg_id: m.body for m in got if m.body != b"warm-up"} == sent
