"""Message traces across a master failover, real processes: a message sent, consumed by two
POP groups, one of which fails it twice (a nack, then a nack past retryMaxTimes 1: to its DLQ),
with the master killed -9 between the first group's ack and the second group's deliveries.
``rmqctl queryMsgTraceById`` shows every step in order with the right groups and attempts: the
records written before the kill were replicated like any message, the new master writes the
rest (docs/traces.md)."""

from __future__ import annotations

import asyncio
import json

import pytest

from client import Producer
from client.admin import Admin
from client.bootstrap import Bootstrap
from client.errors import ClientError
from client.simple_consumer import PopMessage, SimpleConsumer
from tests.cluster.support import master_with_topic, new_master, wait_routed, with_one_group
from tests.support.cluster import Cluster
from tests.support.procs import rmqctl
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess

cluster = with_one_group(2, config="trace_enabled = true\n")

Step = tuple[str, str, int | bool | str]


def _steps(addresses: str, msg_id: str) -> list[Step] | None:
    q = rmqctl("--json", "queryMsgTraceById", "-a", addresses, "-i", msg_id)
    if q.returncode != 0:
        return None
    out: list[Step] = []
    for s in json.loads(q.stdout)["steps"]:
        if s["type"] == "Pub":
            out.append(("Pub", s["topic"], s["source"]))
        elif s["type"] == "SubBefore":
            out.append(("SubBefore", s["group"], s["retryTimes"] + 1))
        elif s["type"] == "SubAfter":
            out.append(("SubAfter", s["group"], s["success"]))
        else:
            out.append((s["type"], s["group"], s["attempt"]))
    return out


async def _wait_trace(addresses: str, msg_id: str, want: list[Step]) -> None:
    last: list[object] = []

    async def shown() -> bool:
        got = await asyncio.to_thread(_steps, addresses, msg_id)
        last[:] = [got]
        return got == want

    await wait_until_async(
        shown, f"the trace {want}", 60, interval=0.5, on_timeout=lambda: f"shown: {last}"
    )


async def _one(consumer: SimpleConsumer, invisible: float) -> PopMessage:
    for _ in range(60):
        got = await consumer.receive(1, invisible_duration=invisible, wait=1.0)
        if got:
            return got[0]
    raise AssertionError("no message received in 60 s")


async def test_a_trace_shows_every_step_in_order_across_a_master_kill(
    cluster: Cluster, boot: Bootstrap
) -> None:
    master = await master_with_topic(boot, cluster, "T", 1, size=2)
    addresses = cluster.controller_addresses
    async with Producer(addresses, send_deadline=30) as producer:
        sent = await producer.send("T", b"order 7", keys="order-7")
    async with SimpleConsumer(addresses, "A", "T") as a:
        got = await _one(a, 30)
        assert got.msg_id == sent.msg_id
        await a.ack(got)
    before_kill: list[Step] = [
        ("Pub", "T", "broker"),
        ("SubBefore", "A", 1),
        ("SubAfter", "A", True),
    ]
    await wait_routed(addresses, "RMQ_SYS_TRACE_TOPIC")
    await _wait_trace(addresses, sent.msg_id, before_kill)

    master.kill9()
    after = await new_master(boot, cluster, master.address)
    assert after["masterAddress"] != master.address
    async with Admin(addresses) as admin:  # on the new master (a slave's copy may lag)

        async def updated() -> bool:
            try:
                await admin.update_sub_group({"groupName": "B", "retryMaxTimes": 1})
            except ClientError:
                return False  # named by the controllers, not master yet
            return True

        await wait_until_async(updated, "group B's settings on the new master", 30, interval=0.2)

    async with SimpleConsumer(addresses, "B", "T") as b:
        first = await _one(b, 30)
        assert (first.msg_id, first.attempt) == (sent.msg_id, 1)
        await b.change_invisible_duration(first, 1)  # fails it: back in a second
        second = await _one(b, 30)
        assert (second.origin_msg_id, second.attempt) == (sent.msg_id, 2)
        await b.change_invisible_duration(second, 1)  # fails it again: past retryMaxTimes
    await _wait_trace(
        addresses,
        sent.msg_id,
        [
            *before_kill,
            ("SubBefore", "B", 1),
            ("SubAfter", "B", False),
            ("Retry", "B", 1),
            ("SubBefore", "B", 2),
            ("SubAfter", "B", False),
            ("DLQ", "B", 2),
        ],
    )
