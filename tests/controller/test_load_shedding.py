"""Load shedding (issue 17, item 4): past ``max_inflight_proposals`` writes in flight the
controller answers SYSTEM_BUSY at once; the leader keeps its leadership under a flood.

Three ``rmq-controller`` processes with the default shedding budget; 4,096 writes in flight against the
leader, each retried after the SDK's back-off when it is answered busy, until every one
committed. The
leader's id and term are the same before and after, and some writes were answered busy.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol.codes import RequestCode, ResponseCode
from remoting.client import RemotingClient
from remoting.failover import AddressFailover
from tests.controller.support import ControllerCluster, agreed_leader, metadata

pytestmark = pytest.mark.multiprocess

GENEROUS_ELECTIONS = {"election_ticks_min": 10, "election_ticks_max": 20}
"""Election timeouts of 1-2 s instead of 0.3-0.6 s: on a shared 2-core machine running other
suites the scheduler alone can hold a process for 300 ms; what this test checks is that the
flood is shed and costs the leader nothing, not how tight the timeouts may be (the bench measures
leader changes at the defaults)."""
IN_FLIGHT = 4096
CONNECTIONS = 16
WRITE = {
    "clusterName": "ShedCluster",
    "brokerName": "shed-group",
    "appliedBrokerId": 1,
    "registerCheckCode": "shed-code",
    "brokerAddress": "127.0.0.1:1",
}


@pytest.fixture
def controllers(tmp_path: Path) -> Iterator[ControllerCluster]:
    with ControllerCluster(tmp_path, config=GENEROUS_ELECTIONS) as cluster:
        yield cluster


async def leader_and_term(cluster: ControllerCluster) -> tuple[str, int]:
    lead = await agreed_leader([p.address for p in cluster.procs.values()], timeout=30.0)
    doc = await metadata(cluster.procs[lead].address)
    assert doc is not None
    return lead, int(doc["term"])


async def test_a_flood_of_writes_is_shed_with_busy_and_the_leader_stays(
    controllers: ControllerCluster,
) -> None:
    lead, term = await leader_and_term(controllers)
    address = controllers.procs[lead].address
    conns = [await RemotingClient.connect(address) for _ in range(CONNECTIONS)]
    busy: list[str] = []
    other: list[str] = []

    backoff = AddressFailover(address)  # the back-off of the SDK, rmqctl and the brokers

    async def write(slot: int) -> None:
        round_no = 0
        while True:
            resp = await conns[slot % CONNECTIONS].request(
                RequestCode.CONTROLLER_APPLY_BROKER_ID, WRITE, timeout=60.0
            )
            if resp.code == ResponseCode.SUCCESS:
                return
            if resp.code != ResponseCode.SYSTEM_BUSY:
                other.append(f"{resp.code}: {resp.header}")
                return
            busy.append(str(resp.header.get("remark")))
            await asyncio.sleep(backoff.backoff(round_no))
            round_no += 1

    try:
        await conns[0].request(RequestCode.CONTROLLER_APPLY_BROKER_ID, WRITE, timeout=30.0)
        async with asyncio.timeout(120):
            await asyncio.gather(*(write(i) for i in range(IN_FLIGHT)))
    finally:
        backoff.close()
        for conn in conns:
            conn.close()
    assert other == [], other[:5]  # every write committed in the end (no leader change: 2007)
    assert busy, "4,096 writes in flight were never answered SYSTEM_BUSY"
    assert "in flight" in busy[0], busy[0]
    assert await leader_and_term(controllers) == (lead, term)
