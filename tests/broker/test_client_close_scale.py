"""A closed client connection costs the broker the same with ten times the clients (issue 34
item 3, its 10x column: 2,000 connections).

A real broker process; each client a connection of its own heart-beating as a consumer and as a
transactional producer (what the SDK's consumers and transactional producers send), then every
connection closed at once. Before, the broker's on_close scanned every member of every consumer
group, every producer group and every transactional producer for the connection's own
(ConsumerGroups, ProducerGroups and TransactionService.connection_closed): O(clients) per close,
so a fleet of clients reconnecting cost the broker O(clients^2). Now each keeps its clients by
connection. Measured as the broker's CPU per closed connection (/proc/<pid>/stat), 200 then
2,000 connections.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from bench.controller_bench import process_cpu
from bench.scale_clients import sockets
from client.identity import heartbeat
from protocol.codes import RequestCode, ResponseCode
from remoting.client import RemotingClient
from tests.support.procs import BrokerProc, started
from tests.support.wait import wait_until_async


async def cpu_per_close(broker: BrokerProc, clients: int) -> float:
    """Seconds of the broker's CPU per connection, ``clients`` closed at once."""
    sem = asyncio.Semaphore(100)

    async def connect(i: int) -> RemotingClient:
        async with sem:
            conn = await RemotingClient.connect(broker.address, 30.0)
            for beat in (
                heartbeat(f"close-cg-{i % 20}", f"c-{clients}-{i}", topic="CloseScale"),
                heartbeat(f"close-pg-{i % 20}", f"p-{clients}-{i}", producer=True),
            ):
                resp = await conn.request(RequestCode.HEART_BEAT, beat, None, 60.0)
                assert resp.code == ResponseCode.SUCCESS, resp.header
            return conn

    conns = await asyncio.gather(*(connect(i) for i in range(clients)))
    before = sockets(broker.pid)
    cpu0 = process_cpu(broker.pid)
    for conn in conns:
        conn.close()

    def closed() -> bool:
        return sockets(broker.pid) <= before - clients

    await wait_until_async(closed, f"the broker to close {clients} connections", 120)
    return (process_cpu(broker.pid) - cpu0) / clients


async def test_a_closed_connection_costs_the_same_with_ten_times_the_clients(
    tmp_path: Path,
) -> None:
    with started(BrokerProc(tmp_path)) as broker:
        few = await cpu_per_close(broker, 200)
        many = await cpu_per_close(broker, 2000)
    # Linear: the same per connection (3x leaves room for a loaded machine; 200 closes read
    # at least one 10 ms clock tick, 50 us each). O(clients) per close: 50 -> 485 us.
    assert many < 3 * max(few, 50e-6), (few, many)
