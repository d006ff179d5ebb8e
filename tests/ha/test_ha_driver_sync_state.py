"""SyncStateSet and confirm offset on the master (broker.ha.sync_state): pure, time passed in ms."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.ha.sync_state import SyncState
from tests.hypothesis_profiles import examples

MASTER = 1
LIMIT = 15_000


def tracker(members: set[int] = {1}, confirm: int = 0, epoch_start: int = 0) -> SyncState:  # noqa: B006
    return SyncState(
        master_id=MASTER,
        members=members,
        sync_state_set_epoch=1,
        epoch_start_offset=epoch_start,
        confirm_offset=confirm,
        now_ms=0,
        max_time_not_catchup_ms=LIMIT,
        retry_after_ms=1_000,
    )


def accept(t: SyncState, now: int) -> frozenset[int]:
    proposal = t.next_proposal(now_ms=now)
    assert proposal is not None
    t.proposal_accepted(proposal, t.epoch + 1, now_ms=now)
    return proposal


def test_the_set_always_holds_the_master() -> None:
    assert tracker(members={2, 3}).members == {1, 2, 3}


def test_solo_master_confirms_its_own_max_offset() -> None:
    t = tracker()
    assert t.solo
    assert t.update_confirm_offset(500)
    assert t.confirm_offset == 500
    assert not t.update_confirm_offset(500)


def test_confirm_is_the_smallest_ack_among_members() -> None:
    t = tracker(members={1, 2, 3})
    t.slave_connected(2, now_ms=0)
    t.slave_connected(3, now_ms=0)
    t.slave_acked(2, 300, master_max_offset=500, now_ms=1)
    assert not t.update_confirm_offset(500)  # 3 has not acked on this connection
    t.slave_acked(3, 200, master_max_offset=500, now_ms=1)
    assert t.update_confirm_offset(500)
    assert t.confirm_offset == 200
    t.slave_acked(3, 500, master_max_offset=500, now_ms=2)
    t.update_confirm_offset(500)
    assert t.confirm_offset == 300


def test_confirm_never_advances_while_a_member_is_disconnected() -> None:
    """RocketMQ bug #6662: the disconnected member's ack is unknown."""
    t = tracker(members={1, 2, 3})
    for s in (2, 3):
        t.slave_connected(s, now_ms=0)
        t.slave_acked(s, 100, master_max_offset=100, now_ms=0)
    t.update_confirm_offset(100)
    assert t.confirm_offset == 100
    t.slave_disconnected(3, now_ms=10)
    t.slave_acked(2, 900, master_max_offset=900, now_ms=11)
    assert not t.update_confirm_offset(900)
    assert t.confirm_offset == 100
    assert t.next_proposal(now_ms=12) == frozenset({1, 2})  # shrunk at once
    # In flight: the union still counts 3, so nothing advances (bug #5663).
    assert not t.update_confirm_offset(900)
    t.proposal_accepted(frozenset({1, 2}), 2, now_ms=13)
    assert t.update_confirm_offset(900)
    assert t.confirm_offset == 900


def test_a_connected_slave_that_has_not_acked_yet_holds_the_confirm_offset() -> None:
    t = tracker(members={1, 2})
    t.slave_connected(2, now_ms=0)
    assert not t.update_confirm_offset(100)
    t.slave_acked(2, 100, master_max_offset=100, now_ms=1)
    assert t.update_confirm_offset(100)


def test_shrink_after_not_catching_up_for_the_limit() -> None:
    t = tracker(members={1, 2})
    t.slave_connected(2, now_ms=0)
    t.slave_acked(2, 0, master_max_offset=0, now_ms=0)  # caught up at 0
    t.slave_acked(2, 50, master_max_offset=1_000, now_ms=100)  # behind from now on
    assert t.next_proposal(now_ms=LIMIT - 1) is None
    assert t.next_proposal(now_ms=LIMIT) == frozenset({1})


def test_a_slave_keeping_up_with_a_steady_stream_stays_caught_up() -> None:
    """Never at the very latest byte, but always reaching the previous mark."""
    t = tracker(members={1, 2})
    t.slave_connected(2, now_ms=0)
    master_max = 0
    for now in range(0, 3 * LIMIT, 100):
        master_max += 1_000
        t.slave_acked(2, master_max - 500, master_max_offset=master_max, now_ms=now)
        assert t.next_proposal(now_ms=now) is None


def test_an_idle_caught_up_slave_stays_caught_up_through_ticks() -> None:
    t = tracker(members={1, 2})
    t.slave_connected(2, now_ms=0)
    t.slave_acked(2, 100, master_max_offset=100, now_ms=0)
    for now in range(0, 3 * LIMIT, 500):
        t.tick(master_max_offset=100, now_ms=now)
        assert t.next_proposal(now_ms=now) is None


def test_a_member_that_never_connects_is_shrunk_after_the_limit() -> None:
    t = tracker(members={1, 2})
    assert t.next_proposal(now_ms=LIMIT - 1) is None
    assert t.next_proposal(now_ms=LIMIT) == frozenset({1})


def test_a_member_that_lost_its_connection_is_shrunk_even_if_it_is_back() -> None:
    """It may have lost bytes it had acked (acks precede its fsync)."""
    t = tracker(members={1, 2})
    t.slave_connected(2, now_ms=0)
    t.slave_acked(2, 0, master_max_offset=0, now_ms=0)
    t.slave_disconnected(2, now_ms=5)
    t.slave_connected(2, now_ms=6)
    t.slave_acked(2, 0, master_max_offset=0, now_ms=7)
    assert accept(t, 8) == frozenset({1})
    # Out of the set it is a candidate like any other, and it is back in sync.
    assert accept(t, 9) == frozenset({1, 2})


