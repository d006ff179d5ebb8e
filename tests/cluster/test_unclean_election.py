"""An unclean election, end to end with real processes: the SyncStateSet members that come back
refuse to cut what they know was acknowledged (docs/operations.md, "Unclean election and what it
risks" and "A slave refuses to truncate").

The group's SyncStateSet shrinks to the master and one slave (the third replica frozen); sends
are acknowledged by those two; both are killed with kill -9 right after the last answer; the
frozen replica thaws and, with ``enable_elect_unclean_master``, is elected although it lacks
those messages. When the two come back, each must refuse to truncate, keeping the acknowledged
messages for the operator to save. Before, the confirm offset each of them checks was read from
the store's checkpoint, written only at each flush: the messages acknowledged since the last
flush (up to ``flush_interval_ms``, 500 ms by default) were cut without a word. The brokers here
flush every 60 s, so no flush falls between the sends and the kill, whatever the machine's
speed: the test shows the window itself, not a race with it.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from client import Producer
from client.bootstrap import Bootstrap
from tests.cluster.support import (
    commitlog_bytes,
    create_topic,
    full_sync_state_set,
    send_acked,
    sync_state,
    wait_route_has_master,
)
from tests.support.cluster import BrokerNode, Cluster
from tests.support.wait import stays, wait_until_async

pytestmark = pytest.mark.multiprocess

TOPIC = "UncleanTopic"
REFUSAL = "refusing to truncate"


@pytest.fixture
def unclean(tmp_path: Path) -> Iterator[Cluster]:
    """Controllers that may elect a replica outside the SyncStateSet; one group of three whose
    brokers flush (and so write their checkpoint) once a minute. Every process thawed and ended
    by its PID after, also when the test fails."""
    c = Cluster(tmp_path)
    c.configure_controllers("enable_elect_unclean_master = true\n")
    try:
        c.start_controllers()
        c.add_group("broker-a", 3, config="flush_interval_ms = 60000\n")
        yield c
    finally:
        c.thaw_and_stop()


async def test_returning_sync_state_set_members_keep_what_was_acknowledged(
    unclean: Cluster,
) -> None:
    cluster = unclean
    boot = Bootstrap(cluster.controller_addresses, timeout=2.0)
    try:
        doc = await full_sync_state_set(boot, cluster)
        master = next(b for b in cluster.brokers if b.address == doc["masterAddress"])
        await wait_route_has_master(boot, cluster)
        await create_topic(boot, master.address, TOPIC, queues=1)
        slave, frozen = [b for b in cluster.brokers if b is not master]
        frozen.signal(signal.SIGSTOP)

        async def shrunk() -> bool:
            doc = await sync_state(boot)
            return doc is not None and len(doc["syncStateSet"]) == 2

        await wait_until_async(
            shrunk, "the SyncStateSet without the frozen replica", 60, on_timeout=cluster.logs
        )
        acked: dict[tuple[str, int, int], bytes] = {}
        async with Producer(cluster.controller_addresses, retries=0, send_timeout=5.0) as p:
            # m-1000 to m-1019: no body is part of another, so each is found on its own below
            await send_acked(p, TOPIC, range(1000, 1020), acked)
        for b in (master, slave):  # both at once: no election between the two
            b.signal(signal.SIGKILL)
        for b in (master, slave):
            b.kill9()  # reaps it
        assert len(acked) == 20, f"only {len(acked)} of 20 sends were acknowledged"
        bodies = sorted(acked.values())

        frozen.signal(signal.SIGCONT)

        async def frozen_elected() -> bool:
            # Not any other master: the controllers may name the killed slave for a moment,
            # before they learn it died too.
            doc = await sync_state(boot)
            return doc is not None and doc.get("masterAddress") == frozen.address

        await wait_until_async(
            frozen_elected, "the thawed replica elected (unclean)", 30, on_timeout=cluster.logs
        )

        for returning in (master, slave):
            returning.restart()
        for returning in (master, slave):
            await refuses(returning)

        def kept() -> bool:  # every acknowledged body, in both
            return all(
                all(body in commitlog_bytes(b, 1 << 30) for body in bodies) for b in (master, slave)
            )

        stays(kept, 2.0, "the acknowledged messages in both returning replicas' logs")
    finally:
        boot.close()


async def refuses(broker: BrokerNode) -> None:
    """Wait until ``broker`` logged its refusal to truncate (its log's tail on a timeout)."""
    await wait_until_async(
        lambda: REFUSAL in broker.log(),
        f"{broker.name} to refuse to truncate the acknowledged messages",
        30,
        interval=0.1,
        on_timeout=lambda: broker.log()[-4000:],
    )


async def test_a_group_left_without_a_master_says_why(tmp_path: Path) -> None:
    # A new user's trial: the slave stopped, then the master killed. The active controller
    # logged 'electing a master' and 'master changed master=None' and nothing said why no
    # replica was elected, nor what would bring a master back (the runbook's two ways).
    cluster = Cluster(tmp_path)
    try:
        cluster.start_controllers()
        cluster.add_group("broker-a", 2)
        boot = Bootstrap(cluster.controller_addresses, timeout=2.0)
        try:
            doc = await full_sync_state_set(boot, cluster, size=2)
            master = next(b for b in cluster.brokers if b.address == doc["masterAddress"])
            slave = next(b for b in cluster.brokers if b is not master)
            master_id = doc["masterBrokerId"]
            slave.stop()

            async def shrunk() -> bool:
                now = await sync_state(boot)
                return now is not None and now["syncStateSet"] == [master_id]

            await wait_until_async(shrunk, "the SyncStateSet of the master alone", 30)
        finally:
            boot.close()
        master.kill9()
        line = (
            f"broker group broker-a has no master: no alive SyncStateSet member to elect "
            f"(SyncStateSet [{master_id}], alive replicas [], enable_elect_unclean_master off)"
        )
        await wait_until_async(
            lambda: any(line in c.log() for c in cluster.controllers),
            "the active controller's line",
            30,
            on_timeout=cluster.logs,
        )
    finally:
        cluster.thaw_and_stop()
