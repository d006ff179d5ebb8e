"""resendDLQ sends each DLQ message once across a failover, real processes: the master is
killed (kill -9) right after it answered a resend, before its slave copied the resend ledger
(config/dlqResent.json, every slave_config_sync_interval_ms); the new master rebuilds the marks
from the re-sent copies in the CommitLog (``DLQ_RESENT_FROM``), so ``queryDLQ`` shows them
``Resent`` and a second ``--all`` sends none of them again."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from client import Consumer, Producer
from client.admin import Admin
from client.bootstrap import Bootstrap
from client.errors import ClientError
from client.message import ReceivedMessage
from tests.cluster.support import (
    create_topic,
    new_master,
    settings_on,
    synced_master,
    takes_writes,
    with_one_group,
)
from tests.support.cluster import Cluster
from tests.support.messages import FAST_CONSUMER
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess

N = 5

cluster = with_one_group(2)


async def test_dlq_messages_are_resent_once_across_a_failover(
    cluster: Cluster, boot: Bootstrap
) -> None:
    addrs = cluster.controller_addresses
    master = await synced_master(boot, cluster, size=2)
    (slave,) = [b for b in cluster.brokers if b is not master]
    await create_topic(boot, master.address, "T", 1)
    async with Admin(addrs) as admin:
        await admin.update_sub_group({"groupName": "G", "retryMaxTimes": 0})
        async with Producer(addrs) as producer:
            for i in range(N):
                await producer.send("T", f"poison-{i}".encode())

        def fail(msg: ReceivedMessage) -> None:
            raise ValueError("cannot parse")

        async with Consumer(addrs, "G", "T", **FAST_CONSUMER) as consumer:
            task = asyncio.ensure_future(consumer.process(fail))
            try:

                async def parked() -> list[dict[str, Any]] | None:
                    got = (await admin.query_dlq("G")).get("broker-a", [])
                    return got if len(got) == N else None

                await wait_until_async(
                    parked, "the messages in the DLQ", 30, interval=0.2, on_timeout=cluster.logs
                )
            finally:
                task.cancel()

        async def copied() -> bool:
            got = await settings_on(slave.address, "G")
            return got is not None and got["retryMaxTimes"] == 0

        await wait_until_async(
            copied, "the slave to copy G's settings", 20, on_timeout=cluster.logs
        )

        first = await admin.resend_dlq("G")
        assert len(first["broker-a"]["resent"]) == N, first
        master.kill9()  # right after the resend was answered: the slave's ledger lacks it
        after = await new_master(boot, cluster, master.address)
        assert after["masterAddress"] == slave.address

        await wait_until_async(
            lambda: takes_writes(slave.address),
            "the new master to take writes",
            30,
            on_timeout=cluster.logs,
        )
        flags = [m["resent"] for m in (await admin.query_dlq("G"))["broker-a"]]

        async def resent_again() -> dict[str, Any] | None:
            try:  # a refused resend (the route still names the old master) sends nothing
                return (await admin.resend_dlq("G"))["broker-a"]
            except ClientError:
                return None

        second = await wait_until_async(
            resent_again, "a resend on the new master", 30, interval=0.2, on_timeout=cluster.logs
        )
    assert second["resent"] == [], (
        f"re-sent again after the failover: {len(second['resent'])} of {N} "
        f"(queryDLQ's resent flags on the new master: {flags})"
    )
    assert flags == [True] * N
