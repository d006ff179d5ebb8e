"""A closed client connection costs the broker the same with ten times the clients (issue 34
item 3, its 10x column: 2,000 connections).

A broker in this process on a real socket; each client a connection of its own heart-beating as
a consumer and as a transactional producer (what the SDK's consumers and transactional producers
send), then every connection closed at once. Before, the broker's on_close scanned every member
of every consumer group, every producer group and every transactional producer for the
connection's own (ConsumerGroups, ProducerGroups and TransactionService.connection_closed):
O(clients) per close, so a fleet of clients reconnecting cost the broker O(clients^2) (measured
as the broker's CPU per closed connection: 50 us with 200, 485 us with 2,000). Now each keeps its
clients by connection. The test counts, within the three connection_closed calls of the 200 and
then the 2,000 closes, the clients they read: each group's table of clients (the three
structures' group dicts, wrapped) counts as many as it holds when iterated and one when looked
up. Per close: the same few, whatever the clients. The time the closes took is printed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.broker import Broker
from broker.consumer_groups import ConsumerGroups
from broker.producer_groups import ProducerGroups
from broker.transaction.service import TransactionService
from client.identity import heartbeat
from protocol.codes import RequestCode, ResponseCode
from remoting.client import RemotingClient
from tests.broker.support import running, small_config
from tests.support.wait import wait_until_async


class Reads:
    """The clients read within the connection_closed calls (``inside`` while one runs)."""

    def __init__(self) -> None:
        self.inside = False
        self.clients = 0
        self.closes = 0


class CountingGroups(dict[str, Any]):
    """group -> its clients, counting the clients read while ``reads.inside``: all of them
    when iterated, one per group looked up."""

    def __init__(self, table: dict[str, Any], reads: Reads) -> None:
        super().__init__(table)
        self.reads = reads

    def _all(self) -> None:
        if self.reads.inside:
            self.reads.clients += sum(len(v) for v in super().values())

    def __iter__(self) -> Iterator[str]:
        self._all()
        return super().__iter__()

    def items(self) -> Any:
        self._all()
        return super().items()

    def values(self) -> Any:
        self._all()
        return super().values()

    def get(self, key: str, default: Any = None) -> Any:
        self.reads.clients += self.reads.inside
        return super().get(key, default)

    def __getitem__(self, key: str) -> Any:
        self.reads.clients += self.reads.inside
        return super().__getitem__(key)


async def closed(
    broker: Broker, clients: int, monkeypatch: pytest.MonkeyPatch
) -> tuple[int, float]:
    """``clients`` connections, each heart-beating as a consumer and a transactional producer,
    closed at once: (clients read by the broker's connection_closed calls, seconds the closes
    took)."""
    sem = asyncio.Semaphore(100)
    address = f"127.0.0.1:{broker.port}"

    async def connect(i: int) -> RemotingClient:
        async with sem:
            conn = await RemotingClient.connect(address, 30.0)
            for beat in (
                heartbeat(f"close-cg-{i % 20}", f"c-{clients}-{i}", topic="CloseScale"),
                heartbeat(f"close-pg-{i % 20}", f"p-{clients}-{i}", producer=True),
            ):
                resp = await conn.request(RequestCode.HEART_BEAT, beat, None, 60.0)
                assert resp.code == ResponseCode.SUCCESS, resp.header
            return conn

    conns = await asyncio.gather(*(connect(i) for i in range(clients)))
    reads = Reads()
    ctx = broker.ctx
    tables = [(ctx.groups, "_groups"), (ctx.producers, "_groups"), (ctx.transactions, "_producers")]
    for owner, name in tables:
        assert len(getattr(owner, name)) == 20, (owner, name)  # every group heard on each
        setattr(owner, name, CountingGroups(getattr(owner, name), reads))

    def counted(cls: Any) -> None:
        close = cls.connection_closed

        def connection_closed(self: Any, conn: Any) -> Any:
            reads.inside = True
            try:
                return close(self, conn)
            finally:
                reads.inside = False
                reads.closes += cls is ConsumerGroups

        monkeypatch.setattr(cls, "connection_closed", connection_closed)

    for cls in (ConsumerGroups, ProducerGroups, TransactionService):
        counted(cls)
    began = time.perf_counter()
    for conn in conns:
        conn.close()
    await wait_until_async(
        lambda: reads.closes >= clients, f"the broker to close {clients} connections", 120
    )
    took = time.perf_counter() - began
    monkeypatch.undo()
    for owner, name in tables:  # plain dicts again, holding what the closes left
        setattr(owner, name, dict(getattr(owner, name)))
    return reads.clients, took


async def test_a_closed_connection_costs_the_same_with_ten_times_the_clients(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running(small_config(tmp_path, client_expiry_ms=600_000)) as broker:
        few, few_s = await closed(broker, 200, monkeypatch)
        many, many_s = await closed(broker, 2000, monkeypatch)
    print(
        f"200 closes {few_s:.2f} s, 2,000 closes {many_s:.2f} s; clients read by the closes: "
        f"{few} ({few / 200:g} a close), {many} ({many / 2000:g} a close)"
    )
    # Each close reads its own clients' groups (a consumer, a producer, a transactional
    # producer: 3), not every client of every group.
    assert (few / 200, many / 2000) == (3, 3), (
        f"clients read per close: {few / 200:g} with 200 clients, {many / 2000:g} with 2,000"
    )
