"""Controller mode end to end, with real processes: three controllers, one broker group of three.

Kill -9 the master while producers send with all-ack; the controllers elect a new master, the
producer carries on, the old master comes back as a slave (truncated to the consistent point),
and then: every acknowledged message is consumable, in order per queue, and the replicas'
CommitLogs are byte-identical up to the confirm offset.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

import pytest

from client import Consumer, Producer
from client.bootstrap import Bootstrap
from tests.cluster.support import (
    assert_replicas_identical,
    create_topic,
    receive_acked,
    send_acked,
    sync_state,
    wait_route_has_master,
    with_one_group,
)
from tests.support.cluster import Cluster
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess

TOPIC = "FailoverTopic"


cluster = with_one_group(3)


async def test_master_killed_under_load_loses_no_acknowledged_message(cluster: Cluster) -> None:
    boot = Bootstrap(cluster.controller_addresses, timeout=2.0)
    try:

        async def full_set() -> dict[str, Any] | None:
            doc = await sync_state(boot)
            return (
                doc if doc and doc.get("masterAddress") and len(doc["syncStateSet"]) == 3 else None
            )

        doc = await wait_until_async(
            full_set,
            "a master with all three replicas in sync",
            60,
            interval=0.1,
            on_timeout=cluster.logs,
        )
        first_master, first_epoch = doc["masterAddress"], doc["masterEpoch"]
        first_id = doc["masterBrokerId"]
        assert sorted(r["brokerId"] for r in doc["replicas"]) == [1, 2, 3]
        await wait_route_has_master(boot, cluster)

        acked: dict[tuple[str, int, int], bytes] = {}
        async with Producer(
            cluster.controller_addresses, retries=6, send_timeout=5.0, send_deadline=30.0
        ) as producer:
            await create_topic(boot, first_master, TOPIC)

            def send_range(lo: int, hi: int) -> Awaitable[None]:
                return send_acked(producer, TOPIC, range(lo, hi), acked)

            await asyncio.gather(*(send_range(w * 100, w * 100 + 100) for w in range(4)))
            master = next(b for b in cluster.brokers if b.address == first_master)
            master.kill9()

            async def new_master() -> dict[str, Any] | None:
                doc = await sync_state(boot)
                ok = doc and doc.get("masterAddress") not in (None, "", first_master)
                return doc if ok else None

            doc = await wait_until_async(
                new_master, "a new master", 30, interval=0.1, on_timeout=cluster.logs
            )
            assert doc["masterEpoch"] > first_epoch
            await asyncio.gather(
                *(send_range(1000 + w * 100, 1000 + w * 100 + 100) for w in range(4))
            )

        # Back at another address: it keeps its persistent id, the controller learns the address.
        master.restart(new_address=True)
        doc = await wait_until_async(
            full_set,
            "the old master back in sync as a slave",
            60,
            interval=0.1,
            on_timeout=cluster.logs,
        )
        assert doc["masterAddress"] != master.address
        addresses = {r["brokerId"]: r["address"] for r in doc["replicas"]}
        assert addresses[first_id] == master.address != first_master
        assert sorted(addresses) == [1, 2, 3]

        async with Consumer(cluster.controller_addresses, "checker", TOPIC) as consumer:
            received = await receive_acked(consumer, acked)
        missing = [k for k in acked if received.get(k) != acked[k]]
        assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {missing[:5]}"
        assert len(acked) > 600

        await assert_replicas_identical(cluster)
    finally:
        boot.close()
