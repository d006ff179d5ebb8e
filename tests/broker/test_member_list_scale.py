"""A consumer group's member list costs the broker about the same per ask with ten times the
members (issue 34 item 3: a rebalance of a group of 1,000 when one member joins).

Every member of a group asks for the list (GET_CONSUMER_LIST_BY_GROUP) at each rebalance. Before,
each ask filtered, sorted and encoded the whole group again: O(members) per ask, O(members^2) a
rebalance on the broker. Now the list and its encoded answer are built once per change
(broker/consumer_groups.py member_ids, broker/processors/clients.py). A real broker process; the
members each on a connection of their own; the broker's CPU per ask (/proc/<pid>/stat) with 100
members, then 1,000.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from bench.controller_bench import process_cpu
from client.identity import heartbeat
from protocol.broker_requests.clients import ConsumerList, ConsumerListQuery
from protocol.codes import RequestCode, ResponseCode
from remoting.client import RemotingClient
from tests.support.procs import BrokerProc, started

ASKS = 2000


async def cpu_per_ask(broker: BrokerProc, members: int) -> float:
    """Seconds of the broker's CPU per member-list ask in a group of ``members``."""
    group = f"list-scale-{members}"
    conns = [await RemotingClient.connect(broker.address, 30.0) for _ in range(members)]
    try:
        for i, conn in enumerate(conns):
            beat = heartbeat(group, f"member-{i:05d}", topic="ListScale")
            resp = await conn.request(RequestCode.HEART_BEAT, beat, None, 60.0)
            assert resp.code == ResponseCode.SUCCESS, resp.header
        ask = ConsumerListQuery(group=group)
        first = await conns[0].request(ask.code, *ask.encode(), timeout=60.0)
        assert len(ConsumerList.parse(first.header, first.body).client_ids) == members
        sem = asyncio.Semaphore(32)

        async def one(i: int) -> None:
            async with sem:
                resp = await conns[i % members].request(ask.code, *ask.encode(), timeout=60.0)
                assert resp.code == ResponseCode.SUCCESS, resp.header

        cpu0 = process_cpu(broker.pid)
        await asyncio.gather(*(one(i) for i in range(ASKS)))
        return (process_cpu(broker.pid) - cpu0) / ASKS
    finally:
        for conn in conns:
            conn.close()


async def test_a_member_list_ask_costs_about_the_same_with_ten_times_the_members(
    tmp_path: Path,
) -> None:
    with started(BrokerProc(tmp_path)) as broker:
        few = await cpu_per_ask(broker, 100)
        many = await cpu_per_ask(broker, 1000)
    # Before: 60 -> 270-300 us (4.5-5 times); after: 40 -> 45 us (the answer's bytes still
    # grow with the members: a copy of 1,000 ids a send).
    assert many < 2 * few, (few, many)
