"""A replica whose data directory was wiped comes back at its old address under a new broker id
(docs/operations.md, "A slave refuses to truncate": wiping instead of the key); the controllers
still list the old id, dead, at that address. ``rmqctl getBrokerEpoch`` must not show the new
broker's offsets and epochs as the old id's: an operator reads those rows to see where
histories diverged. Nor must the console's group view (its runtime figures are asked by
address)."""

from __future__ import annotations

import shutil
from typing import Any

import pytest

from client.bootstrap import Bootstrap
from console.reads import broker_group
from tests.cluster.support import full_sync_state_set, node_at, sync_state
from tests.support.cli import ok_json
from tests.support.cluster import Cluster
from tests.support.wait import wait_until_async

pytestmark = pytest.mark.multiprocess


async def test_get_broker_epoch_does_not_give_a_dead_id_the_figures_of_its_successor(
    cluster: Cluster, boot: Bootstrap
) -> None:
    cluster.add_group("broker-a", 2)
    doc = await full_sync_state_set(boot, cluster, size=2)
    slave_entry = next(r for r in doc["replicas"] if r["brokerId"] != doc["masterBrokerId"])
    old_id = slave_entry["brokerId"]
    slave = node_at(cluster, slave_entry["address"])

    slave.stop()
    shutil.rmtree(slave.data_dir)
    slave.restart()  # same listen and HA ports, an empty data directory

    async def successor() -> dict[str, Any] | None:
        state = await sync_state(boot)
        if state is None:
            return None
        return next(
            (
                r
                for r in state["replicas"]
                if r["address"] == slave.address and r["brokerId"] != old_id and r["alive"]
            ),
            None,
        )

    new = await wait_until_async(
        successor, "the wiped replica under a new id", 30, interval=0.1, on_timeout=cluster.logs
    )
    new_id = new["brokerId"]

    rows = {
        row["brokerId"]: row
        for row in ok_json("getBrokerEpoch", "-a", cluster.controller_addresses, "-b", "broker-a")
    }
    assert rows[new_id]["role"] == "SLAVE" and "error" not in rows[new_id]
    assert rows[old_id] == {
        "brokerId": old_id,
        "address": slave.address,
        "role": None,
        "maxOffset": None,
        "confirmOffset": None,
        "epochs": [],
        "error": f"{slave.address} answers as broker {new_id}, not {old_id}",
    }

    group = await broker_group(cluster.controller_addresses, "broker-a", "DefaultCluster")
    by_id = {r.broker_id: r for r in group.replicas}
    assert by_id[new_id].put_tps is not None and by_id[new_id].error is None
    dead = by_id[old_id]
    assert (dead.put_tps, dead.get_tps, dead.disk_ratio, dead.max_offset) == (None,) * 4
    assert dead.error == f"{slave.address} answers as broker {new_id}, not {old_id}"
