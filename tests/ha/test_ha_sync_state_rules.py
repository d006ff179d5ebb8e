"""Who may count for the SyncStateSet, what the master proposes, and the union while a proposal's
outcome is unknown (broker.ha.sync_state, pure; issue 9 items 3, 4 and 11)."""

from __future__ import annotations

from broker.ha.sync_state import EXPECTED_NOT_ALIVE_REFUSALS, NotAliveRefusals, SyncState

MASTER = 1
LIMIT = 15_000
RETRY = 1_000
REPLICAS = {1: "10.0.0.1:10911", 2: "10.0.0.2:10911", 3: "10.0.0.3:10911"}


def tracker(members: set[int] = {1}, confirm: int = 0) -> SyncState:  # noqa: B006
    return SyncState(
        master_id=MASTER,
        members=members,
        sync_state_set_epoch=1,
        epoch_start_offset=0,
        confirm_offset=confirm,
        now_ms=0,
        max_time_not_catchup_ms=LIMIT,
        retry_after_ms=RETRY,
        replicas=REPLICAS,
    )


def connect(t: SyncState, broker_id: int, now: int = 0, address: str | None = None) -> str | None:
    """None when admitted, else the refusal's reason label and detail."""
    refused = t.slave_connected(
        broker_id, address=REPLICAS.get(broker_id, "x") if address is None else address, now_ms=now
    )
    return None if refused is None else f"{refused.reason}: {refused.detail}"


# ---------------------------------------------------------------- who may count (item 3)


def test_only_a_registered_replica_at_its_known_address_is_admitted() -> None:
    t = tracker()
    refused = connect(t, 999, address="10.0.0.9:10911")
    assert refused is not None and "999" in refused and "not registered" in refused
    assert refused.startswith("not_a_replica: ")
    refused = connect(t, 2, address="10.0.0.9:10911")
    assert refused is not None and "registered at 10.0.0.2:10911" in refused
    assert refused.startswith("not_a_replica: ")
    own = connect(t, MASTER)  # the master's own id
    assert own is not None and own.startswith("not_a_replica: ")
    assert connect(t, 2) is None


def test_a_second_connection_for_a_live_id_is_refused() -> None:
    t = tracker(members={1, 2})
    assert connect(t, 2) is None
    t.slave_acked(2, 100, master_max_offset=100, now_ms=1)
    refused = connect(t, 2, now=2)
    assert refused is not None and "already has a live HA connection" in refused
    assert refused.startswith("duplicate_id: ")
    # The first connection is untouched: its ack still counts.
    assert t.update_confirm_offset(100) and t.confirm_offset == 100


def test_an_id_back_after_a_loss_counts_only_once_the_shrink_was_accepted() -> None:
    """A fake that takes the id of a lost slave gains nothing until the set dropped the id."""
    t = tracker(members={1, 2})
    connect(t, 2)
    t.slave_acked(2, 100, master_max_offset=100, now_ms=1)
    t.update_confirm_offset(100)
    t.slave_disconnected(2, now_ms=2)
    assert connect(t, 2, now=3) is None  # admitted: the loss was reported
    t.slave_acked(2, 500, master_max_offset=500, now_ms=4)  # claims all of it
    assert not t.update_confirm_offset(500)
    assert t.confirm_offset == 100
    proposal = t.next_proposal(now_ms=5)
    assert proposal == {1}
    assert not t.update_confirm_offset(500)  # still in the union while the shrink is in flight
    t.proposal_accepted(proposal, 2, now_ms=6)
    assert t.update_confirm_offset(500)  # solo now: the master's own max offset
    # Out of the set it is a candidate like any other.
    assert t.next_proposal(now_ms=7) == {1, 2}


