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
from client.consumer import Consumer
from client.simple_consumer import SimpleConsumer
from protocol.rocketmq_remoting.codes import RequestCode as ClassicCode
from protocol.rocketmq_remoting.codes import ResponseCode as ClassicResponse
from tests.support.classic import Raw, consumer_heartbeat
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


def connections(address: str, group: str, *json_flag: str) -> str:
    out = rmqctl(*json_flag, "consumerConnection", "-a", address, "-g", group)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_consumer_connection_shows_pop_members_reading_every_queue_and_the_others_their_share(
    broker: BrokerProc,
) -> None:
    """consumerConnection computed every member's queues with the averaging allocation, as a
    rebalancing member computes its share; POP members hold none (every one reads every queue),
    so a POP group was shown a fictitious assignment. Now each member's heartbeat says how it
    consumes: a POP group (this SDK's Consumer(pop=True) and SimpleConsumer, and a classic
    CONSUME_POP member) shows consume type pop and "POP: every queue"; a queue-bound group on
    the same topic shows push and its members' shares, computed among them only."""
    a = broker.address

    async def run() -> None:
        async with Admin(a) as admin:
            await admin.create_topic("T", 4)
        pops = [
            Consumer(a, "P", "T", pop=True, heartbeat_interval=0.5),
            SimpleConsumer(a, "P", "T", heartbeat_interval=0.5),
        ]
        bound = [Consumer(a, "R", "T", heartbeat_interval=0.5) for _ in range(2)]
        classic = await Raw.open(broker.port)
        try:
            for c in [*pops, *bound]:
                await c.start()
            beat = consumer_heartbeat("classic-pop", "P", "T", consume_type="CONSUME_POP")
            answer = await classic.call(ClassicCode.HEART_BEAT, {}, beat)
            assert answer.code == ClassicResponse.SUCCESS, answer.remark
            want_p = {c.client_id for c in pops} | {"classic-pop"}
            want_r = {c.client_id for c in bound}
            await wait_until_async(
                lambda: asyncio.to_thread(
                    lambda: member_ids(a, "P") == want_p and member_ids(a, "R") == want_r
                ),
                "consumerConnection to list both groups' members",
                20,
            )

            p = json.loads(await asyncio.to_thread(connections, a, "P", "--json"))["members"]
            assert {m["clientId"]: (m["consumeType"], m["queues"]) for m in p} == {
                cid: ("pop", []) for cid in want_p
            }, p
            table = await asyncio.to_thread(connections, a, "P")
            rows = [line for line in table.splitlines() if any(c in line for c in want_p)]
            assert len(rows) == 3 and all("POP: every queue" in r for r in rows), table
            assert all(" pop " in r for r in rows), table

            r = json.loads(await asyncio.to_thread(connections, a, "R", "--json"))["members"]
            assert [m["consumeType"] for m in r] == ["push", "push"], r
            shares = [{(q["brokerName"], q["queueId"]) for q in m["queues"]} for m in r]
            assert [len(s) for s in shares] == [2, 2], r  # 4 queues between the 2 of them
            assert not shares[0] & shares[1]
            assert {q for _, q in shares[0] | shares[1]} == {0, 1, 2, 3}

            # The list rebalancing members share the queues among leaves the POP members out;
            # the classic ConsumerConnection says the group pops.
            async def listed(group: str) -> list[str]:
                got = await classic.call(
                    ClassicCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group}
                )
                assert got.code == ClassicResponse.SUCCESS, got.remark
                return sorted(json.loads(got.body)["consumerIdList"])

            assert await listed("P") == []
            assert await listed("R") == sorted(want_r)
            got = await classic.call(
                ClassicCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "P"}
            )
            assert got.code == ClassicResponse.SUCCESS, got.remark
            assert json.loads(got.body)["consumeType"] == "CONSUME_POP"
        finally:
            classic.close()
            for c in [*pops, *bound]:
                await c.close()

    asyncio.run(run())
