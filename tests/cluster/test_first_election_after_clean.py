"""A whole group cleaned from the controllers elects the replica that holds the most.

cleanBrokerMetadata of a whole dead group forgets its master, epochs and SyncStateSet. When its
replicas came back, the controllers elected the first one to register, as at a group's first
start, whatever it held: started first, a replica that had missed the last writes became master,
and the acknowledged messages only the other held were not served (it refused to truncate
them). Now a first election whose replicas report stored data waits first_election_wait_ms for
the others and elects the one with the latest epoch and the most data among them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from client import Producer
from client.bootstrap import Bootstrap
from tests.cluster.support import (
    Key,
    cluster_rmqctl,
    consume_all,
    create_routed,
    full_sync_state_set,
    node_at,
    send_acked,
    sync_state,
)
from tests.support.cluster import Cluster
from tests.support.wait import wait_until, wait_until_async

pytestmark = pytest.mark.multiprocess

TOPIC = "Cleaned"


async def test_a_cleaned_group_elects_the_replica_that_holds_the_most(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    cluster.configure_controllers("first_election_wait_ms = 15000\n")
    boot = Bootstrap(cluster.controller_addresses, timeout=2.0)
    try:
        cluster.start_controllers()
        cluster.add_group("broker-a", replicas=2)
        doc = await full_sync_state_set(boot, cluster, size=2)
        master = node_at(cluster, doc["masterAddress"])
        slave = next(b for b in cluster.brokers if b is not master)
        await create_routed(cluster.controller_addresses, TOPIC, 2)
        acked: dict[Key, bytes] = {}
        async with Producer(cluster.controller_addresses, send_deadline=30) as producer:
            await send_acked(producer, TOPIC, range(10), acked)
            slave.stop()  # the master goes on alone once the SyncStateSet drops the slave
            await send_acked(producer, TOPIC, range(10, 20), acked)
        assert len(acked) == 20
        master.stop()

        def cleaned() -> bool:
            return cluster_rmqctl(cluster, "cleanBrokerMetadata", "-b", "broker-a").returncode == 0

        wait_until(cleaned, "cleanBrokerMetadata of the dead group", 30, interval=0.5)

        # The replica that missed the last ten comes back first.
        slave.restart()

        async def registered() -> bool:
            doc = await sync_state(boot)
            return bool(doc and doc.get("replicas"))

        await wait_until_async(registered, "the first replica registered", 30, interval=0.1)
        master.restart()

        async def elected() -> str | None:
            doc = await sync_state(boot)
            return str(doc["masterAddress"]) if doc and doc.get("masterAddress") else None

        chosen = await wait_until_async(
            elected, "a master", 60, interval=0.2, on_timeout=cluster.logs
        )
        assert chosen == master.address, f"elected {chosen}, not {master.address}, which holds more"
        got = await consume_all(cluster.controller_addresses, TOPIC, set(acked))
        assert got == acked
    finally:
        boot.close()
        cluster.thaw_and_stop()
