"""Message groups against a real broker process: each group's messages go to the queue its group
hashes to, in the order of the send() calls, with the group in ``__SHARDINGKEY``."""

from __future__ import annotations

import asyncio

import pytest

from client.admin import Admin
from client.errors import ClientError
from client.message import Message, SendResult
from client.producer import Producer
from client.routes import MessageQueue
from protocol.fifo import PROP_MESSAGE_GROUP, group_queue
from tests.client.receiving import consume
from tests.support.procs import BrokerProc

pytestmark = pytest.mark.multiprocess


@pytest.mark.parametrize("auto_batch", [True, False])
async def test_groups_go_to_their_queue_in_send_order(broker: BrokerProc, auto_batch: bool) -> None:
    async with Admin(broker.address) as admin:
        await admin.create_topic("G", 4)
    groups = [f"order-{g}" for g in range(20)]
    async with Producer(broker.address, auto_batch=auto_batch) as p:
        # Concurrent sends, made before any route is cached: every group's sends in call order.
        sends = [
            p.send("G", f"{g}:{i}".encode(), message_group=g) for i in range(20) for g in groups
        ]
        results: list[SendResult] = await asyncio.gather(*sends)
        # A batch with groups: each item to its own group's queue, in the order given.
        batch = [
            Message(body=f"{g}:{i}".encode(), message_group=g)
            for i in range(20, 25)
            for g in groups
        ]
        results += await p.send_batch("G", batch)
    queues = [MessageQueue(broker.name, q) for q in range(4)]
    by_group: dict[str, list[SendResult]] = {g: [] for g in groups}
    order = [g for i in range(20) for g in groups] + [g for i in range(20, 25) for g in groups]
    for g, r in zip(order, results, strict=True):
        by_group[g].append(r)
    for g, rs in by_group.items():
        assert {r.queue_id for r in rs} == {group_queue(g, queues).queue_id}
        offsets = [r.queue_offset for r in rs]
        assert offsets == sorted(offsets)  # stored in send order
    got = await consume(broker.address, "G", len(results))
    seen: dict[str, list[int]] = {g: [] for g in groups}
    for m in sorted(got, key=lambda m: (m.queue_id, m.queue_offset)):
        g, i = m.body.decode().split(":")
        assert m.properties[PROP_MESSAGE_GROUP] == g
        seen[g].append(int(i))
    assert all(seq == list(range(25)) for seq in seen.values())


async def test_bad_message_groups_are_refused_before_sending(broker: BrokerProc) -> None:
    async with Admin(broker.address) as admin:
        await admin.create_topic("B", 2)
    async with Producer(broker.address) as p:
        with pytest.raises(ClientError, match="exceeds the limit of 128 bytes"):
            await p.send("B", b"x", message_group="g" * 129)
        with pytest.raises(ClientError, match="cannot be scheduled"):
            await p.send("B", b"x", message_group="g", delay=5)
        with pytest.raises(ClientError, match="empty"):
            await p.send("B", b"x", message_group="")