def test_a_member_the_controllers_no_longer_list_is_shrunk_and_not_counted() -> None:
    t = tracker(members={1, 2})
    connect(t, 2)
    t.slave_acked(2, 100, master_max_offset=100, now_ms=1)
    t.set_replicas({1: REPLICAS[1], 2: "10.0.0.7:10911"})  # re-registered elsewhere
    assert not t.update_confirm_offset(100)
    assert t.next_proposal(now_ms=2) == {1}


# ---------------------------------------------------------------- what is proposed (item 4)


def test_unregistered_ids_never_enter_a_proposal() -> None:
    t = tracker()
    t.set_replicas({1: REPLICAS[1]})
    assert connect(t, 2) is not None
    t.set_replicas(REPLICAS)
    connect(t, 2)
    t.set_replicas({1: REPLICAS[1]})  # dropped by the controllers after it connected
    t.slave_acked(2, 0, master_max_offset=0, now_ms=1)
    assert t.next_proposal(now_ms=2) is None


def test_a_shrink_is_never_bundled_with_an_expansion() -> None:
    t = tracker(members={1, 2})
    connect(t, 2)
    connect(t, 3)
    t.slave_acked(3, 0, master_max_offset=0, now_ms=1)
    t.slave_disconnected(2, now_ms=2)
    assert t.next_proposal(now_ms=3) == {1}  # the shrink alone


def test_a_rejected_expansion_never_blocks_a_shrink() -> None:
    t = tracker(members={1, 2})
    connect(t, 2)
    connect(t, 3)
    t.slave_acked(2, 0, master_max_offset=0, now_ms=0)
    t.slave_acked(3, 0, master_max_offset=0, now_ms=0)
    expansion = t.next_proposal(now_ms=1)
    assert expansion == {1, 2, 3}
    t.slave_disconnected(2, now_ms=2)  # the real slave dies meanwhile
    t.proposal_failed(expansion, now_ms=3)  # e.g. 3 is not alive for the controllers
    assert t.next_proposal(now_ms=3) == {1}  # the shrink, at once
    t.proposal_failed(frozenset({1}), now_ms=4)
    assert t.next_proposal(now_ms=4 + RETRY - 1) is None  # a rejected shrink waits its retry
    assert t.next_proposal(now_ms=4 + RETRY) == {1}


# ---------------------------------------------------------------- unknown outcomes (item 11)


def test_an_expansion_whose_answer_is_lost_keeps_counting_the_union() -> None:
    """The #5663 family: {1} proposes {1, 2}; the controller commits and dies before answering.
    The master must not acknowledge what only it has: 2 may already be in the set."""
    t = tracker(members={1})
    t.update_confirm_offset(100)
    connect(t, 2)
    t.slave_acked(2, 100, master_max_offset=100, now_ms=0)
    proposal = t.next_proposal(now_ms=0)
    assert proposal == {1, 2}
    t.proposal_unknown(proposal, now_ms=10)
    assert t.outcome_unknown and t.counted_members == {1, 2}
    t.slave_disconnected(2, now_ms=20)  # the cut
    assert not t.update_confirm_offset(300)  # writes only 1 has are not confirmed
    assert t.confirm_offset == 100
    assert t.next_proposal(now_ms=10 + RETRY - 1) is None
    # The same proposal, from the same base epoch, is sent again.
    assert t.next_proposal(now_ms=10 + RETRY) == {1, 2}
    assert t.epoch == 1
    # The controller answers that the set already is {1, 2} (the first attempt committed).
    t.proposal_accepted(proposal, 2, now_ms=10 + RETRY + 5)
    assert t.members == {1, 2} and t.proposed is None
    assert not t.update_confirm_offset(300)  # 2 is a member that lost its connection
    assert t.next_proposal(now_ms=10 + RETRY + 6) == {1}


def expanding_to_2() -> tuple[SyncState, frozenset[int]]:
    """A master alone in its set whose slave 2 caught up at once: the tracker and the expansion
    it proposes."""
    t = tracker(members={1})
    connect(t, 2)
    t.slave_acked(2, 0, master_max_offset=0, now_ms=0)
    proposal = t.next_proposal(now_ms=0)
    assert proposal is not None
    return t, proposal


