"""A route lookup costs the controller the same with 10 times the brokers (issue 34, the growth
table's 10x column of broker groups).

Three ``rmq-controller`` processes; 10 broker groups of 3 simulated brokers (the real
CONTROLLER_GET_NEXT_BROKER_ID, APPLY_BROKER_ID, REGISTER_BROKER and route REGISTER_BROKER
requests), then 90 groups more (300 brokers). Each time the active controller's CPU
(/proc/<pid>/stat, its idle CPU over the same time taken off) over a run of
GET_ROUTEINFO_BY_TOPIC of one group's topic is divided by the lookups: with ten times the
brokers a lookup must cost well under twice as much. Before the route table had a topic index a
lookup sorted, expired and believed every broker's registration and built a map of every group's
replicas, so its cost grew with the cluster.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.controller_bench import process_cpu
from protocol.codes import ResponseCode
from protocol.controller_requests.topics import RouteQuery
from remoting.client import RemotingClient
from tests.controller.support import ControllerCluster, FakeBroker, agreed_leader

pytestmark = pytest.mark.multiprocess

CONFIG = {"route_expiry_ms": 600_000, "election_ticks_min": 10, "election_ticks_max": 20}
TOPIC = "RouteScaleTopic"
LOOKUPS = 1500


@pytest.fixture
def controllers(tmp_path: Path) -> Iterator[ControllerCluster]:
    cluster = ControllerCluster(tmp_path, config=CONFIG)
    try:
        yield cluster.start()
    finally:
        cluster.stop()


async def add_groups(
    cluster: ControllerCluster, leader: str, first: int, last: int
) -> list[FakeBroker]:
    """Groups ``first``..``last - 1`` of 3 brokers each, every broker's topics registered on the
    leader: group 0 has TOPIC, every group 10 topics of its own."""

    async def group(g: int) -> list[FakeBroker]:
        brokers = []
        topics = {f"RouteScale-{g}-{i}": 8 for i in range(10)}
        if g == 0:
            topics[TOPIC] = 8
        for b in range(3):
            broker = FakeBroker(
                cluster.addresses, f"route-scale-{g:03d}", register_code=f"c{g}-{b}"
            )
            await broker.start()
            await broker.join()
            await broker.register_routes(topics, leader)
            brokers.append(broker)
        return brokers

    sem = asyncio.Semaphore(16)

    async def limited(g: int) -> list[FakeBroker]:
        async with sem:
            return await group(g)

    groups = await asyncio.gather(*(limited(g) for g in range(first, last)))
    return [b for brokers in groups for b in brokers]


async def cpu_per_lookup(pid: int, leader: str) -> float:
    """The leader's CPU seconds per GET_ROUTEINFO_BY_TOPIC of TOPIC, its idle CPU taken off."""
    cpu0, t0 = process_cpu(pid), time.perf_counter()
    await asyncio.sleep(1.0)
    idle = (process_cpu(pid) - cpu0) / (time.perf_counter() - t0)
    conn = await RemotingClient.connect(leader, 2.0)
    try:
        ask = RouteQuery(topic=TOPIC)
        cpu0, t0 = process_cpu(pid), time.perf_counter()
        for _ in range(LOOKUPS // 50):
            resps = await asyncio.gather(
                *(conn.request(ask.code, *ask.encode(), timeout=10.0) for _ in range(50))
            )
            assert all(r.code == ResponseCode.SUCCESS for r in resps), resps[0].header
        cpu = process_cpu(pid) - cpu0 - idle * (time.perf_counter() - t0)
    finally:
        conn.close()
    return max(cpu, 0.0) / LOOKUPS


async def test_a_route_lookup_costs_the_same_with_ten_times_the_brokers(
    controllers: ControllerCluster,
) -> None:
    lead = await agreed_leader([p.address for p in controllers.procs.values()], timeout=30.0)
    leader = controllers.procs[lead]
    brokers = await add_groups(controllers, leader.address, 0, 10)
    try:
        small = await cpu_per_lookup(leader.pid, leader.address)
        brokers += await add_groups(controllers, leader.address, 10, 100)
        large = await cpu_per_lookup(leader.pid, leader.address)
    finally:
        await asyncio.gather(*(b.stop() for b in brokers), return_exceptions=True)
    print(f"CPU per lookup: 30 brokers {small * 1e6:.0f} us, 300 brokers {large * 1e6:.0f} us")
    assert large < 2 * small, (
        f"a lookup cost {large * 1e6:.0f} us of CPU with 300 brokers against "
        f"{small * 1e6:.0f} us with 30"
    )
