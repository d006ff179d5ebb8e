"""POP metrics on an in-process broker over a real socket: messages handed out, acks, the
in-flight gauge per group and redeliveries after the invisible time; past the group's
retryMaxTimes an unacked delivery goes to its DLQ."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from broker.broker import Broker
from client.admin import Admin
from client.simple_consumer import SimpleConsumer
from protocol.message import Message
from tests.broker.support import figure, running, small_config
from tests.support.messages import dead_lettered
from tests.support.wait import wait_until_async


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    async with running(small_config(tmp_path)) as b:  # a route names it: the SDK connects there
        b.ctx.create_topic("T", 1)
        b.ctx.appender.put("T", 0, [Message(topic="T", body=b"x") for _ in range(3)], 3)
        yield b


async def test_pop_metrics_follow_pops_acks_and_redeliveries(broker: Broker) -> None:
    async with SimpleConsumer(f"127.0.0.1:{broker.port}", "G", "T") as consumer:
        got = await consumer.receive(3, invisible_duration=1, wait=2)
        assert len(got) == 3
        await consumer.ack(got[0])
        assert figure(broker, "rmq_broker_pop_messages_total", group="G", topic="T") == 3
        assert figure(broker, "rmq_broker_pop_acks_total", group="G") == 1

        async def redelivered() -> bool:
            return figure(broker, "rmq_broker_pop_redeliveries_total", group="G", topic="T") == 2

        await wait_until_async(redelivered, "two redeliveries", 20, interval=0.1)
        again = await consumer.receive(3, invisible_duration=30, wait=2)
        assert sorted(m.attempt for m in again) == [2, 2]

        async def inflight_two() -> bool:
            return figure(broker, "rmq_broker_pop_inflight_messages", group="G") == 2

        await wait_until_async(inflight_two, "two in flight", 10, interval=0.1)
        for msg in again:
            await consumer.ack(msg)

        async def inflight_none() -> bool:
            return figure(broker, "rmq_broker_pop_inflight_messages", group="G") == 0

        await wait_until_async(inflight_none, "none in flight", 10, interval=0.1)
        assert figure(broker, "rmq_broker_pop_acks_total", group="G") == 3
        assert figure(broker, "rmq_broker_pop_ack_latency_seconds_count") == 3


async def test_past_retry_max_times_a_pop_delivery_goes_to_the_dlq(broker: Broker) -> None:
    address = f"127.0.0.1:{broker.port}"
    broker.ctx.create_topic("One", 1)
    broker.ctx.appender.put("One", 0, [Message(topic="One", body=b"poison")], 6)
    async with Admin(address) as admin:
        await admin.update_sub_group({"groupName": "D", "retryMaxTimes": 1})
        async with SimpleConsumer(address, "D", "One") as consumer:
            first = await consumer.receive(1, invisible_duration=1, wait=2)
            assert [m.attempt for m in first] == [1]
            second = await consumer.receive(1, invisible_duration=1, wait=10)
            assert [(m.attempt, m.origin_msg_id) for m in second] == [(2, first[0].msg_id)]

            (dead,) = await dead_lettered(admin, "D", "the message in %DLQ%D", 20, interval=0.1)
            assert dead["originMsgId"] == first[0].msg_id and dead["reconsumeTimes"] == 1
            assert figure(broker, "rmq_broker_dlq_messages_total", group="D", topic="One") == 1
            # Parked, it is not delivered again.
            assert await consumer.receive(1, invisible_duration=1, wait=1.5) == []
