"""A POP delivery whose copy can never be written does not hold back the others revived with
it, and they come back once each. A real lone broker: a message whose properties are within the
limit, but whose revived copy (the retry properties added) would pass it, is given up with one
error line; another message not acked in the same POP comes back once, not again every second
(before, the failed copy failed the whole round: the entries before it were re-published at
every retry of the round, the ones after it never)."""

from __future__ import annotations

import time

import pytest

from client.admin import Admin
from client.producer import Producer
from client.simple_consumer import PopMessage, SimpleConsumer
from protocol.message import MAX_PROPERTIES_BYTES
from tests.support.procs import BrokerProc, module_broker
from tests.support.wait import stays_async, wait_until

pytestmark = pytest.mark.multiprocess

broker = module_broker("pop-revive-unwritable")

BIG = {"big": "x" * (MAX_PROPERTIES_BYTES - 120)}
"""Properties a send may carry, which the revived copy's own (origin topic, message id,
attempts, reason) take past :data:`MAX_PROPERTIES_BYTES`."""


@pytest.mark.parametrize("big_first", [False, True], ids=["big-second", "big-first"])
async def test_an_unwritable_copy_holds_back_no_other_delivery(
    broker: BrokerProc, big_first: bool
) -> None:
    topic = "revive-big-first" if big_first else "revive-big-second"
    group = f"G-{topic}"
    async with Admin(broker.address) as admin:
        await admin.create_topic(topic, 1)
    async with Producer(broker.address, idempotent=False) as producer:
        order = [("big", BIG), ("small", None)] if big_first else [("small", None), ("big", BIG)]
        for body, props in order:
            await producer.send(topic, body.encode(), properties=props)
    async with SimpleConsumer(broker.address, group, topic) as consumer:
        first: list[PopMessage] = []
        deadline = time.monotonic() + 20
        while len(first) < 2 and time.monotonic() < deadline:
            first += await consumer.receive(2 - len(first), invisible_duration=1, wait=1.0)
        assert [m.body for m in first] == [b.encode() for b, _ in order]
        # Neither is acked: after 1 s both are due in one revive round.
        again: list[PopMessage] = []
        deadline = time.monotonic() + 15
        while not again and time.monotonic() < deadline:
            again += await consumer.receive(8, invisible_duration=60, wait=1.0)
        assert [m.body for m in again] == [b"small"] and again[0].attempt == 2
        await consumer.ack(again[0])
        # The small one came back once: no further copy within 4 s (the round was retried
        # every second before), and the big one not at all.
        later: list[PopMessage] = []

        async def nothing_more() -> bool:
            later.extend(await consumer.receive(8, invisible_duration=60, wait=0.5))
            return not later

        await stays_async(
            nothing_more,
            4.0,
            "no other delivery",
            interval=0.0,
            on_failure=lambda: repr([(m.body, m.attempt) for m in later]),
        )
    wait_until(
        lambda: "pop revive: a copy that can never be written" in broker.log(),
        "the given-up delivery logged",
    )
    assert "pop revive round failed" not in broker.log()
