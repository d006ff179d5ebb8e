"""The handshake decision's guards (pure): a master not at the epoch the controllers named cuts
nothing, and no master cuts a slave below its confirm offset unless the operator allowed it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.ha.actions import Reconnect, ReplicationRefused, TruncateLog
from broker.ha.slave_conn import SlaveConnection
from broker.ha.truncation import (
    BelowConfirmOffset,
    ConsistentPoint,
    EmptyLog,
    EpochNotNamed,
    NoCommonEntry,
    TruncationDecision,
    decide_truncation,
    find_consistent_point,
)
from protocol.ha import (
    EpochEntry,
    HAConnectionState,
    MasterHandshake,
    MasterTransfer,
    encode_master_handshake,
    encode_master_transfer,
)
from tests.ha.ha_harness import H

INT32_MAX = 2**31 - 1


def decide(
    local: tuple[EpochEntry, ...],
    local_max: int,
    confirm: int,
    master: tuple[EpochEntry, ...],
    master_max: int,
    master_epoch: int,
    named: int | None,
    allow: bool = False,
) -> TruncationDecision:
    return decide_truncation(
        local_entries=local,
        local_max_offset=local_max,
        local_confirm_offset=confirm,
        master_entries=master,
        master_max_offset=master_max,
        master_epoch=master_epoch,
        named_epoch=named,
        allow_below_confirm=allow,
    )


def test_an_empty_log_at_the_named_epoch_would_cut_acknowledged_bytes_and_is_refused() -> None:
    d = decide(H((1, 0)), 3830, 3830, H((1, 0)), 0, 2, named=2)
    assert isinstance(d, BelowConfirmOffset)
    assert (d.offset, d.confirm_offset) == (0, 3830)
    assert "refusing to truncate 3830 acknowledged bytes" in d.reason
    assert "ha_allow_truncate_below_confirm" in d.reason


def test_an_empty_slave_has_nothing_to_lose() -> None:
    assert decide((), 0, 0, H((1, 0)), 0, 2, named=2) == EmptyLog()


def test_the_operator_may_allow_it() -> None:
    d = decide(H((1, 0)), 3830, 3830, H((1, 0)), 0, 2, named=2, allow=True)
    assert d == ConsistentPoint(offset=0, epoch=1)


def test_an_empty_history_is_still_no_common_entry() -> None:
    assert isinstance(decide(H((1, 0)), 100, 100, (), 0, 2, named=2), NoCommonEntry)


@pytest.mark.parametrize("master_epoch", [1, 3, INT32_MAX])
def test_a_master_at_another_epoch_than_the_named_one_cuts_nothing(master_epoch: int) -> None:
    d = decide(
        H((1, 0)),
        100,
        0,
        H((1, 0), (master_epoch, 0)) if master_epoch > 1 else H((1, 0)),
        0,
        master_epoch,
        named=2,
    )
    assert isinstance(d, EpochNotNamed)
    assert f"epoch {master_epoch}" in d.reason and "epoch 2 the controllers named" in d.reason


def test_unnamed_epochs_are_not_checked_without_controllers() -> None:
    d = decide(H((1, 0)), 100, 0, H((1, 0), (7, 50)), 80, 7, named=None)
    assert d == ConsistentPoint(offset=50, epoch=1)


@pytest.mark.parametrize(
    ("local_max", "confirm", "master_max", "expected"),
    [
        (500, 300, 400, ConsistentPoint(offset=400, epoch=1)),  # only the unconfirmed tail
        (500, 400, 400, ConsistentPoint(offset=400, epoch=1)),  # exactly at the confirm offset
        (500, 900, 600, ConsistentPoint(offset=500, epoch=1)),  # confirm above the log: capped
        (0, 0, 0, ConsistentPoint(offset=0, epoch=1)),
    ],
)
def test_truncations_down_to_the_confirm_offset_go_ahead(
    local_max: int, confirm: int, master_max: int, expected: TruncationDecision
) -> None:
    assert decide(H((1, 0)), local_max, confirm, H((1, 0)), master_max, 1, named=1) == expected


def test_a_failover_to_an_in_sync_member_never_needs_to_cut_below_the_confirm_offset() -> None:
    # The old master wrote an unconfirmed tail [300, 500); the new master (in the set) has 300
    # and starts epoch 2 there.
    d = decide(H((1, 0)), 500, 300, H((1, 0), (2, 300)), 450, 2, named=2)
    assert d == ConsistentPoint(offset=300, epoch=1)


@given(
    local_max=st.integers(0, 1000),
    confirm=st.integers(0, 1000),
    master_max=st.integers(0, 1000),
    second=st.integers(0, 1000),
    allow=st.booleans(),
)
def test_the_guard_only_ever_refuses_what_the_walk_would_cut_below_the_confirm_offset(
    local_max: int, confirm: int, master_max: int, second: int, allow: bool
) -> None:
    master = H((1, 0), (2, min(second, master_max)))
    walk = find_consistent_point(
        local_entries=H((1, 0)),
        local_max_offset=local_max,
        master_entries=master,
        master_max_offset=master_max,
    )
    d = decide(H((1, 0)), local_max, confirm, master, master_max, 2, named=2, allow=allow)
    if isinstance(walk, ConsistentPoint) and walk.offset < min(confirm, local_max) and not allow:
        assert isinstance(d, BelowConfirmOffset) and d.offset == walk.offset
    else:
        assert d == walk


def _slave(named: int | None, allow: bool = False) -> SlaveConnection:
    return SlaveConnection(
        broker_id=2, address="127.0.0.1:1", named_epoch=named, allow_below_confirm=allow
    )


def test_the_slave_connection_refuses_and_suspends_without_truncating() -> None:
    conn = _slave(named=2)
    conn.start(epoch_entries=H((1, 0)), max_offset=3830, confirm_offset=3830)
    reply = MasterHandshake(master_max_offset=0, master_epoch=2, epoch_entries=H((1, 0)))
    actions = conn.receive_data(encode_master_handshake(reply))
    assert len(actions) == 1 and isinstance(actions[0], ReplicationRefused)
    assert conn.state is HAConnectionState.SUSPEND
    assert conn.max_offset == 3830


def test_the_slave_connection_leaves_a_master_at_an_unnamed_epoch() -> None:
    conn = _slave(named=2)
    conn.start(epoch_entries=H((1, 0)), max_offset=3830, confirm_offset=3830)
    reply = MasterHandshake(
        master_max_offset=0, master_epoch=INT32_MAX, epoch_entries=H((1, 0), (INT32_MAX, 0))
    )
    actions = conn.receive_data(encode_master_handshake(reply))
    assert len(actions) == 1 and isinstance(actions[0], Reconnect)
    assert not any(isinstance(a, TruncateLog) for a in actions)
    assert conn.state is HAConnectionState.SHUTDOWN


def test_a_stream_of_an_unnamed_epoch_is_left_before_its_entry_is_written() -> None:
    conn = _slave(named=1)
    conn.start(epoch_entries=H((1, 0)), max_offset=100, confirm_offset=100)
    hello = MasterHandshake(master_max_offset=100, master_epoch=1, epoch_entries=H((1, 0)))
    actions = conn.receive_data(encode_master_handshake(hello))
    assert TruncateLog(offset=100) in actions
    transfer = MasterTransfer(
        offset=100, epoch=INT32_MAX, epoch_start_offset=100, confirm_offset=100
    )
    actions = conn.receive_data(encode_master_transfer(transfer))
    assert len(actions) == 1 and isinstance(actions[0], Reconnect)
    assert conn.epoch_entries == H((1, 0))
    # Once the controllers name that epoch (the driver raises it), the same stream is followed.
    conn2 = _slave(named=1)
    conn2.start(epoch_entries=H((1, 0)), max_offset=100, confirm_offset=100)
    conn2.receive_data(encode_master_handshake(hello))
    conn2.named_epoch = 3
    transfer3 = MasterTransfer(offset=100, epoch=3, epoch_start_offset=100, confirm_offset=100)
    conn2.receive_data(encode_master_transfer(transfer3))
    assert conn2.epoch_entries == H((1, 0), (3, 100))
