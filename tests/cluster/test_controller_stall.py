"""A stall of the whole host (every controller process stands still at once) starts no
controller election (issue 17's 10-minute soak: the controllers' Raft term went from 2 to 14
over stalls of 200-635 ms that every process on the machine logged at the same instants, and
each election briefly fenced the master).

Before the fix every controller fed the core the ticks it missed in a row on resuming, before
reading the messages that queued meanwhile: a stall past the election timeout (300-600 ms) made
the followers campaign. Now missed ticks are a stall (``RaftNode.tick_after_stall``): the
leader's lease counts it, no follower's election clock does.
"""

from __future__ import annotations

import asyncio
import signal
import time

import pytest

from tests.controller.support import agreed_leader, metadata
from tests.support.cluster import Cluster

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
    for round_ in range(3):
        for c in cluster.controllers:
            c.signal(signal.SIGSTOP)
        await asyncio.sleep(STALL_S)  # the stall's length, not a wait for a condition
        for c in cluster.controllers:
            c.signal(signal.SIGCONT)
        seen: list[tuple[str, set[int]]] = []
        deadline = time.monotonic() + 2.0  # sampled over three election timeouts after it
        while time.monotonic() < deadline:
            seen.append((await agreed_leader(addresses), await terms(cluster)))
            await asyncio.sleep(0.1)
        assert {s[0] for s in seen} == {leader}, f"round {round_}: leaders {seen}"
        assert set().union(*(s[1] for s in seen)) == before, f"round {round_}: terms {seen}"
