"""The rmq source in controller mode: it reads only committed messages (up to the confirm
offset), through the controllers, from a real broker group of two replicas."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from client import Producer
from client.bootstrap import Bootstrap
from pipeline.batch_reader import RmqBatchReader
from pipeline.options import ReadOptions
from pipeline.rows import message_schema
from protocol.codes import RequestCode
from remoting.client import RemotingClient
from tests.cluster.support import create_topic, full_sync_state_set, node_at, wait_route_has_master
from tests.support.cluster import Cluster, controllers_started
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess

TOPIC = "CommittedT"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    # Sends do not wait for the slave, and a stalled slave stays in the SyncStateSet for a
    # minute: while it is stopped, the master stores messages it cannot confirm.
    with controllers_started(tmp_path) as c:
        c.add_group(
            "broker-a",
            2,
            config="all_ack_in_sync_state_set = false\nha_max_time_slave_not_catchup_ms = 60000\n",
        )
        yield c


async def runtime(address: str) -> dict[str, Any]:
    conn = await RemotingClient.connect(address)
    try:
        resp = await conn.call(RequestCode.GET_BROKER_RUNTIME_INFO)
        return dict(msgpack.unpackb(resp.body))
    finally:
        conn.close()


def read_ids(controllers: str) -> list[str]:
    reader = RmqBatchReader(
        ReadOptions.parse({"controllers": controllers, "topic": TOPIC}), message_schema()
    )
    return [
        row["msgId"]
        for part in reader.partitions()
        for batch in reader.read(part)
        for row in batch.to_pylist()
    ]


async def test_only_confirmed_messages_are_read(cluster: Cluster) -> None:
    boot = Bootstrap(cluster.controller_addresses)
    try:
        doc = await full_sync_state_set(boot, cluster, size=2)
        master_address = doc["masterAddress"]
        slave = next(b for b in cluster.brokers if b.address != master_address)
        assert node_at(cluster, master_address).alive()
        await wait_route_has_master(boot, cluster)
        await create_topic(boot, master_address, TOPIC, queues=2)

        async def all_confirmed() -> bool:
            info = await runtime(master_address)
            return bool(info["confirmOffset"] == info["maxOffset"])

        async with Producer(cluster.controller_addresses) as producer:
            confirmed = [await producer.send(TOPIC, b"c%d" % i) for i in range(20)]
            await wait_until_async(
                all_confirmed,
                "the slave to confirm the first messages",
                30,
                interval=0.1,
                on_timeout=cluster.logs,
            )
            slave.signal(signal.SIGSTOP)
            pending = [await producer.send(TOPIC, b"p%d" % i) for i in range(15)]
        info = await runtime(master_address)
        assert info["maxOffset"] > info["confirmOffset"]

        # Stored on the master but not on every SyncStateSet member: not read.
        ids = await asyncio.to_thread(read_ids, cluster.controller_addresses)
        assert sorted(ids) == sorted(r.msg_id for r in confirmed)
        # (The slave was still a member all along: the master only drops a silent one after its
        # 20 s connection idle timeout.)
        assert (await runtime(master_address))["confirmOffset"] == info["confirmOffset"]

        slave.signal(signal.SIGCONT)
        await wait_until_async(
            all_confirmed,
            "the slave to confirm everything",
            30,
            interval=0.1,
            on_timeout=cluster.logs,
        )
        ids = await asyncio.to_thread(read_ids, cluster.controller_addresses)
        assert sorted(ids) == sorted(r.msg_id for r in confirmed + pending)
    finally:
        boot.close()
