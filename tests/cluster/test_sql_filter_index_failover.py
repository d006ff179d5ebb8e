"""The property filter index survives a failover (issue 32 item 1): a slave builds the same
digests from the records it replicates, so once it is master a SQL92 pull passes over the
records it cannot match without reading them. A replica group of two with
enable_property_filter; 200 messages with k = i % 10; message 5's body damaged in the slave's
CommitLog file (its CRC fails there); the master killed -9; the new master (the old slave)
answers a pull of ``k = 3`` with exactly the 20 messages with k = 3, reading past the damaged
record, which a read would answer MESSAGE_CORRUPT."""

from __future__ import annotations

import pytest

from client import Producer
from client.bootstrap import Bootstrap
from protocol.pull import MaxOffsetQuery
from remoting.client import RemotingClient
from tests.broker.test_sql_filter_index_process import SENT, TOPIC, damage_record, pull_all
from tests.cluster.support import create_once_registered, full_sync_state_set, new_master
from tests.support.cluster import Cluster
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess


async def max_offset(address: str) -> int:
    conn = await RemotingClient.connect(address, timeout=2.0)
    try:
        req = MaxOffsetQuery(topic=TOPIC, queue_id=0)
        header, body = req.encode()
        resp = await conn.request(req.code, header, body, 5)
        return int(str(resp.header.get("offset", -1)))
    finally:
        conn.close()


async def test_a_new_master_passes_over_rejected_records_unread(
    cluster: Cluster, boot: Bootstrap
) -> None:
    cluster.add_group("broker-a", 2, config="enable_property_filter = true\n")
    doc = await full_sync_state_set(boot, cluster, size=2)
    master = str(doc["masterAddress"])
    old = next(b for b in cluster.brokers if b.address == master)
    slave = next(b for b in cluster.brokers if b.address != master)
    await create_once_registered(cluster, TOPIC, 1, "the topic")
    async with Producer(cluster.controller_addresses, send_deadline=30.0) as producer:
        ids = [
            (await producer.send(TOPIC, f"body-{i}".encode(), properties={"k": str(i % 10)})).msg_id
            for i in range(SENT)
        ]

    async def replicated() -> bool:
        return await max_offset(slave.address) == SENT

    await wait_until_async(
        replicated, "the slave to hold every message", 30, on_timeout=cluster.logs
    )
    damage_record(slave.data_dir, ids[5], 5)

    old.kill9()
    doc = await new_master(boot, cluster, master)
    assert doc["masterAddress"] == slave.address
    got = await pull_all(slave.address, "k = 3")
    assert got == list(range(3, SENT, 10)), got
