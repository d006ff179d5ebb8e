"""Three ``rmq-controller`` processes: kill -9 of the leader, re-election, state that survives,
and the killed controller catching up after its restart."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from tests.controller.support import (
    ControllerCluster,
    FakeBroker,
    agreed_leader,
    metadata,
    replica_info,
    request,
)
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess

FAST_BROKERS = {"broker_heartbeat_timeout_ms": 1000}


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[ControllerCluster]:
    with ControllerCluster(tmp_path, config=FAST_BROKERS) as cluster:
        yield cluster


async def test_a_killed_leader_is_replaced_and_the_broker_metadata_survives(
    processes: ControllerCluster,
) -> None:
    addresses = [p.address for p in processes.procs.values()]
    old_leader = await agreed_leader(addresses)
    brokers = [await FakeBroker(processes.addresses).start() for _ in range(2)]
    try:
        for b in brokers:
            await b.join()
            b.start_heartbeats()
        loop = asyncio.get_running_loop()

        async def elected() -> dict[str, Any] | None:
            info = await replica_info(processes.addresses, "broker-a")
            return info if info["masterBrokerId"] != -1 else None

        before = await wait_until_async(elected, "a master elected", 10, interval=0.05)

        killed = processes.procs[old_leader]
        killed.kill9()
        started = loop.time()
        survivors = [p.address for i, p in processes.procs.items() if i != old_leader]
        # The survivors elect a new leader (30 s only bounds a hang; its time is printed).
        new_leader = await agreed_leader(survivors, timeout=30.0)
        print(f"re-election took {loop.time() - started:.2f} s")
        assert new_leader != old_leader

        # The group kept its master and epoch: the brokers kept beating to the new leader.
        after = await replica_info(processes.addresses, "broker-a")
        for key in ("masterBrokerId", "masterAddress", "masterEpoch", "syncStateSet"):
            assert after[key] == before[key], key
        # Writes work on the new leader: a third broker gets the next id.
        third = await FakeBroker(processes.addresses).start()
        brokers.append(third)
        assert await third.join() == 3

        # The killed controller restarts from its disk and catches up as a follower.
        killed.start()

        async def caught_up() -> Any:
            doc = await metadata(killed.address)
            resp = await request(killed.address, 1004, {"brokerName": "broker-a"})
            if doc is not None and doc["leaderId"] == new_leader and resp is not None:
                body = msgpack.unpackb(resp.body) if resp.code == 0 else {}
                if [r["brokerId"] for r in body.get("replicas", [])] == [1, 2, 3]:
                    return resp
            return None

        resp = await wait_until_async(
            caught_up,
            "the restarted controller to catch up",
            started + 30 - loop.time(),
            interval=0.1,
        )
        assert resp.header["masterEpoch"] == before["masterEpoch"]
        assert killed.alive()
    finally:
        for b in brokers:
            await b.stop()
