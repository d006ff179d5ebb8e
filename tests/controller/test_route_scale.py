"""A route lookup reads the same part of the controller's state with 10 times the brokers
(issue 34, the growth table's 10x column of broker groups).

Three controllers in this process (server, driver and service each, on loopback); 10 broker
groups of 3 simulated brokers (the real CONTROLLER_GET_NEXT_BROKER_ID, APPLY_BROKER_ID,
REGISTER_BROKER and route REGISTER_BROKER requests), then 90 groups more (300 brokers). Each time
the active controller builds the route of one group's topic (what a GET_ROUTEINFO_BY_TOPIC not
answered from the route cache does) while the test counts what it reads: the route table's
registrations (its dict, wrapped to count each key iterated or looked up) and the groups'
replica infos (the manager's replica_info and replica_infos, wrapped). With ten times the brokers
it reads the same: the three registrations listing the topic and their group's replica info.
Before the route table had a topic index a lookup sorted, expired and believed every broker's
registration and built a map of every group's replicas, so its cost grew with the cluster
(measured as the leader's CPU per lookup: 170 us with 30 brokers, 1,136 us with 300). The time
per lookup over the socket is printed, not asserted.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from controller.metadata.state import ReplicasInfoManager
from protocol.codes import ResponseCode
from protocol.controller_requests.topics import RouteQuery
from remoting.client import RemotingClient
from tests.controller.support import FakeBroker, ServiceCluster, groups_with_routes
from tests.metadata.support import CountingDict

CONFIG: dict[str, Any] = {
    "route_expiry_ms": 600_000,
    "election_ticks_min": 10,
    "election_ticks_max": 20,
}
TOPIC = "RouteScaleTopic"
LOOKUPS = 300


async def add_groups(
    cluster: ServiceCluster, leader: str, first: int, last: int
) -> list[FakeBroker]:
    """Groups ``first``..``last - 1`` of 3 brokers each, every broker's topics registered on the
    leader: group 0 has TOPIC, every group 10 topics of its own."""

    def topics(g: int) -> dict[str, int]:
        own = {f"RouteScale-{g}-{i}": 8 for i in range(10)}
        return {**own, TOPIC: 8} if g == 0 else own

    topics_of = {f"route-scale-{g:03d}": topics(g) for g in range(first, last)}
    return await groups_with_routes(cluster, leader, topics_of)


def reads_per_route(node: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    """(registrations, replica infos) the active controller ``node`` reads building TOPIC's
    route once."""
    topics, routes = node.service.topics, node.service.routes
    infos = 0
    replica_info, replica_infos = (
        ReplicasInfoManager.replica_info,
        ReplicasInfoManager.replica_infos,
    )

    def one(self: ReplicasInfoManager, broker_name: str) -> Any:
        nonlocal infos
        infos += 1
        return replica_info(self, broker_name)

    def every(self: ReplicasInfoManager) -> Any:
        nonlocal infos
        found = replica_infos(self)
        infos += len(found)
        return found

    counting = CountingDict(routes._regs)
    routes._regs = counting
    with monkeypatch.context() as patch:
        patch.setattr(ReplicasInfoManager, "replica_info", one)
        patch.setattr(ReplicasInfoManager, "replica_infos", every)
        try:
            doc = topics._route_now(TOPIC)  # synchronous: nothing else runs meanwhile
            read = counting.reads
        finally:
            routes._regs = dict(counting)
    assert {b["brokerName"] for b in doc["brokers"]} == {"route-scale-000"}, doc
    return read, infos


async def seconds_per_lookup(address: str) -> float:
    """Wall seconds per GET_ROUTEINFO_BY_TOPIC of TOPIC over the socket (printed only)."""
    conn = await RemotingClient.connect(address, 2.0)
    try:
        ask = RouteQuery(topic=TOPIC)
        began = time.perf_counter()
        for _ in range(LOOKUPS // 50):
            resps = await asyncio.gather(
                *(conn.request(ask.code, *ask.encode(), timeout=10.0) for _ in range(50))
            )
            assert all(r.code == ResponseCode.SUCCESS for r in resps), resps[0].header
        return (time.perf_counter() - began) / LOOKUPS
    finally:
        conn.close()


async def test_a_route_lookup_reads_the_same_with_ten_times_the_brokers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = await ServiceCluster(tmp_path, **CONFIG).start()
    brokers: list[FakeBroker] = []
    try:
        leader = await cluster.leader(30.0)
        address = cluster.address(leader.cfg.id)
        brokers += await add_groups(cluster, address, 0, 10)
        small, small_s = reads_per_route(leader, monkeypatch), await seconds_per_lookup(address)
        brokers += await add_groups(cluster, address, 10, 100)
        large, large_s = reads_per_route(leader, monkeypatch), await seconds_per_lookup(address)
    finally:
        await asyncio.gather(*(b.stop() for b in brokers), return_exceptions=True)
        await cluster.stop()
    print(
        f"a lookup: 30 brokers {small_s * 1e6:.0f} us, 300 brokers {large_s * 1e6:.0f} us; "
        f"(registrations, replica infos) read building the route: {small}, {large}"
    )
    # The topic's three registrations and their group's replica info (once for each and once
    # for its master), however many brokers.
    assert small == large and small[0] <= 3 and small[1] <= 4, (
        f"building one route read (registrations, replica infos) {small} with 30 brokers, "
        f"{large} with 300"
    )
