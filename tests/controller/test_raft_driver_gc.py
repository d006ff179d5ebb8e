"""The Raft driver keeps the state it holds for long out of the garbage collector's full
collections (issue 34: at 100,000 topics a full collection over the state held a controller's
loop for up to a second, and one over a restarted controller's decoding ran five times during
its start): a restart decodes its snapshot with the collector paused, and the state as of a
snapshot just taken is frozen, as a restored one is. Three in-process nodes on loopback."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from controller.raft_driver import NotLeaderError
from tests.controller.support import KV, DriverCluster, DriverNode, put
from tests.support.wait import wait_until_async


@pytest.fixture(autouse=True)
def _unfrozen() -> Iterator[None]:
    """What a test froze goes back under the collector (the worker runs other tests)."""
    yield
    gc.unfreeze()


class RecordingKV(KV):
    """Records whether the collector was on while a snapshot was decoded."""

    def __init__(self, seen: list[bool]) -> None:
        super().__init__()
        self.seen = seen

    def prepare_restore(
        self, data: bytes, between: Callable[[], None] | None = None
    ) -> Callable[[], None]:
        self.seen.append(gc.isenabled())
        return super().prepare_restore(data, between)


async def test_a_restart_decodes_its_snapshot_with_the_collector_paused(tmp_path: Path) -> None:
    seen: list[bool] = []
    c = DriverCluster(tmp_path, snapshot_every=8, state_machine=lambda _id: RecordingKV(seen))
    await c.start()
    try:
        leader = await c.leader()
        for i in range(20):
            await leader.d.propose(put(f"k{i}", str(i)), 5.0)
        node = next(n for n in c.nodes.values() if n is not leader)
        await wait_until_async(
            lambda: node.d.storage.snapshot_meta().index > 0, "a snapshot on the follower", 10
        )
        await node.stop()
        assert gc.isenabled()
        seen.clear()
        await node.start()  # restores the snapshot from its disk, in RaftDriver.__init__
        assert seen == [False]
        assert gc.isenabled()
        await wait_until_async(lambda: node.kv.data == leader.kv.data, "the restart caught up", 10)
    finally:
        await c.stop()


async def _propose(c: DriverCluster, data: bytes) -> None:
    """``data`` proposed on the leader of the moment: a leadership change under load (a CI run
    once: NotLeaderError at the first leader) moves the proposal to the new leader."""
    deadline = asyncio.get_running_loop().time() + 20.0
    while True:
        leader = await c.leader()
        try:
            await leader.d.propose(data, 5.0)
            return
        except NotLeaderError:
            if asyncio.get_running_loop().time() > deadline:
                raise


async def _move_away(c: DriverCluster, first: DriverNode) -> None:
    """Leadership away from ``first``. A CI run once: NotLeaderError from the transfer, because
    the leadership had already moved under load (what this step wants anyway)."""
    deadline = asyncio.get_running_loop().time() + 20.0
    while (await c.leader()) is first:
        other = next(n for n in c.nodes.values() if n is not first)
        try:
            await first.d.transfer_leadership(other.id, 5.0)
        except (NotLeaderError, TimeoutError):
            if asyncio.get_running_loop().time() > deadline:
                raise


async def test_the_state_as_of_a_snapshot_taken_is_frozen(tmp_path: Path) -> None:
    c = DriverCluster(tmp_path, snapshot_every=8)
    await c.start()
    try:
        leader = await c.leader()
        held = leader.kv.applied  # a list the state machine holds (tracked by the collector)
        assert gc.is_tracked(held) and any(o is held for o in gc.get_objects())
        for i in range(20):
            if i == 4:  # leadership moves before any snapshot: the node's own snapshot counts
                await _move_away(c, leader)
            await _propose(c, put(f"k{i}", str(i)))
        # every node snapshots what it applied: the first leader's own snapshot
        await wait_until_async(
            lambda: leader.d.storage.snapshot_meta().index > 0, "a snapshot on the leader", 10
        )
        # Frozen objects are in no generation: gc.get_objects() lists only those it scans.
        assert not any(o is held for o in gc.get_objects())
    finally:
        await c.stop()
