"""POP across a master failover after a snapshot of the in-flight set, real processes: the
master snapshots its set after every revive round that appended a record
(``pop_snapshot_records = 1``); after the acks, a snapshot holding them reaches the slave, the
master is killed -9, and the new master, which builds its set from that snapshot and the revive
records after it, redelivers exactly the unacked messages (docs/pop.md, Snapshots)."""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any

import pytest

from client import Producer
from client.bootstrap import Bootstrap
from tests.cluster.support import create_routed, with_one_group
from tests.cluster.test_pop_failover import _failover_redelivers_exactly_the_unacked
from tests.support.cluster import BrokerNode, Cluster
from tests.support.wait import wait_until

pytestmark = pytest.mark.multiprocess

N = 200


def events(node: BrokerNode, event: str) -> list[dict[str, Any]]:
    """The broker's JSON log lines of ``event``."""
    out = []
    for line in node.log().splitlines():
        if event in line:
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
    return [e for e in out if isinstance(e, dict) and e.get("event") == event]


cluster = with_one_group(2, "pop_snapshot_records = 1\n")


async def test_failover_after_a_snapshot_redelivers_exactly_the_unacked(
    cluster: Cluster, boot: Bootstrap
) -> None:
    async def settle(master: BrokerNode) -> None:
        # A snapshot taken after the acks (N/2 in flight) ...
        def snapshotted() -> bool:
            return any(e["inflight"] == N // 2 for e in events(master, "pop snapshot written"))

        wait_until(snapshotted, "a snapshot of the set after the acks", 20, interval=0.1)
        # ... is on the slave once a later all-ack send is (replication keeps log order).
        await create_routed(cluster.controller_addresses, "Later", 1)
        async with Producer(cluster.controller_addresses, send_deadline=30) as producer:
            await producer.send("Later", b"after the snapshot")

    started = time.monotonic()
    new = await _failover_redelivers_exactly_the_unacked(cluster, boot, N, 4.0, settle)
    (built,) = events(new, "pop state built from the revive log")
    assert built["snapshot"] is not None and built["inflight"] == N // 2, built
    print(f"the failover and redelivery took {time.monotonic() - started:.1f} s")