def test_expand_needs_the_confirm_offset_and_the_epoch_start() -> None:
    t = tracker(confirm=0, epoch_start=300)
    t.update_confirm_offset(400)  # solo: confirm = 400
    t.slave_connected(2, now_ms=0)
    t.slave_acked(2, 250, master_max_offset=400, now_ms=1)
    assert t.next_proposal(now_ms=1) is None  # below both
    t.slave_acked(2, 350, master_max_offset=400, now_ms=2)
    assert t.next_proposal(now_ms=2) is None  # past the epoch start, below confirm
    t.slave_acked(2, 400, master_max_offset=400, now_ms=3)
    assert t.next_proposal(now_ms=3) == frozenset({1, 2})


def test_an_async_learner_never_joins() -> None:
    t = tracker()
    t.slave_connected(2, now_ms=0, async_learner=True)
    t.slave_acked(2, 0, master_max_offset=0, now_ms=0)
    assert t.next_proposal(now_ms=1) is None


def test_an_expansion_in_flight_counts_the_joining_slave_at_once() -> None:
    t = tracker()
    t.update_confirm_offset(100)
    t.slave_connected(2, now_ms=0)
    t.slave_acked(2, 100, master_max_offset=100, now_ms=0)
    assert t.next_proposal(now_ms=0) == frozenset({1, 2})
    assert not t.solo
    assert t.counted_members == {1, 2}
    assert not t.update_confirm_offset(200)  # 2 has 100 only
    t.slave_acked(2, 200, master_max_offset=200, now_ms=1)
    assert t.update_confirm_offset(200)


def test_one_proposal_at_a_time_and_retry_after_a_failure() -> None:
    t = tracker(members={1, 2, 3})
    proposal = t.next_proposal(now_ms=LIMIT)
    assert proposal == frozenset({1})
    assert t.next_proposal(now_ms=LIMIT + 1) is None  # in flight
    t.proposal_failed(proposal, now_ms=LIMIT + 2)
    assert t.proposed is None
    assert t.next_proposal(now_ms=LIMIT + 500) is None  # too soon
    assert t.next_proposal(now_ms=LIMIT + 1_002) == frozenset({1})


def test_in_sync_replicas_counts_the_smaller_side_of_a_change() -> None:
    t = tracker(members={1, 2, 3})
    assert t.in_sync_replicas() == 3
    t.slave_connected(2, now_ms=0)
    t.slave_disconnected(2, now_ms=1)
    assert t.next_proposal(now_ms=2) == frozenset({1, 3})
    assert t.in_sync_replicas() == 2


def test_a_newer_set_from_the_controller_is_adopted_an_older_one_is_not() -> None:
    t = tracker(members={1, 2})
    assert not t.set_members({1}, 1, now_ms=0)
    assert t.set_members({1, 3}, 4, now_ms=0)
    assert t.members == {1, 3}
    assert t.epoch == 4


def test_a_slave_below_the_confirm_offset_is_shrunk() -> None:
    t = tracker(members={1, 2}, confirm=500)
    t.slave_connected(2, now_ms=0)
    t.slave_acked(2, 400, master_max_offset=600, now_ms=1)  # it lost bytes it had acked
    assert t.next_proposal(now_ms=2) == frozenset({1})


def test_slave_acks_lists_connected_slaves_that_acked() -> None:
    t = tracker(members={1, 2})
    t.slave_connected(2, now_ms=0)
    t.slave_connected(3, now_ms=0)
    t.slave_acked(3, 70, master_max_offset=100, now_ms=0)
    assert t.acked_offsets() == {3: 70}


events = st.lists(
    st.tuples(
        st.sampled_from(["connect", "ack", "disconnect", "tick", "write", "answer"]),
        st.sampled_from([2, 3, 4]),
        st.integers(0, 3_000),
        st.booleans(),
    ),
    max_size=80,
)


@settings(max_examples=examples(300), deadline=None)
@given(events)
def test_confirm_offset_is_safe_under_any_event_order(
    script: list[tuple[str, int, int, bool]],
) -> None:
    """The confirm offset never goes back, never passes the master's max offset, and every
    member that was counted when it advanced had acked it."""
    t = tracker(members={1, 2, 3})
    now = 0
    master_max = 0
    acked: dict[int, int] = {}  # what each slave holds (acks never go back per connection)
    for kind, slave, amount, flag in script:
        now += amount % 700
        if kind == "write":
            master_max += amount
        elif kind == "connect":
            if t.slave_connected(slave, now_ms=now, async_learner=flag and slave == 4) is None:
                acked.pop(slave, None)
        elif kind == "ack" and (p := t.slave(slave)) is not None and p.connected:
            base = acked.get(slave, 0 if flag else master_max // 2)
            offset = min(master_max, base + amount)
            acked[slave] = offset
            t.slave_acked(slave, offset, master_max_offset=master_max, now_ms=now)
        elif kind == "disconnect":
            t.slave_disconnected(slave, now_ms=now)
            acked.pop(slave, None)
        elif kind == "tick":
            t.tick(master_max_offset=master_max, now_ms=now)
        elif kind == "answer" and t.proposed is not None:
            if flag:
                t.proposal_accepted(t.proposed, t.epoch + 1, now_ms=now)
            elif amount % 2:
                t.proposal_unknown(t.proposed, now_ms=now)
            else:
                t.proposal_failed(t.proposed, now_ms=now)
        before = t.confirm_offset
        if t.update_confirm_offset(master_max):
            for member in t.counted_members - {MASTER}:
                assert acked[member] >= t.confirm_offset
        assert before <= t.confirm_offset <= max(master_max, 0)
        t.next_proposal(now_ms=now)
