"""A stall of the whole host (every process stands still at once) starts no controller election
and no master election (issue 17's 10-minute soak: the controllers' Raft term went from 2 to 14
over stalls of 200-635 ms that every process on the machine logged at the same instants, and
each election briefly fenced the master).

Before the fix every controller fed the core the ticks it missed in a row on resuming, before
reading the messages that queued meanwhile: a stall past the election timeout (300-600 ms) made
the followers campaign. Now missed ticks are a stall (``RaftNode.tick_after_stall``): the
leader's lease counts it, no follower's election clock does. Likewise the active controller
judged every broker dead by the silence of its own stall (a scan right after it found every
heartbeat older than the broker timeout) and elected a new master; a scan that comes late now
restarts the brokers' grace period (``BrokerLiveTable.stood_still``).
"""

from __future__ import annotations

import asyncio
import signal

import pytest

from client.bootstrap import Bootstrap
from client.producer import Producer
from tests.cluster.support import create_topic, full_sync_state_set, sync_state
from tests.controller.support import agreed_leader, metadata
from tests.support.cluster import Cluster
from tests.support.wait import stays_async

pytestmark = pytest.mark.multiprocess

STALL_S = 1.0
"""Past the longest election timeout (6 ticks of 100 ms) with a margin."""


async def terms(cluster: Cluster) -> set[int]:
    docs = [await metadata(c.address) for c in cluster.controllers]
    return {int(d["term"]) for d in docs if d is not None}


async def test_a_stall_of_every_controller_starts_no_election(cluster: Cluster) -> None:
    addresses = [c.address for c in cluster.controllers]
    leader = await agreed_leader(addresses)
    before = await terms(cluster)
    assert len(before) == 1, before
    seen: list[tuple[str, set[int]]] = []

    async def same_leader_and_term() -> bool:
        seen.append((await agreed_leader(addresses), await terms(cluster)))
        return seen[-1][0] == leader and seen[-1][1] <= before

    for round_ in range(2):
        for c in cluster.controllers:
            c.signal(signal.SIGSTOP)
        await asyncio.sleep(STALL_S)  # the stall's length, not a wait for a condition
        for c in cluster.controllers:
            c.signal(signal.SIGCONT)
        seen.clear()
        await stays_async(  # over three election timeouts after it
            same_leader_and_term,
            2.0,
            f"round {round_}: leader {leader} in term {before}",
            interval=0.1,
            on_failure=lambda: f"leaders and terms seen: {seen}",
        )
        assert set().union(*(s[1] for s in seen)) == before, f"round {round_}: terms {seen}"


async def test_a_stall_of_the_whole_host_elects_no_new_master(
    cluster: Cluster, boot: Bootstrap
) -> None:
    cluster.add_group("broker-a", 3)
    doc = await full_sync_state_set(boot, cluster)
    master, epoch = doc["masterAddress"], doc["masterEpoch"]
    await create_topic(boot, master, "stall")
    async with Producer(cluster.controller_addresses) as producer:
        await producer.send("stall", b"before")
        everyone = [*cluster.controllers, *cluster.brokers]
        for d in everyone:
            d.signal(signal.SIGSTOP)
        await asyncio.sleep(1.5)  # past the brokers' 1 s timeout; the stall's length
        for d in everyone:
            d.signal(signal.SIGCONT)
        seen: list[tuple[str, int] | None] = []

        async def same_master() -> bool:
            now = await sync_state(boot)
            seen.append(None if now is None else (now["masterAddress"], now["masterEpoch"]))
            return seen[-1] in (None, (master, epoch))  # None: no answer this time

        await stays_async(  # over three broker timeouts after it
            same_master,
            3.0,
            f"the master {master} at epoch {epoch}",
            interval=0.1,
            on_failure=lambda: f"seen: {seen}",
        )
        assert any(s is not None for s in seen), "no controller answered"
        await producer.send("stall", b"after")  # the master takes writes
