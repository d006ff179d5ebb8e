"""A consumer group's member list costs the broker the same per ask with ten times the members
(issue 34 item 3: a rebalance of a group of 1,000 when one member joins).

Every member of a group asks for the list (GET_CONSUMER_LIST_BY_GROUP) at each rebalance. Before,
each ask filtered, sorted and encoded the whole group again: O(members) per ask, O(members^2) a
rebalance on the broker (measured as the broker's CPU per ask: 60 us with 100 members, 270-300
with 1,000). Now the list and its encoded answer are built once per change
(broker/consumer_groups.py member_ids, broker/processors/clients.py). A broker in this process
on a real socket; the members each on a connection of their own, 100 then 1,000; after the first
ask, the test counts what the asks read: the members checked for liveness in building the list
(ConsumerGroups._live within member_ids, wrapped) and the answers encoded (ConsumerList.encode,
wrapped): none, whatever the members. The time per ask is printed, not asserted.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from broker.broker import Broker
from broker.consumer_groups import ConsumerGroups
from client.identity import heartbeat
from protocol.broker_requests.clients import ConsumerList, ConsumerListQuery
from protocol.codes import RequestCode, ResponseCode
from remoting.client import RemotingClient
from tests.broker.support import running, small_config

ASKS = 500


async def asked(
    broker: Broker, members: int, monkeypatch: pytest.MonkeyPatch
) -> tuple[int, int, float]:
    """ASKS member-list asks in a group of ``members`` (after a first one): (members checked,
    answers encoded, seconds per ask)."""
    group = f"list-scale-{members}"
    address = f"127.0.0.1:{broker.port}"
    conns = [await RemotingClient.connect(address, 30.0) for _ in range(members)]
    try:
        for i, conn in enumerate(conns):
            beat = heartbeat(group, f"member-{i:05d}", topic="ListScale")
            resp = await conn.request(RequestCode.HEART_BEAT, beat, None, 60.0)
            assert resp.code == ResponseCode.SUCCESS, resp.header
        ask = ConsumerListQuery(group=group)
        first = await conns[0].request(ask.code, *ask.encode(), timeout=60.0)
        assert len(ConsumerList.parse(first.header, first.body).client_ids) == members
        checked = encoded = 0
        inside = False  # in member_ids: the housekeeping's expiry scan checks members too
        live, member_ids, encode = (
            ConsumerGroups._live,
            ConsumerGroups.member_ids,
            ConsumerList.encode,
        )

        def counted_live(self: ConsumerGroups, m: Any, now_ms: int) -> bool:
            nonlocal checked
            checked += inside
            return live(self, m, now_ms)

        def counted_member_ids(self: ConsumerGroups, group: str, now_ms: int) -> Any:
            nonlocal inside
            inside = True
            try:
                return member_ids(self, group, now_ms)
            finally:
                inside = False

        def counted_encode(self: ConsumerList) -> Any:
            nonlocal encoded
            encoded += 1
            return encode(self)

        sem = asyncio.Semaphore(32)

        async def one(i: int) -> None:
            async with sem:
                resp = await conns[i % members].request(ask.code, *ask.encode(), timeout=60.0)
                assert resp.code == ResponseCode.SUCCESS, resp.header
                assert len(ConsumerList.parse(resp.header, resp.body).client_ids) == members

        with monkeypatch.context() as patch:
            patch.setattr(ConsumerGroups, "_live", counted_live)
            patch.setattr(ConsumerGroups, "member_ids", counted_member_ids)
            patch.setattr(ConsumerList, "encode", counted_encode)
            began = time.perf_counter()
            await asyncio.gather(*(one(i) for i in range(ASKS)))
            took = (time.perf_counter() - began) / ASKS
        return checked, encoded, took
    finally:
        for conn in conns:
            conn.close()


async def test_a_member_list_ask_costs_the_same_with_ten_times_the_members(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Members stay listed however slow the machine: no expiry changes the list meanwhile.
    async with running(small_config(tmp_path, client_expiry_ms=600_000)) as broker:
        few = await asked(broker, 100, monkeypatch)
        many = await asked(broker, 1000, monkeypatch)
    print(
        f"per ask: 100 members {few[2] * 1e6:.0f} us, 1,000 members {many[2] * 1e6:.0f} us; "
        f"(members checked, answers encoded) over {ASKS} asks: {few[:2]}, {many[:2]}"
    )
    # Built and encoded once per change (at the first ask), not per ask.
    assert (few[:2], many[:2]) == ((0, 0), (0, 0)), (
        f"(members checked, answers encoded) over {ASKS} asks of an unchanged list: "
        f"{few[:2]} with 100 members, {many[:2]} with 1,000"
    )
