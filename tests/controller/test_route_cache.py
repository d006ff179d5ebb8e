"""GET_ROUTEINFO_BY_TOPIC's answer is built and encoded once per topic while nothing it reads
changes, and built again as soon as something does (issue 34: each lookup built and encoded the
route again, though a client fleet asks for the same topics over and over).

Controllers in this process (the leader's route table's builds are counted), two
simulated brokers of two groups, routes registered on the leader. What must make the next
lookup build the route again: a registration whose topics changed, a topic changed through the
controllers (an applied entry), a registration's expiry, its connection closing.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgpack
import pytest

from controller.metadata.group import BrokerGroup
from controller.metadata.results import ReplicaInfo
from protocol.codes import ResponseCode
from protocol.controller_requests.topics import RouteQuery, UpdateTopic
from remoting.client import RemotingClient
from tests.controller.support import FakeBroker, ServiceCluster
from tests.support.wait import wait_until_async

EXPIRY_MS = 600_000
LOOKUPS = 200


async def route(conn: RemotingClient, topic: str) -> tuple[bytes, dict[str, Any]]:
    ask = RouteQuery(topic=topic)
    resp = await conn.request(ask.code, *ask.encode(), timeout=10.0)
    assert resp.code == ResponseCode.SUCCESS, resp.header
    assert resp.body is not None
    return resp.body, msgpack.unpackb(resp.body)


def queues(doc: dict[str, Any]) -> dict[str, int]:
    return {b["brokerName"]: b["queues"] for b in doc["brokers"]}


async def test_a_route_is_built_once_until_what_it_reads_changes(tmp_path: Path) -> None:
    async with ServiceCluster(tmp_path, route_expiry_ms=EXPIRY_MS) as cluster:
        leader = await cluster.leader()
        handlers = leader.service.topics
        address = cluster.address(leader.cfg.id)
        a = FakeBroker(cluster.addresses, "cache-a")
        b = FakeBroker(cluster.addresses, "cache-b")
        conn: RemotingClient | None = None
        try:
            for broker in (a, b):
                await broker.start()
                await broker.join()
            await a.register_routes({"CacheTopic": 8, "Other": 4}, address)
            conn = await RemotingClient.connect(address, 2.0)
            routes = leader.service.routes
            built_routes = 0
            build = routes.route

            def counted(*args: Any, **kwargs: Any) -> Any:
                nonlocal built_routes
                built_routes += 1
                return build(*args, **kwargs)

            routes.route = counted  # this instance only (all three controllers are here)

            # The same topic asked LOOKUPS times: one build (one more per applied entry that
            # came meanwhile, say an election of the controllers' own on a loaded machine).
            applied = {leader.driver.applied}
            builds = built_routes
            bodies = set()
            for _ in range(LOOKUPS):
                body, doc = await route(conn, "CacheTopic")
                bodies.add(body)
                applied.add(leader.driver.applied)
            assert queues(doc) == {"cache-a": 8}
            built = built_routes - builds
            assert 1 <= built <= len(applied), (built, sorted(applied))
            assert len(bodies) <= len(applied)

            # The registration's topics changed: the next answer says so.
            await a.register_routes({"CacheTopic": 16, "Other": 4}, address)
            assert queues((await route(conn, "CacheTopic"))[1]) == {"cache-a": 16}
            # A refresh of the same registration keeps the answer (no build).
            await a.register_routes({"CacheTopic": 16, "Other": 4}, address)
            builds = built_routes
            at = leader.driver.applied
            await route(conn, "CacheTopic")
            if leader.driver.applied == at:
                assert built_routes == builds

            # A topic created through the controllers on another group (an applied entry).
            ask = UpdateTopic(
                cluster="DefaultCluster", broker_name="cache-b", topic="CacheTopic", queues=2
            )
            resp = await b.call(ask.code, *ask.encode())
            assert resp.code == ResponseCode.SUCCESS, resp.header
            await asyncio.sleep(0)
            assert queues((await route(conn, "CacheTopic"))[1]) == {"cache-a": 16, "cache-b": 2}

            # The registration's expiry passes (the handlers' clock moved past it, and stays
            # moved: it never goes back), then the broker registers again.
            real = handlers.now_ms
            handlers.now_ms = lambda: real() + EXPIRY_MS + 1
            assert queues((await route(conn, "CacheTopic"))[1]) == {"cache-b": 2}
            await a.register_routes({"CacheTopic": 16, "Other": 4}, address)
            assert queues((await route(conn, "CacheTopic"))[1]) == {"cache-a": 16, "cache-b": 2}

            # The registering connection closes: the broker's routes go at once.
            a.pool.close()

            async def gone() -> bool:
                assert conn is not None
                return "cache-a" not in queues((await route(conn, "CacheTopic"))[1])

            await wait_until_async(gone, "the closed registration to leave the route", 4.0)
        finally:
            if conn is not None:
                conn.close()
            for broker in (a, b):
                await broker.stop()


async def test_a_route_build_reads_masters_and_addresses_without_whole_replica_infos(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build believes each registration by its broker's recorded address and names each
    group's master: read from the group, not from a whole ReplicaInfo built per group and per
    registration (issue 34: those builds were 44% of a route build's time, which the bench's
    lookups of topics never asked before do at every column)."""
    async with ServiceCluster(tmp_path, route_expiry_ms=EXPIRY_MS) as cluster:
        leader = await cluster.leader()
        address = cluster.address(leader.cfg.id)
        a = FakeBroker(cluster.addresses, "build-a")
        b = FakeBroker(cluster.addresses, "build-b")
        conn: RemotingClient | None = None
        try:
            for broker in (a, b):
                await broker.start()
                await broker.join()
                await broker.register_routes({"BuildTopic": 8}, address)
            conn = await RemotingClient.connect(address, 2.0)
            routes = leader.service.routes
            build = routes.route
            inside = False
            infos = 0

            def counted_build(*args: Any, **kwargs: Any) -> Any:
                nonlocal inside
                inside = True
                try:
                    return build(*args, **kwargs)
                finally:
                    inside = False

            whole_info = BrokerGroup.info

            def counted_info(group: BrokerGroup) -> ReplicaInfo:
                nonlocal infos
                infos += inside
                return whole_info(group)

            routes.route = counted_build  # this instance only
            monkeypatch.setattr(BrokerGroup, "info", counted_info)
            _, doc = await route(conn, "BuildTopic")
            assert queues(doc) == {"build-a": 8, "build-b": 8}
            manager = leader.service.topics.manager
            for entry in doc["brokers"]:
                info = manager.replica_info(entry["brokerName"])
                assert info is not None
                assert entry["masterAddress"] == info.master_address
            # Two groups of one registration each: 4 whole ReplicaInfos before (the master of
            # each group, the recorded address of each registration).
            assert infos == 0, f"whole ReplicaInfos built by one route build: {infos}"
        finally:
            if conn is not None:
                conn.close()
            for broker in (a, b):
                await broker.stop()
