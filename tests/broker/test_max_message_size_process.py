"""``max_message_bytes`` is the largest message *body* a broker accepts (docs/config-reference.md),
against a real lone broker with a limit of 4096: a body of exactly that size is stored, and the
copies the broker makes of such a message with more properties (a nack's retry, a POP delivery
whose invisible time passed, a scheduled message delivered, a transaction committed) are stored
too. The broker once gave its store the body limit as the limit of a whole record (head, topic
and properties included): the largest body it stored was about 100 bytes short of the limit,
and a message near it could be sent but not retried, so a nack failed and a POP delivery was
never revived (the revive round failing every second, holding back every other due delivery).
The tests share one broker, each on a topic and consumer group of its own."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from client.admin import Admin
from client.consumer import Consumer
from client.producer import Producer
from client.simple_consumer import PopMessage, SimpleConsumer
from client.transaction import TransactionProducer, TransactionStatus
from tests.support.messages import FAST_CONSUMER
from tests.support.procs import BrokerProc, module_broker
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess

LIMIT = 4096
BODY = b"b" * LIMIT
"""A body of exactly the broker's max_message_bytes."""


def limited(tmp: Path) -> BrokerProc:
    return BrokerProc(tmp, extra_toml=f"max_message_bytes = {LIMIT}\n")


broker = module_broker("max-message-size", limited)


async def create(address: str, topic: str) -> None:
    async with Admin(address) as admin:
        await admin.create_topic(topic, 1)


async def test_a_body_of_max_message_bytes_is_stored_and_read_back(
    broker: BrokerProc, topic: str, group: str
) -> None:
    await create(broker.address, topic)
    async with Producer(broker.address, max_message_bytes=LIMIT) as producer:
        sent = await producer.send(topic, BODY, keys="k-limit", properties={"app": "x"})
    async with Consumer(broker.address, group, topic, **FAST_CONSUMER) as consumer:
        (got,) = await wait_until_async(
            lambda: consumer.receive(timeout=1.0), "the message at the limit", 20
        )
    assert (got.msg_id, got.body, got.keys, got.properties["app"]) == (
        sent.msg_id,
        BODY,
        "k-limit",
        "x",
    )


async def test_a_nacked_message_at_the_limit_comes_back_as_a_retry(
    broker: BrokerProc, topic: str, group: str
) -> None:
    await create(broker.address, topic)
    async with Admin(broker.address) as admin:
        await admin.update_sub_group({"groupName": group, "retryMaxTimes": 3, "retryDelays": "1s"})
    async with Producer(broker.address) as producer:
        sent = await producer.send(topic, BODY, keys="k-nack")
    async with Consumer(broker.address, group, topic, **FAST_CONSUMER) as consumer:
        (first,) = await wait_until_async(
            lambda: consumer.receive(timeout=1.0), "the first delivery", 20
        )
        await consumer.nack(first, "not now")
        (again,) = await wait_until_async(
            lambda: consumer.receive(timeout=1.0), "the retried delivery", 20
        )
    assert (again.body, again.reconsume_times, again.origin_msg_id) == (BODY, 1, sent.msg_id)
    assert again.stored_topic == f"%RETRY%{group}"


async def test_a_pop_delivery_at_the_limit_not_acked_comes_back_and_holds_no_other_back(
    broker: BrokerProc, topic: str, group: str
) -> None:
    await create(broker.address, topic)
    async with Producer(broker.address) as producer:
        await producer.send(topic, BODY, keys="big")
        await producer.send(topic, b"small", keys="small")
    async with SimpleConsumer(broker.address, group, topic) as consumer:
        first: list[PopMessage] = []

        async def both_handed_out() -> bool:
            first.extend(await consumer.receive(2, invisible_duration=1, wait=1.0))
            return len(first) == 2

        await wait_until_async(both_handed_out, "both messages handed out", 20)
        # Neither is acked: after their invisible second both come back, attempt 2.
        again: list[PopMessage] = []

        async def both_back() -> list[PopMessage]:
            for msg in await consumer.receive(2, invisible_duration=30, wait=1.0):
                again.append(msg)
                await consumer.ack(msg)
            return again if len(again) == 2 else []

        await wait_until_async(both_back, "both deliveries back after their invisible time", 20)
    assert sorted((m.body, m.attempt) for m in again) == [(BODY, 2), (b"small", 2)]


async def test_a_scheduled_message_at_the_limit_is_delivered(
    broker: BrokerProc, topic: str, group: str
) -> None:
    await create(broker.address, topic)
    async with Producer(broker.address) as producer:
        sent = await producer.send(topic, BODY, keys="later", delay=0.5)
    assert sent.deliver_at_ms is not None
    async with Consumer(broker.address, group, topic, **FAST_CONSUMER) as consumer:
        (got,) = await wait_until_async(
            lambda: consumer.receive(timeout=1.0), "the scheduled message delivered", 20
        )
    assert (got.body, got.properties["UNIQ_KEY"]) == (BODY, sent.msg_id)


async def test_a_committed_transaction_at_the_limit_is_delivered(
    broker: BrokerProc, topic: str, group: str
) -> None:
    await create(broker.address, topic)
    async with TransactionProducer(
        broker.address, f"P-{topic}", lambda check: TransactionStatus.COMMIT, topics=[topic]
    ) as producer:
        txn = await producer.send_transaction(topic, BODY, keys="tx")
        await txn.commit()
    async with Consumer(broker.address, group, topic, **FAST_CONSUMER) as consumer:
        started = time.monotonic()
        (got,) = await wait_until_async(
            lambda: consumer.receive(timeout=1.0), "the committed message", 20
        )
    # Delivered by the commit, not by a check-back (the first comes 6 s after the half).
    assert time.monotonic() - started < 5
    assert (got.body, got.keys) == (BODY, "tx")
