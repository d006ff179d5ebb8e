"""Forged controller requests from a raw connection (issue 9 item 5), against real processes.

Three controllers and one group of two brokers on loopback. A "forger" is a plain remoting
connection that knows the group's names and ids (anyone can read them from the routes) and
sends what a broker would: a heartbeat with a huge timeout, a registration at another address,
a CLEAN_BROKER_DATA with cleanLivingBroker. None of it may steer the cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import msgpack
import pytest

from client.bootstrap import Bootstrap
from protocol.codes import RequestCode, ResponseCode
from remoting.client import RemotingClient
from tests.cluster.support import full_sync_state_set, node_at, sync_state, with_one_group
from tests.support.cluster import Cluster
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess

GROUP = "broker-a"
FAKE_ADDRESS = "127.0.0.1:1"


cluster = with_one_group(2)


async def forger(cluster: Cluster) -> list[RemotingClient]:
    """One raw connection to every controller (the forger does not care which one leads)."""
    return [await RemotingClient.connect(c.address, timeout=2.0) for c in cluster.controllers]


async def test_a_forged_heartbeat_with_a_huge_timeout_does_not_delay_failover(
    cluster: Cluster, boot: Bootstrap
) -> None:
    doc = await full_sync_state_set(boot, cluster, size=2)
    master = node_at(cluster, doc["masterAddress"])
    header = {
        "clusterName": "DefaultCluster",
        "brokerName": GROUP,
        "brokerId": doc["masterBrokerId"],
        "brokerAddress": master.address,
        "epoch": doc["masterEpoch"],
        "maxOffset": 1 << 40,
        "confirmOffset": 1 << 40,
        "electionPriority": 0,
        "heartbeatTimeoutMillis": 3_600_000,  # one hour
    }
    conns = await forger(cluster)
    answers: list[int] = []

    async def beat() -> None:
        while True:
            for conn in conns:
                with contextlib.suppress(Exception):
                    answers.append((await conn.request(904, header, None, 2.0)).code)
            await asyncio.sleep(0.05)

    beating = asyncio.create_task(beat())
    try:
        await wait_until_async(
            lambda: _async(len(answers) >= 30),
            "forged heartbeats",
            10,
            interval=0.1,
            on_timeout=cluster.logs,
        )
        # The leader refuses them: this connection never registered the master.
        assert ResponseCode.SUCCESS not in answers, answers
        assert ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED in answers
        master.kill9()
        killed = time.monotonic()

        async def failed_over() -> bool:
            d = await sync_state(boot)
            return bool(d and d.get("masterAddress") not in (None, "", master.address))

        # The master's connection closed: the controllers elect, not an hour later (the forged
        # heartbeats, refused above, cannot keep it alive; 30 s only bounds a hang).
        await wait_until_async(
            failed_over,
            "a new master while the forger keeps beating",
            30,
            interval=0.1,
            on_timeout=cluster.logs,
        )
        print(f"a new master {time.monotonic() - killed:.1f} s after the kill")
    finally:
        beating.cancel()
        await asyncio.gather(beating, return_exceptions=True)
        for conn in conns:
            conn.close()


async def test_a_forged_registration_does_not_move_the_master(
    cluster: Cluster, boot: Bootstrap
) -> None:
    doc = await full_sync_state_set(boot, cluster, size=2)
    master_id, master_address = doc["masterBrokerId"], doc["masterAddress"]
    header = {
        "clusterName": "DefaultCluster",
        "brokerName": GROUP,
        "brokerId": master_id,
        "brokerAddress": FAKE_ADDRESS,
    }
    conns = await forger(cluster)
    try:
        codes = [(await c.request(1003, header, None, 5.0)).code for c in conns]
        # Followers redirect; the leader refuses: the id is held by the master's connection.
        assert ResponseCode.SUCCESS not in codes, codes
        assert ResponseCode.CONTROLLER_BROKER_ID_INVALID in codes, codes
        # The route registration (every controller serves it) may not pose as the master either.
        topics = msgpack.packb({"topics": {"Forged": 8}})
        for conn in conns:
            resp = await conn.request(RequestCode.REGISTER_BROKER, header, topics, 5.0)
            assert resp.code == ResponseCode.CONTROLLER_BROKER_ID_INVALID, resp.header
        # At the master's own address, a queue count no broker can have is refused too: clients
        # would build a route of 2^40 queues from it.
        huge = msgpack.packb({"topics": {"Huge": 1 << 40}})
        for conn in conns:
            real = {**header, "brokerAddress": master_address}
            resp = await conn.request(RequestCode.REGISTER_BROKER, real, huge, 5.0)
            assert resp.code == ResponseCode.CONTROLLER_INVALID_REQUEST, resp.header
    finally:
        for conn in conns:
            conn.close()
    after = await sync_state(boot)
    assert after is not None
    assert after["masterAddress"] == master_address
    assert {r["address"] for r in after["replicas"]} >= {master_address}
    assert FAKE_ADDRESS not in {r["address"] for r in after["replicas"]}
    for c in cluster.controllers:
        conn = await RemotingClient.connect(c.address, timeout=2.0)
        try:
            resp = await conn.request(RequestCode.GET_BROKER_CLUSTER_INFO, None, None, 5.0)
            members = msgpack.unpackb(resp.body)["clusters"]["DefaultCluster"]
            assert FAKE_ADDRESS not in {m["address"] for m in members}
            for topic in ("Forged", "Huge"):
                resp = await conn.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
                assert resp.code == ResponseCode.TOPIC_NOT_EXIST, topic
        finally:
            conn.close()


async def test_clean_broker_data_never_cleans_a_living_broker(
    cluster: Cluster, boot: Bootstrap
) -> None:
    doc = await full_sync_state_set(boot, cluster, size=2)
    for ids in ("", str(doc["masterBrokerId"])):
        header = {
            "clusterName": "DefaultCluster",
            "brokerName": GROUP,
            "brokerIds": ids,
            "cleanLivingBroker": True,
        }
        resp = await boot.call(RequestCode.CONTROLLER_GET_METADATA_INFO)  # any controller
        assert resp.code == ResponseCode.SUCCESS
        with pytest.raises(Exception) as err:
            await boot.call(RequestCode.CLEAN_BROKER_DATA, header)
        assert getattr(err.value, "code", None) == (
            ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA
        ), err.value
        assert "alive" in str(err.value)
    after = await sync_state(boot)
    assert after is not None
    assert after["masterAddress"] == doc["masterAddress"]
    assert sorted(r["brokerId"] for r in after["replicas"]) == [1, 2]


async def _async(value: bool) -> bool:
    return value
