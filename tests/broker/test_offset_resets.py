"""The resets a master keeps for a group's next read (broker/offset_resets.py): taken once, a
later one replaces an earlier, and one made in another master epoch is never taken (a group
that read on another master since a failover must not be moved back when this broker is master
again)."""

from __future__ import annotations

from broker.offset_resets import PendingResets


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
