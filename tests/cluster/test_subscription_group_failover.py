"""Consumer group settings are replicated like topic configs (issue 11 item 4), real processes:
updateSubGroup on the master reaches the slave, and after kill -9 of the master the new master
applies the same retry_max_times and back-off to nacks (one retry through its timing wheel,
then the DLQ)."""

from __future__ import annotations

import asyncio

import pytest

from client import Consumer, Producer
from client.admin import Admin
from client.bootstrap import Bootstrap
from client.message import ReceivedMessage
from tests.cluster.support import (
    new_master,
    settings_on,
    synced_master,
    with_one_group,
)
from tests.support.cluster import Cluster
from tests.support.messages import FAST_CONSUMER, dead_lettered
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess


cluster = with_one_group(2)


async def test_group_settings_reach_the_slave_and_the_new_master_applies_them(
    cluster: Cluster, boot: Bootstrap
) -> None:
    master = await synced_master(boot, cluster, size=2)
    (slave,) = [b for b in cluster.brokers if b is not master]
    addresses = cluster.controller_addresses
    async with Admin(addresses) as admin:
        await admin.create_topic("T", 1)
        stored = await admin.update_sub_group(
            {"groupName": "G", "retryMaxTimes": 1, "retryDelays": "1s"}
        )
    assert stored["broker-a"]["retryMaxTimes"] == 1

    async def copied() -> bool:
        got = await settings_on(slave.address, "G")
        return got is not None and got["retryMaxTimes"] == 1

    await wait_until_async(copied, "the slave to copy G's settings", 20, on_timeout=cluster.logs)
    master.kill9()
    after = await new_master(boot, cluster, master.address)
    assert after["masterAddress"] == slave.address
    assert (await settings_on(slave.address, "G")) == stored["broker-a"]

    # The new master applies retry_max_times = 1 (the default is 16): one retry, then the DLQ.
    async with Producer(addresses, send_deadline=30) as producer:
        sent = await producer.send("T", b"fails")
    failed: list[ReceivedMessage] = []

    def fail(msg: ReceivedMessage) -> None:
        failed.append(msg)
        raise RuntimeError("no")

    async with (
        Admin(addresses) as admin,
        Consumer(addresses, "G", "T", **FAST_CONSUMER) as consumer,
    ):
        task = asyncio.ensure_future(consumer.process(fail))
        try:
            (dead,) = await dead_lettered(
                admin,
                "G",
                "the nacked message in the DLQ",
                30,
                interval=0.2,
                on_timeout=cluster.logs,
            )
        finally:
            task.cancel()
    assert dead["originMsgId"] == sent.msg_id and dead["reconsumeTimes"] == 1
    assert dead["reason"] == "RuntimeError: no"
    assert [(m.stored_topic, m.reconsume_times) for m in failed] == [("T", 0), ("%RETRY%G", 1)]
    assert {(m.topic, m.origin_msg_id) for m in failed} == {("T", sent.msg_id)}
