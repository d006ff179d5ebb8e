"""Message lookup against a real replica group: every message of a key is found after kill -9
of the master, on the new master; a message id whose store host is dead is served by a replica;
a lookup never returns a message the group has not committed."""

from __future__ import annotations

import signal

import pytest

from client import Producer
from client.bootstrap import Bootstrap
from client.errors import ClientError
from client.lookup import Lookup
from protocol.codes import RequestCode, ResponseCode
from protocol.remoting import Frame
from remoting.client import RemotingClient
from tests.cluster.support import (
    create_topic,
    full_sync_state_set,
    new_master,
    node_at,
    wait_route_has_master,
)
from tests.support.cluster import Cluster
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess

TOPIC = "LookupTopic"


async def test_query_by_key_finds_every_message_on_the_new_master_and_only_committed_ones(
    cluster: Cluster,
) -> None:
    cluster.add_group("broker-a", 3)
    boot = Bootstrap(cluster.controller_addresses, timeout=2.0)
    try:
        doc = await full_sync_state_set(boot, cluster)
        first_master = doc["masterAddress"]
        await wait_route_has_master(boot, cluster)
        await create_topic(boot, first_master, TOPIC)
        ids: dict[str, list[str]] = {"order-1": [], "order-2": []}
        async with Producer(cluster.controller_addresses, send_deadline=30.0) as producer:
            for i in range(24):
                key = f"order-{1 + i % 2}"
                r = await producer.send(TOPIC, f"m-{i}".encode(), keys=f"{key} all")
                ids[key].append(r.msg_id)

        node_at(cluster, first_master).kill9()
        doc = await new_master(boot, cluster, first_master)
        master = doc["masterAddress"]

        async with Lookup(cluster.controller_addresses) as lookup:

            async def from_new_master() -> list[str] | None:
                try:
                    found = await lookup.by_key(TOPIC, "all")
                except ClientError:
                    return None
                got = sorted(m.msg_id for m in found)
                ok = got == expected and all(m.address == master for m in found)
                return got if ok else None

            # A message acknowledged just before the kill becomes visible on the new master
            # once its confirm offset covers it (as it does for consumers).
            expected = sorted(ids["order-1"] + ids["order-2"])
            await wait_until_async(
                from_new_master, "every message of the key on the new master", 45, interval=0.2
            )
            for key in ids:
                found = await lookup.by_key(TOPIC, key)
                assert [m.msg_id for m in found] == ids[key]
                assert [m.record.body for m in found] == [
                    f"m-{i}".encode() for i in range(24) if f"order-{1 + i % 2}" == key
                ]
                assert all(m.record.store_host == first_master for m in found)
            # The id names the dead master's host: a replica answers with the same record.
            by_id = await lookup.by_id(ids["order-2"][3])
            assert by_id.record.body == b"m-7" and by_id.address != first_master

            # Committed only: with the slave frozen the master stores a send it cannot
            # confirm (the send times out waiting for the slave); no lookup returns it.
            doc = await full_sync_state_set(boot, cluster, size=2)
            assert doc["masterAddress"] == master
            slave = next(b for b in cluster.brokers if b.alive() and b.address != master)
            slave.signal(signal.SIGSTOP)
            try:
                conn = await RemotingClient.connect(master)
                try:

                    async def stored() -> Frame | None:
                        resp = await conn.request(
                            RequestCode.SEND_MESSAGE,
                            {"topic": TOPIC, "queueId": 0, "keys": "pending"},
                            b"not yet committed",
                            15,
                        )
                        # The controllers may name the master before it takes writes.
                        return None if resp.code == ResponseCode.NOT_MASTER else resp

                    resp = await wait_until_async(stored, "the new master to take writes", 30)
                finally:
                    conn.close()
                assert resp.code == ResponseCode.FLUSH_SLAVE_TIMEOUT, resp
                assert await lookup.by_key(TOPIC, "pending") == []
            finally:
                slave.signal(signal.SIGCONT)

            async def committed() -> bool:
                try:
                    return len(await lookup.by_key(TOPIC, "pending")) == 1
                except ClientError:
                    return False

            await wait_until_async(
                committed, "the message confirmed once the slave is back", 45, interval=0.2
            )
    finally:
        boot.close()
