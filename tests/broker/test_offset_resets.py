"""The resets a master keeps for a group's next read (broker/offset_resets.py): taken once, a
later one replaces an earlier, and one made in another master epoch is never taken (a group
that read on another master since a failover must not be moved back when this broker is master
again); a replayed RESET record of the revive log moves a POP group's offset back and keeps
its deliveries in flight."""

from __future__ import annotations

from broker.offset_resets import PendingResets
from broker.pop.inflight import PopState
from protocol.pop import Checkpoint, Reset


def test_a_reset_is_taken_once_and_a_later_one_replaces_it() -> None:
    resets = PendingResets()
    assert resets.take("g", "T", 0) is None
    resets.assign("g", "T", 0, 5)
    resets.assign("g", "T", 0, 7)
    resets.assign("g", "T", 1, 9)
    assert resets.take("g", "T", 0) == 7
    assert resets.take("g", "T", 0) is None
    assert resets.take("h", "T", 1) is None  # another group's read
    assert len(resets) == 1


def test_a_reset_of_an_earlier_master_epoch_is_not_taken() -> None:
    epoch = 3
    resets = PendingResets(lambda: epoch)
    resets.assign("g", "T", 0, 5)
    epoch = 4  # failed over and back: the group read elsewhere meanwhile
    assert resets.take("g", "T", 0) is None
    assert len(resets) == 0
    resets.assign("g", "T", 0, 6)
    assert resets.take("g", "T", 0) == 6


def test_a_replayed_reset_moves_the_pop_offset_back_and_keeps_the_deliveries() -> None:
    state = PopState()
    state.apply(100, Checkpoint("g", "T", 0, 0, 10, (0, 1, 2), 1_000, 30_000))
    assert state.pop_offset("g", "T", 0) == 10
    state.apply(200, Reset("g", "T", 0, 3))
    assert state.pop_offset("g", "T", 0) == 3
    assert state.inflight("g") == 3  # in flight as before: acked, or revived at their deadline
    state.apply(300, Checkpoint("g", "T", 0, 3, 4, (3, 4, 5, 6), 2_000, 30_000))
    assert state.pop_offset("g", "T", 0) == 7
