"""Sends that wait (all-ack, sync flush) on an in-process master whose two slaves are driven by
the test: a send is answered SUCCESS only once every SyncStateSet member acked it (and, with
flush = sync, once it is on disk); FLUSH_SLAVE_TIMEOUT otherwise; a closed connection releases
its parked sends."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from broker.broker import Broker
from broker.config import BrokerConfig
from protocol.codes import RequestCode, ResponseCode
from protocol.remoting import Frame
from remoting.client import RemotingClient
from tests.support.procs import free_port
from tests.support.wait import stays_async, wait_until_async

SLAVES = (2, 3)


class Master:
    """A controller-mode broker made master of epoch 1 with SyncStateSet {1, 2, 3}; the slaves
    exist only as the events the test feeds its HAService."""

    def __init__(self, broker: Broker, address: str) -> None:
        self.broker = broker
        self.address = address
        self.ha = broker.ha
        assert self.ha is not None

    @property
    def max_offset(self) -> int:
        return self.broker.ctx.store.max_offset

    def ack(self, *slaves: int, offset: int | None = None) -> None:
        assert self.ha is not None
        for slave in slaves:
            self.ha.slave_acked(slave, self.max_offset if offset is None else offset)

    def parked(self) -> int:
        return sum(c.inflight for c in self.broker.server.connections)


async def start_master(tmp: Path, **config: object) -> Master:
    listen = f"127.0.0.1:{free_port()}"
    cfg = BrokerConfig(
        controllers="127.0.0.1:1",
        data_dir=tmp,
        listen=listen,
        ha_port=0,
        metrics_port=0,
        commitlog_segment_bytes=1 << 20,
        consumequeue_segment_entries=4096,
        **config,  # type: ignore[arg-type]
    )
    broker = Broker(cfg)
    ctx = broker.ctx
    ctx.topics.load()
    await ctx.service.start()
    port = await broker.server.start(cfg.listen_host, cfg.listen_port)
    ha = broker.ha
    assert ha is not None
    await ha.start()
    await ha.become_master(1, [1, *SLAVES], 1, 1)
    for slave in SLAVES:
        ha.slave_connected(slave, f"127.0.0.1:{slave}", False)
    ctx.role_cell.swap(is_master=True, broker_id=1, lease_expires=time.monotonic() + 3600)
    return Master(broker, f"127.0.0.1:{port}")


@pytest.fixture
async def master(tmp_path: Path) -> AsyncIterator[Master]:
    m = await start_master(tmp_path, slave_ack_timeout_ms=300)
    try:
        yield m
    finally:
        await m.broker.stop()


async def send(master: Master, client: RemotingClient, i: int = 0) -> asyncio.Task[Frame]:
    """A send, once the master has stored it and parked it waiting for acks."""
    parked = master.parked()
    task = asyncio.ensure_future(
        client.request(RequestCode.SEND_MESSAGE, {"topic": "T", "queueId": i % 4}, b"m%d" % i, 10)
    )
    await wait_until_async(lambda: master.parked() > parked, f"send {i} stored and parked", 5)
    return task


async def test_a_send_is_answered_once_every_member_acked(master: Master) -> None:
    client = await RemotingClient.connect(master.address)
    try:
        tasks = [await send(master, client, i) for i in range(5)]
        assert master.parked() == 5
        master.ack(2)
        await stays_async(
            lambda: not any(t.done() for t in tasks), 0.1, "one slave's ack answering no send"
        )
        master.ack(3)
        frames = await asyncio.gather(*tasks)
        assert all(f.code == ResponseCode.SUCCESS for f in frames)
        offsets = sorted(int(f.header["queueOffset"]) for f in frames)
        assert len(offsets) == 5
        assert master.parked() == 0
    finally:
        client.close()


async def test_acks_release_sends_up_to_the_confirm_offset_only(master: Master) -> None:
    client = await RemotingClient.connect(master.address)
    try:
        first = await send(master, client, 0)
        middle = master.max_offset
        second = await send(master, client, 1)
        master.ack(2, 3, offset=middle)
        assert (await first).code == ResponseCode.SUCCESS
        await stays_async(lambda: not second.done(), 0.1, "the second send unanswered")
        master.ack(2, 3)
        assert (await second).code == ResponseCode.SUCCESS
    finally:
        client.close()


async def test_a_send_not_acked_in_time_answers_flush_slave_timeout(master: Master) -> None:
    client = await RemotingClient.connect(master.address)
    try:
        task = await send(master, client)
        master.ack(2)  # slave 3 stays silent
        frame = await asyncio.wait_for(task, 5)
        assert frame.code == ResponseCode.FLUSH_SLAVE_TIMEOUT
        assert master.parked() == 0
    finally:
        client.close()


async def test_parked_sends_fail_when_the_broker_stops_being_master(master: Master) -> None:
    client = await RemotingClient.connect(master.address)
    try:
        tasks = [await send(master, client, i) for i in range(3)]
        assert master.ha is not None
        await master.ha.become_slave("127.0.0.1:1", 2, 1, master.address)
        frames = await asyncio.wait_for(asyncio.gather(*tasks), 1.0)  # before the ack timeout
        assert [f.code for f in frames] == [ResponseCode.FLUSH_SLAVE_TIMEOUT] * 3
    finally:
        client.close()


async def test_a_closed_connection_releases_its_parked_sends(master: Master) -> None:
    client = await RemotingClient.connect(master.address)
    tasks = [await send(master, client, i) for i in range(4)]
    assert master.parked() == 4
    conn = next(iter(master.broker.server.connections))
    client.close()
    await asyncio.gather(*tasks, return_exceptions=True)
    await wait_until_async(
        lambda: not master.broker.server.connections, "the closed connection to go", 5
    )
    assert conn.inflight == 0
    master.ack(2, 3)  # the parked sends complete after the close: nothing breaks
    await asyncio.sleep(0.02)
    client = await RemotingClient.connect(master.address)
    try:
        task = await send(master, client, 9)
        master.ack(2, 3)
        assert (await task).code == ResponseCode.SUCCESS
    finally:
        client.close()


async def test_sync_flush_and_all_ack_together(tmp_path: Path) -> None:
    m = await start_master(tmp_path, flush="sync", slave_ack_timeout_ms=300)
    try:
        client = await RemotingClient.connect(m.address)
        try:
            task = await send(m, client)
            service = m.broker.ctx.service
            await wait_until_async(
                lambda: service.flushed_offset >= m.max_offset, "the send flushed", 5
            )
            await stays_async(lambda: not task.done(), 0.1, "a flushed, unacked send unanswered")
            m.ack(2, 3)
            assert (await task).code == ResponseCode.SUCCESS
            task = await send(m, client, 1)
            m.ack(2)
            assert (await asyncio.wait_for(task, 5)).code == ResponseCode.FLUSH_SLAVE_TIMEOUT
        finally:
            client.close()
    finally:
        await m.broker.stop()
