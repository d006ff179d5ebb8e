"""A POP consumer of the SDK is a live member of its group while it runs (found by trying
issue 28's commands on make run: consumerConnection said 'has no live member' while
consumeMessage --pop ran, so resendMessage refused the group and a reset told no member): it
heart-beats like RocketMQ's POP consumers, and leaves the group when closed, well before the
brokers' client expiry would drop it."""

from __future__ import annotations

import asyncio
import json

import pytest

from client.admin import Admin
from client.simple_consumer import SimpleConsumer
from tests.support.cli import rmqctl_run as rmqctl
from tests.support.procs import BrokerProc
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess


def member_ids(address: str, group: str) -> set[str]:
    out = rmqctl("--json", "consumerConnection", "-a", address, "-g", group)
    if out.returncode != 0:  # no live member: one line, exit 1
        assert "no live member" in out.stderr, out.stderr
        return set()
    return {m["clientId"] for m in json.loads(out.stdout)["members"]}


def test_a_pop_consumer_is_listed_while_it_runs_and_leaves_when_closed(
    broker: BrokerProc,
) -> None:
    a = broker.address

    async def run() -> None:
        async with Admin(a) as admin:
            await admin.create_topic("T", 2)
        consumer = SimpleConsumer(a, "P", "T", heartbeat_interval=0.5)
        await consumer.start()
        try:
            await wait_until_async(
                lambda: asyncio.to_thread(lambda: consumer.client_id in member_ids(a, "P")),
                "consumerConnection to list the POP consumer",
                20,
            )
            member = consumer.client_id
        finally:
            await consumer.close()
        # Gone at once (UNREGISTER_CLIENT), not after the 10 s client expiry.
        await wait_until_async(
            lambda: asyncio.to_thread(lambda: member not in member_ids(a, "P")),
            "the closed POP consumer to leave the group",
            5,
        )

    asyncio.run(run())
