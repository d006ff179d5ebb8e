"""Classic members leave their group on RocketMQ's rule, on a real broker's client port.

RocketMQ's clients (the Java client, ali-ons) heart-beat every 30 s and their broker forgets a
channel after 120 s of silence (channelExpiredTimeout), or at once when its connection closes.
Our own clients' members keep ``client_expiry_ms`` (10 s by default). Raw classic frames for the
classic member, our protocol's HEART_BEAT for our SDK's member, one group for both."""

from __future__ import annotations

import asyncio
import json

import pytest

from protocol.codes import RequestCode as OurCode
from protocol.codes import ResponseCode as OurResponse
from protocol.rocketmq_remoting.codes import RequestCode, ResponseCode
from remoting.client import RemotingClient
from tests.support.classic import Raw, consumer_heartbeat
from tests.support.cli import rmqctl_run as rmqctl
from tests.support.procs import BrokerProc
from tests.support.wait import stays_async, wait_until_async

pytestmark = pytest.mark.multiprocess

TOPIC = "ClassicMembers"
GROUP = "G"
CLASSIC_BEAT_S = 30.0  # ali-ons' and the Java client's heartbeatBrokerInterval


async def test_a_classic_member_beating_every_30_s_stays_listed_and_leaves_when_its_connection_closes(
    broker: BrokerProc,
) -> None:
    ours = await RemotingClient.connect(broker.address)
    classic, watcher = await Raw.open(broker.port), await Raw.open(broker.port)
    loop = asyncio.get_running_loop()

    async def listed() -> list[str]:
        answer = await watcher.call(
            RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": GROUP}
        )
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        return sorted(json.loads(answer.body)["consumerIdList"])

    async def beat() -> float:
        answer = await classic.call(
            RequestCode.HEART_BEAT, {}, consumer_heartbeat("classic-c", GROUP, TOPIC)
        )
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        return loop.time()

    async def classic_listed() -> bool:
        ids = await listed()
        assert "classic-c" in ids, f"the classic member left its group between heartbeats: {ids}"
        return True

    try:
        created = await ours.call(OurCode.UPDATE_AND_CREATE_TOPIC, {"topic": TOPIC, "queues": 2})
        assert created.code == OurResponse.SUCCESS
        beaten = await beat()
        sdk = {"clientId": "sdk-c", "consumerGroup": GROUP, "topic": TOPIC}
        assert (await ours.call(OurCode.HEART_BEAT, sdk)).code == OurResponse.SUCCESS
        assert await listed() == ["classic-c", "sdk-c"]

        # Our SDK's member, silent, leaves after client_expiry_ms (10 s) as before; the classic
        # one, silent as long, stays: listed at every read until the SDK's member is gone (the
        # 60 s only bound a hang; the classic member's silence may last 120 s).
        async def sdk_gone() -> bool:
            await classic_listed()
            return "sdk-c" not in await listed()

        await wait_until_async(sdk_gone, "our SDK's silent member gone", 60, interval=0.5)
        print(f"our SDK's member gone {loop.time() - beaten:.1f} s after the heartbeats")
        await stays_async(
            classic_listed,
            max(0.0, beaten + CLASSIC_BEAT_S - 1 - loop.time()),
            "the classic member listed until its next heartbeat",
            interval=0.5,
        )
        # consumerConnection (rmqctl) lists it too, 29 s after its heartbeat.
        done = await asyncio.to_thread(
            rmqctl, "--json", "consumerConnection", "-a", broker.address, "-g", GROUP
        )
        assert done.returncode == 0, done.stderr
        members = json.loads(done.stdout)["members"]
        assert [(m["clientId"], m["protocol"]) for m in members] == [("classic-c", "classic")]
        await asyncio.sleep(max(0.0, beaten + CLASSIC_BEAT_S - loop.time()))  # its cadence
        await beat()
        await stays_async(classic_listed, 3, "the classic member listed", interval=0.5)

        # Its connection closed: gone at once (not 120 s later).
        classic.close()

        async def gone() -> bool:
            return await listed() == []

        await wait_until_async(
            gone, "the classic member gone once its connection closed", 5, interval=0.1
        )
    finally:
        classic.close()
        watcher.close()
        ours.close()
