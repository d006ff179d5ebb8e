"""A scheduled message of a static topic that comes due after its logical queue moved to
another group is read there, in logical order, against real processes: three controllers,
broker-a and broker-b (one broker each).

The message waits in broker-a's timer for the physical queue it was sent to. That queue's item
is sealed by the time it is due: appended there, it would lie past the seal, where no logical
reader looks. broker-a sends it on to the queue's newest item on broker-b instead, and counts it
delivered once broker-b acknowledged it."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from client import Consumer
from client.message import ReceivedMessage
from protocol.codes import RequestCode, ResponseCode
from protocol.message import encode_properties
from protocol.timer import PROP_TIMER_DELIVER_MS
from remoting.client import RemotingClient
from tests.cluster.support import masters_of, two_groups
from tests.support.cli import rmqctl
from tests.support.cluster import Cluster
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess

TOPIC = "Reminders"
DELAY_MS = 8000
"""Room for the move before the delivery, on a loaded machine."""


def test_a_scheduled_message_due_after_its_queue_moved_is_read_on_the_new_item(
    cluster: Cluster,
) -> None:
    addrs = two_groups(cluster)
    asyncio.run(scenario(cluster, addrs))


async def scenario(cluster: Cluster, addrs: str) -> None:
    masters = await masters_of(cluster, "broker-a", "broker-b")
    code, _, err = await asyncio.to_thread(
        rmqctl, "updateStaticTopic", "-a", addrs, "-t", TOPIC, "-q", "2", "-b", "broker-a"
    )
    assert code == 0, err

    # On logical queue 1 (physical queue 1 of broker-a): one message now, one due in 8 s.
    due = int(time.time() * 1000) + DELAY_MS
    conn = await RemotingClient.connect(masters["broker-a"])
    try:
        for header, body in [
            ({"topic": TOPIC, "queueId": 1}, b"now"),
            (
                {
                    "topic": TOPIC,
                    "queueId": 1,
                    "properties": encode_properties({PROP_TIMER_DELIVER_MS: str(due)}).decode(),
                },
                b"later",
            ),
        ]:
            resp = await conn.request(RequestCode.SEND_MESSAGE, header, body, 10)
            assert resp.code == ResponseCode.SUCCESS, resp.header
    finally:
        conn.close()

    code, _, err = await asyncio.to_thread(
        rmqctl, "remapStaticTopic", "-a", addrs, "-t", TOPIC, "-q", "1", "-b", "broker-b"
    )
    assert code == 0, err
    # The move sealed broker-a's item before the delivery: it holds "now" alone (logical end 1).
    code, out, err = await asyncio.to_thread(
        rmqctl, "--json", "staticTopicMapping", "-a", addrs, "-t", TOPIC
    )
    assert code == 0, err
    sealed = [i for i in json.loads(out)["queues"][1]["items"] if i["brokerName"] == "broker-a"]
    assert [i["logicalEnd"] for i in sealed] == [1], (
        f"the delivery came before the move sealed the queue: nothing was tested ({sealed})"
    )

    got: list[ReceivedMessage] = []
    async with Consumer(addrs, "reminded", TOPIC, suspend_ms=500) as consumer:

        async def both() -> bool:
            got.extend(await consumer.receive(timeout=0.5))
            return {m.body for m in got} >= {b"now", b"later"}

        await wait_until_async(
            both, "both messages by logical queue", 30, interval=0.05, on_timeout=cluster.logs
        )
    (now,) = [m for m in got if m.body == b"now"]
    (later,) = [m for m in got if m.body == b"later"]
    assert (now.queue_id, now.queue_offset, now.broker_name) == (1, 0, "broker-a")
    # Right after the seal (logical 1), on the new item.
    assert (later.queue_id, later.queue_offset, later.broker_name) == (1, 1, "broker-b")
    assert later.store_timestamp >= due
