"""Topics live in the controllers' replicated state (issue 9 items 12 and 10), real processes.

- A topic acknowledged by updateTopic survives its master dying right after (RocketMQ #9804):
  the broker answers only once the controllers committed it, the new master gets it from them.
- While every broker of the group is down, a known topic keeps its route ("no master now",
  which clients retry) instead of TOPIC_NOT_EXIST.
"""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from client import Producer, SendResult
from client.bootstrap import Bootstrap
from client.errors import ClientError, TopicNotFoundError
from protocol.codes import RequestCode, ResponseCode
from remoting.client import RemotingClient
from tests.cluster.support import (
    consume_all,
    full_sync_state_set,
    new_master,
    sync_state,
    synced_master,
    with_one_group,
)
from tests.support.cluster import Cluster
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess

GROUP = "broker-a"


cluster = with_one_group(2)


async def create_on(address: str, topic: str, queues: int) -> None:
    conn = await RemotingClient.connect(address, timeout=2.0)
    try:
        resp = await conn.request(
            RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": topic, "queues": queues}, None, 10.0
        )
        assert resp.code == ResponseCode.SUCCESS, resp.header
    finally:
        conn.close()


async def route_of(address: str, topic: str) -> tuple[int, dict[str, Any] | None]:
    conn = await RemotingClient.connect(address, timeout=2.0)
    try:
        resp = await conn.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}, None, 5.0)
        doc = msgpack.unpackb(resp.body) if resp.code == ResponseCode.SUCCESS else None
        return resp.code, doc
    finally:
        conn.close()


async def topic_queues_on(address: str, topic: str) -> int | None:
    conn = await RemotingClient.connect(address, timeout=2.0)
    try:
        resp = await conn.call(RequestCode.GET_ALL_TOPIC_CONFIG, timeout=5.0)
        doc = msgpack.unpackb(resp.body or b"\x80")
        return int(doc[topic]["queues"]) if topic in doc else None
    finally:
        conn.close()


async def test_a_topic_created_just_before_its_master_dies_survives_the_failover(
    cluster: Cluster, boot: Bootstrap
) -> None:
    master = await synced_master(boot, cluster, size=2)
    await create_on(master.address, "Fresh", 3)
    master.kill9()  # at once: the slave's once-a-second copy of the topic configs never ran
    after = await new_master(boot, cluster, master.address)
    survivor = after["masterAddress"]

    async def routed_to_new_master() -> dict[str, Any] | None:
        _, route = await route_of(cluster.controllers[0].address, "Fresh")
        if route and route["brokers"][0]["masterAddress"] == survivor:
            return route
        return None

    route = await wait_until_async(
        routed_to_new_master,
        "the topic routed to the new master",
        15,
        interval=0.1,
        on_timeout=cluster.logs,
    )
    assert route["brokers"][0]["queues"] == 3
    # The new master has the topic as it was created (not auto-created with default queues).
    await wait_until_async(
        lambda: _eq(topic_queues_on(survivor, "Fresh"), 3),
        "the topic on the new master",
        10,
        interval=0.1,
        on_timeout=cluster.logs,
    )
    acked = {}
    async with Producer(cluster.controller_addresses, retries=4) as producer:
        for i in range(12):
            r = await producer.send("Fresh", f"m-{i}".encode())
            acked[(r.broker_name, r.queue_id, r.queue_offset)] = f"m-{i}".encode()
    assert {k[1] for k in acked} == {0, 1, 2}
    received = await consume_all(cluster.controller_addresses, "Fresh", set(acked), timeout=30)
    assert all(received.get(k) == v for k, v in acked.items())


async def test_a_known_topic_stays_routed_while_every_broker_of_its_group_is_down(
    cluster: Cluster, boot: Bootstrap
) -> None:
    doc = await full_sync_state_set(boot, cluster, size=2)
    await create_on(doc["masterAddress"], "Kept", 2)
    for b in cluster.brokers:
        b.kill9()

    async def master_cleared() -> bool:
        d = await sync_state(boot)
        return bool(d) and not d.get("masterAddress")

    await wait_until_async(
        master_cleared,
        "the controllers to clear the dead master",
        15,
        interval=0.1,
        on_timeout=cluster.logs,
    )
    masterless = {
        "topic": "Kept",
        "brokers": [{"brokerName": GROUP, "masterAddress": None, "slaves": [], "queues": 2}],
    }
    for c in cluster.controllers:

        async def no_master(address: str = c.address) -> bool:
            code, route = await route_of(address, "Kept")
            assert code == ResponseCode.SUCCESS, code  # never TOPIC_NOT_EXIST
            return route == masterless

        # A follower answers from what it has applied: the cleared master a moment later.
        await wait_until_async(
            no_master,
            f"{c.name} to route the topic with no master",
            10,
            interval=0.1,
            on_timeout=cluster.logs,
        )
    code, _ = await route_of(cluster.controllers[0].address, "NeverCreated")
    assert code == ResponseCode.TOPIC_NOT_EXIST
    # A producer sees "no master right now", which it retries, not "no such topic"; once a
    # broker is back, the same topic takes messages again.
    async with Producer(cluster.controller_addresses, retries=1) as producer:
        with pytest.raises(ClientError) as err:
            await producer.send("Kept", b"x")
        assert not isinstance(err.value, TopicNotFoundError), err.value
        for b in cluster.brokers:
            b.restart()

        async def sent() -> SendResult | None:
            try:
                return await producer.send("Kept", b"back")
            except ClientError:
                return None

        r = await wait_until_async(
            sent, "a send to the restarted group", 60, interval=0.2, on_timeout=cluster.logs
        )
        assert r.broker_name == GROUP


async def _eq(value: Any, expected: Any) -> bool:
    return bool(await value == expected)
