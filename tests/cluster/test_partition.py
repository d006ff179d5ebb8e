"""A network partition that isolates the master from the controllers but not from its slaves
or its clients (docs/architecture.md), with each process on a test host of its own: Linux
network namespaces on a bridge, the partition a pair of blackhole routes.

The controllers stop hearing the master, declare it dead and elect a slave from the
SyncStateSet; the slaves follow the new master. The old master keeps taking requests from a
client that still reaches it; whatever it acknowledged must survive, so once the partition
heals, every acknowledged message is consumable and the replicas are byte-identical up to the
confirm offset.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from client import Producer
from client.bootstrap import Bootstrap
from protocol.codes import ResponseCode
from remoting.client import RemotingClient
from tests.cluster import netns
from tests.cluster.support import (
    Key,
    assert_replicas_identical,
    consume_all,
    create_topic,
    full_sync_state_set,
    new_master,
    raw_send,
    synced_master,
)
from tests.support.cluster import Cluster
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess

TOPIC = "PartitionTopic"


@pytest.fixture
def cluster(tmp_path: Path, net: netns.HostNet) -> Iterator[Cluster]:
    ctl = net.add_host("c")
    c = Cluster(tmp_path, ctl, net.exec_prefix(net.netns_of(ctl)))
    try:
        c.start_controllers()
        hosts = [net.add_host(f"b{i}") for i in range(3)]
        c.add_group(
            "broker-a", 3, hosts=hosts, prefixes=[net.exec_prefix(net.netns_of(h)) for h in hosts]
        )
        yield c
    finally:
        c.stop()


async def test_a_master_partitioned_from_the_controllers_loses_no_acknowledged_write(
    cluster: Cluster, net: netns.HostNet
) -> None:
    boot = Bootstrap(cluster.controller_addresses, timeout=2.0)
    conn: RemotingClient | None = None
    try:
        old = await synced_master(boot, cluster)
        await create_topic(boot, old.address, TOPIC)
        acked: dict[Key, bytes] = {}
        after_cut: list[int] = []
        cut = asyncio.Event()
        stop = asyncio.Event()
        conn = await RemotingClient.connect(old.address)

        async def probe(conn: RemotingClient) -> None:
            i = 0
            while not stop.is_set():
                body = f"probe-{i}".encode()
                i += 1
                code, key = await raw_send(conn, TOPIC, body)
                if cut.is_set():
                    after_cut.append(code)
                if code == ResponseCode.SUCCESS and key is not None:
                    acked[key] = body
                else:
                    await asyncio.sleep(0.05)

        prober = asyncio.ensure_future(probe(conn))
        await wait_until_async(
            lambda: len(acked) >= 20, "20 acknowledged probes", 30, interval=0.05
        )
        controller_host = cluster.controllers[0].host
        net.partition(old.host, [controller_host])
        cut.set()
        await new_master(boot, cluster, old.address)
        async with Producer(
            cluster.controller_addresses, retries=8, send_timeout=5.0, send_deadline=30.0
        ) as producer:
            for i in range(20):
                r = await producer.send(TOPIC, f"new-{i}".encode())
                acked[(r.broker_name, r.queue_id, r.queue_offset)] = f"new-{i}".encode()

        # Keep probing the old master a while after the election.
        def refusals() -> int:
            return len([c for c in after_cut if c != ResponseCode.SUCCESS])

        target = refusals() + 5
        await wait_until_async(
            lambda: refusals() >= target,
            "the old master to refuse sends after the election",
            20,
            interval=0.05,
            on_timeout=lambda: f"the old master kept acknowledging after the election: {after_cut}",
        )
        stop.set()
        await prober
        assert set(after_cut) - {ResponseCode.SUCCESS} <= {
            ResponseCode.MASTER_FENCED,
            ResponseCode.NOT_MASTER,
            ResponseCode.FLUSH_SLAVE_TIMEOUT,
        }, after_cut

        net.heal(old.host, [controller_host])
        doc = await full_sync_state_set(boot, cluster, timeout=60)
        assert doc["masterAddress"] != old.address
        received = await consume_all(cluster.controller_addresses, TOPIC, set(acked))
        lost = {k: v for k, v in acked.items() if received.get(k) != v}
        assert not lost, f"{len(lost)} acknowledged messages lost: {sorted(lost)[:5]}"
        await assert_replicas_identical(cluster)
    finally:
        if conn is not None:
            conn.close()
        boot.close()
