"""A slave that joins a running group is admitted by the master at once, against real
processes: the master does not wait for its next poll of the controllers to learn the new
replica, and refuses nothing on the way (no warning in either log, nothing counted)."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

import pytest

from client.bootstrap import Bootstrap
from tests.cluster.support import full_sync_state_set, synced_master, takes_writes
from tests.support.cluster import BrokerNode, Cluster
from tests.support.procs import free_port, port_open
from tests.support.wait import wait_until, wait_until_async

pytestmark = pytest.mark.multiprocess

# The master polls the controllers once a minute: it can learn of the new slave only by asking
# when that slave shakes hands.
SLOW_POLLS = "replica_info_poll_interval_ms = 60000\n"


def refused_total(metrics_port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read()
    return sum(
        float(m.group(1))
        for m in re.finditer(rb"^rmq_broker_ha_refused_total\{[^}]*\} (\S+)$", text, re.M)
    )


async def test_a_slave_that_registers_between_two_polls_of_the_master_is_admitted_at_once(
    cluster: Cluster, boot: Bootstrap, tmp_path: Path
) -> None:
    metrics = free_port()
    cluster.add_group(
        "broker-a", 1, config=SLOW_POLLS, per_broker=[["--metrics-port", str(metrics)]]
    )
    master = await synced_master(boot, cluster, size=1)
    await wait_until_async(lambda: takes_writes(master.address), "the master to take writes", 20)

    slave = BrokerNode(tmp_path, "broker-a", 1, cluster.controller_addresses, [], SLOW_POLLS)
    slave.start()
    cluster.brokers.append(slave)
    wait_until(lambda: port_open(slave.port), "the new slave to listen", 30)
    # Well inside the master's minute between polls.
    await full_sync_state_set(boot, cluster, size=2, timeout=20)

    assert refused_total(metrics) == 0
    for node, line in [(master, "refused an HA peer"), (slave, "HA connection to the master")]:
        assert line not in node.log(), node.log()
