"""A static topic's physical queues exist on the groups' masters once ``rmqctl
updateStaticTopic`` (and ``remapStaticTopic``, on the target) answers, real processes: three
controllers, broker-a and broker-b (one broker each).

A send that leaves the queue to the broker (as gRPC clients' do), made right after the answer,
lands on one of the topic's physical queues there, and the broker and the route keep exactly
the controllers' queue count: the broker did not create the topic with its default 8 queues on
that send (queues no logical reader would ever see). It did before: the controllers' push of
the physical queues, which a controller-mode broker forwards back to them, was refused as an
``updateTopic`` of a static topic, so no broker ever had them until a send auto-created them.
"""

from __future__ import annotations

import asyncio
import json

import msgpack
import pytest

from protocol.codes import RequestCode, ResponseCode
from remoting.client import RemotingClient
from tests.cluster.support import masters_of, two_groups
from tests.support.cli import rmqctl
from tests.support.cluster import Cluster

pytestmark = pytest.mark.multiprocess

TOPIC = "Fresh"


def test_the_masters_have_the_physical_queues_when_the_static_topic_commands_answer(
    cluster: Cluster,
) -> None:
    asyncio.run(scenario(cluster, two_groups(cluster)))


async def send_anywhere(address: str) -> tuple[int, dict[str, int]]:
    """One send to ``address`` leaving the queue to the broker: the queue it chose and the
    broker's topics' queue counts afterwards."""
    conn = await RemotingClient.connect(address)
    try:
        sent = await conn.request(
            RequestCode.SEND_MESSAGE, {"topic": TOPIC, "queueId": -1}, b"body", 10
        )
        assert sent.code == ResponseCode.SUCCESS, sent.header
        topics = await conn.request(RequestCode.GET_ALL_TOPIC_CONFIG, {}, None, 10)
        configs = msgpack.unpackb(topics.body, raw=False)
    finally:
        conn.close()
    counts = {t: c["queues"] if isinstance(c, dict) else c for t, c in configs.items()}
    return int(sent.header["queueId"]), counts


async def scenario(cluster: Cluster, addrs: str) -> None:
    masters = await masters_of(cluster, "broker-a", "broker-b")

    async def route() -> dict[str, int]:
        code, out, err = await asyncio.to_thread(
            rmqctl, "--json", "topicRoute", "-a", addrs, "-t", TOPIC
        )
        assert code == 0, err
        return {b["brokerName"]: b["queues"] for b in json.loads(out)["brokers"]}

    code, _, err = await asyncio.to_thread(
        rmqctl, "updateStaticTopic", "-a", addrs, "-t", TOPIC, "-q", "2", "-b", "broker-a"
    )
    assert code == 0, err
    queue, counts = await send_anywhere(masters["broker-a"])
    assert queue in (0, 1) and counts.get(TOPIC) == 2, counts
    assert await route() == {"broker-a": 2}

    # A move to a group that had none of the topic: its master has the new queue on the answer.
    code, _, err = await asyncio.to_thread(
        rmqctl, "remapStaticTopic", "-a", addrs, "-t", TOPIC, "-q", "1", "-b", "broker-b"
    )
    assert code == 0, err
    queue, counts = await send_anywhere(masters["broker-b"])
    assert queue == 0 and counts.get(TOPIC) == 1, counts
    assert await route() == {"broker-a": 2, "broker-b": 1}
