"""Pure helpers of the HA drivers: the epoch history of a new master, reconnect back-off,
HA addresses."""

from __future__ import annotations

import pytest

from broker.ha.role_change import StaleMasterEpoch, plan_master_epochs
from broker.ha.slave_client import reconnect_delay_ms, split_address
from protocol.ha import EpochEntry


def E(epoch: int, start: int) -> EpochEntry:
    return EpochEntry(epoch=epoch, start_offset=start)


def test_a_first_master_starts_its_epoch_at_the_max_offset() -> None:
    plan = plan_master_epochs((), epoch=1, max_offset=0)
    assert plan.entries == (E(1, 0),)
    assert plan.append == E(1, 0)
    assert plan.drop_from_offset is None
    assert plan.epoch_start_offset == 0


def test_a_new_epoch_is_appended_at_the_max_offset() -> None:
    plan = plan_master_epochs((E(1, 0), E(2, 100)), epoch=4, max_offset=250)
    assert plan.entries == (E(1, 0), E(2, 100), E(4, 250))
    assert plan.changed


def test_entries_beyond_the_max_offset_are_dropped_first() -> None:
    """A truncation (or torn tail) left an entry describing bytes that are gone."""
    plan = plan_master_epochs((E(1, 0), E(2, 300)), epoch=3, max_offset=200)
    assert plan.entries == (E(1, 0), E(3, 200))
    assert plan.drop_from_offset == 201


def test_an_entry_at_the_max_offset_stays_as_an_empty_epoch() -> None:
    plan = plan_master_epochs((E(1, 0), E(2, 200)), epoch=3, max_offset=200)
    assert plan.entries == (E(1, 0), E(2, 200), E(3, 200))
    assert plan.drop_from_offset is None


def test_becoming_master_again_of_the_same_epoch_keeps_its_entry() -> None:
    """Re-appending (2, 500) would relabel [200, 500) as epoch 1."""
    plan = plan_master_epochs((E(1, 0), E(2, 200)), epoch=2, max_offset=500)
    assert plan.entries == (E(1, 0), E(2, 200))
    assert not plan.changed
    assert plan.epoch_start_offset == 200


def test_a_stale_epoch_is_refused() -> None:
    with pytest.raises(StaleMasterEpoch):
        plan_master_epochs((E(1, 0), E(3, 200)), epoch=2, max_offset=500)
    with pytest.raises(StaleMasterEpoch):  # even when that entry's bytes are gone
        plan_master_epochs((E(1, 0), E(3, 600)), epoch=2, max_offset=500)


def test_reconnect_back_off_doubles_up_to_the_cap() -> None:
    delays = [reconnect_delay_ms(n, min_ms=100, max_ms=3_000) for n in range(0, 9)]
    assert delays == [0, 100, 200, 400, 800, 1_600, 3_000, 3_000, 3_000]
    assert reconnect_delay_ms(10_000, min_ms=100, max_ms=3_000) == 3_000


def test_split_address() -> None:
    assert split_address("127.0.0.1:10912") == ("127.0.0.1", 10912)
    assert split_address("[::1]:10912") == ("::1", 10912)
    for bad in ("127.0.0.1", ":1", "host:", "host:x"):
        with pytest.raises(ValueError):
            split_address(bad)