def test_a_newer_set_learnt_from_the_controllers_settles_an_unknown_outcome() -> None:
    t, proposal = expanding_to_2()
    t.proposal_unknown(proposal, now_ms=1)
    assert not t.set_members({1}, 1, now_ms=2)  # the same epoch settles nothing
    assert t.outcome_unknown
    assert t.set_members({1, 2}, 2, now_ms=3)
    assert not t.outcome_unknown and t.proposed is None and t.members == {1, 2}


def test_an_answer_for_an_older_attempt_does_not_settle_the_current_one() -> None:
    t, proposal = expanding_to_2()
    first = t.attempt
    t.proposal_unknown(proposal, now_ms=1, attempt=first)
    assert t.next_proposal(now_ms=1 + RETRY) == proposal
    t.proposal_failed(proposal, now_ms=1 + RETRY, attempt=first)  # late, about attempt 1
    assert t.proposed == proposal and t.counted_members == {1, 2}
    t.proposal_failed(proposal, now_ms=2 + RETRY, attempt=t.attempt)
    assert t.proposed is None and t.counted_members == {1}


def test_a_proposal_keeping_a_slave_lost_since_is_outdated() -> None:
    """Two slaves that stop together: the shrink proposed after the first loss still names the
    second; the controllers' refusal of it is expected (the master logs it at info)."""
    t = tracker(members={1, 2, 3})
    for broker_id in (2, 3):
        connect(t, broker_id)
        t.slave_acked(broker_id, 100, master_max_offset=100, now_ms=1)
    t.slave_disconnected(2, now_ms=2)
    proposal = t.next_proposal(now_ms=2)
    assert proposal == {1, 3}
    assert not t.outdated(proposal)
    t.slave_disconnected(3, now_ms=3)
    assert t.outdated(proposal)
    t.proposal_failed(proposal, now_ms=4)
    assert t.next_proposal(now_ms=4 + RETRY) == {1}


def test_an_expansion_refused_as_not_alive_is_expected_a_few_times_in_a_row_then_a_warning() -> (
    None
):
    # At start-up a slave can catch up over HA before its first heartbeat reaches the active
    # controller: the first refusals of the expansion are expected (info); a streak is not.
    refusals = NotAliveRefusals()
    grown = frozenset({1, 2})
    verdicts = [
        refusals.refused(grown, True, outdated=False)
        for _ in range(EXPECTED_NOT_ALIVE_REFUSALS + 1)
    ]
    assert verdicts == [True] * EXPECTED_NOT_ALIVE_REFUSALS + [False]
    refusals.accepted()  # the streak ends with an accepted proposal
    assert refusals.refused(grown, True, outdated=False)


def test_a_refusal_for_another_reason_is_not_expected_a_lagging_shrink_is_at_first() -> None:
    refusals = NotAliveRefusals()
    grown = frozenset({1, 2, 3, 4})
    assert not refusals.refused(grown, False, outdated=False)
    # Two slaves stop together and the controllers hear the second go before the master does:
    # the shrink dropping the first still names it. Expected at first, a warning as a streak.
    shrunk = frozenset({1, 2})
    verdicts = [
        refusals.refused(shrunk, True, outdated=False)
        for _ in range(EXPECTED_NOT_ALIVE_REFUSALS + 1)
    ]
    assert verdicts == [True] * EXPECTED_NOT_ALIVE_REFUSALS + [False]
    # Once the master noticed the second loss too, the refusal is outdated: always expected.
    assert refusals.refused(shrunk, True, outdated=True)
    # A different proposal starts its own streak.
    for _ in range(EXPECTED_NOT_ALIVE_REFUSALS):
        assert refusals.refused(grown, True, outdated=False)
    assert refusals.refused(frozenset({1, 2, 4}), True, outdated=False)
