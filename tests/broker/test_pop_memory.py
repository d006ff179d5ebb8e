"""The in-flight set's memory follows what is in flight, not the invisible time: an in-process
broker over a real socket pops and acks thousands of messages hidden for an hour, and the
revive task's deadline heap stays within the in-flight entries plus a fixed slack. Before acked
items were compacted away it held one per delivery acked after the oldest one in flight, for
the hour."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from broker.broker import Broker
from broker.config import BrokerConfig
from broker.pop.inflight import COMPACT_MIN
from client.simple_consumer import SimpleConsumer
from protocol.message import Message
from tests.broker.support import figure, running
from tests.support.procs import free_port

MESSAGES = 6_000


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    cfg = BrokerConfig(
        listen=f"127.0.0.1:{free_port()}",
        data_dir=tmp_path / "broker-a",
        metrics_port=0,
    )
    async with running(cfg) as b:
        b.ctx.create_topic("T", 2)
        for queue_id in (0, 1):
            for _ in range(MESSAGES // 2 // 500):
                batch = [Message(topic="T", body=b"m" * 64) for _ in range(500)]
                b.ctx.appender.put("T", queue_id, batch, 64 * 500)
        yield b


async def test_acked_messages_with_a_long_invisible_time_leave_the_in_flight_set(
    broker: Broker,
) -> None:
    peak = 0
    address = f"127.0.0.1:{broker.port}"
    # One message stays in flight for the hour (its consumer quit without an ack): every
    # delivery acked after it waits behind it in deadline order.
    async with SimpleConsumer(address, "G", "T") as quitter:
        held = await quitter.receive(1, invisible_duration=3600, wait=2)
        assert len(held) == 1
    received = 1
    async with SimpleConsumer(address, "G", "T") as consumer:
        while received < MESSAGES:
            got = await consumer.receive(32, invisible_duration=3600, wait=2)
            assert got, f"nothing more after {received} of {MESSAGES}"
            received += len(got)
            assert await consumer.ack_many(got) == [None] * len(got)
            state = broker.ctx.pop.state
            assert state is not None
            peak = max(peak, state.deadline_items())
        assert figure(broker, "rmq_broker_pop_acks_total", group="G") == MESSAGES - 1
        state = broker.ctx.pop.state
        assert state is not None and state.inflight() == 1
        # One in flight: at most the stale items below the compaction threshold remain besides
        # it (without compaction: one per message popped in the hour, 6,000).
        assert state.deadline_items() <= 1 + COMPACT_MIN + 1
        assert peak <= 1 + 32 + COMPACT_MIN + 1
        assert await consumer.receive(32, invisible_duration=3600, wait=0.2) == []
