"""Hostile and unlucky peers against the core: strangers, terms past the range, TimeoutNow
storms, and the leader lease that gates broker heartbeats (issue 9, items 2 and 6)."""

from __future__ import annotations

import random

import pytest

from controller.raft import (
    MAX_COUNTER,
    AppendEntries,
    ConfChange,
    HardState,
    Heartbeat,
    RaftConfig,
    RaftNode,
    ReadIndexRequest,
    Role,
    TimeoutNow,
    VoteRequest,
)
from storage.raftlog import MemoryStorage
from tests.raft.harness import Cluster, drain, make_node

LEASE = {"leader_lease": True}


def past_quiet_period(c: Cluster) -> None:
    """As if every node had run for a minimum election timeout (a just started node with a
    leader lease grants no vote before that)."""
    for node in c.nodes.values():
        node._now = node.config.election_ticks_min


def leader_with_lease(c: Cluster, node_id: str = "n1") -> None:
    past_quiet_period(c)
    c.elect(node_id)
    c.tick(node_id)  # one heartbeat round, acknowledged by a quorum


# --- strangers and terms out of range ---------------------------------------------------------


def test_a_strangers_heartbeat_with_a_huge_term_is_dropped() -> None:
    c = Cluster(**LEASE)
    leader_with_lease(c)
    follower = c.nodes["n2"]
    term = follower.term
    forged = Heartbeat(src="rogue", dst="n2", term=MAX_COUNTER - 1, commit=0)
    assert follower.step(forged) is False
    assert (follower.term, follower.lead, follower.role) == (term, "n1", Role.FOLLOWER)
    assert follower.ready() is None or drain(follower) == []
    assert c.nodes["n1"].lease_remaining() > 0


def test_a_strangers_vote_request_timeout_now_and_read_are_dropped() -> None:
    c = Cluster(**LEASE)
    leader_with_lease(c)
    term = c.nodes["n2"].term
    assert c.nodes["n1"].step(ReadIndexRequest(src="rogue", dst="n1", term=term, ctx=b"x")) is False
    for m in (
        VoteRequest(src="rogue", dst="n2", term=term + 5, last_log_index=99, last_log_term=99),
        TimeoutNow(src="rogue", dst="n2", term=term),
    ):
        assert c.nodes["n2"].step(m) is False
    c.stabilize()
    assert c.leader() == "n1" and c.nodes["n2"].term == term


def test_a_term_that_could_not_be_incremented_is_never_adopted() -> None:
    node = make_node("n2", terms=[2])
    for term in (MAX_COUNTER, (1 << 64) - 1):
        assert node.step(Heartbeat(src="n1", dst="n2", term=term, commit=1)) is False
    assert node.term == 2
    # The largest adoptable term is one below the limit; campaigning from it is refused.
    assert node.step(Heartbeat(src="n1", dst="n2", term=MAX_COUNTER - 1, commit=1)) is True
    drain(node)
    node.campaign()
    assert node.term == MAX_COUNTER - 1 and node.role is Role.FOLLOWER
    assert all(m.term < MAX_COUNTER for m in drain(node))


def test_a_stored_term_that_cannot_be_incremented_is_refused() -> None:
    storage = MemoryStorage()
    storage.save(hard_state=HardState(term=MAX_COUNTER))
    with pytest.raises(ValueError, match="cannot be incremented"):
        RaftNode(RaftConfig(node_id="n1"), storage, random.Random(1))


def test_a_lagging_node_still_hears_a_leader_it_does_not_know_yet() -> None:
    c = Cluster(ids=("n1", "n2", "n3"), joining=("n4",), **LEASE)
    leader_with_lease(c)
    c.nodes["n1"].propose_conf_change(ConfChange.add_learner("n4"))
    c.stabilize()
    c.tick_all(2)  # n4 is promoted once caught up
    assert c.nodes["n1"].conf_state.is_voter("n4")
    c.crash("n3")
    c.nodes["n1"].transfer_leadership("n4")
    c.stabilize()
    assert c.leader() == "n4"
    # n3 restarts without n4 in its log and far behind; n4's appends still reach it.
    c.restart("n3")
    c.tick_all(8)
    assert c.nodes["n3"].lead == "n4"
    assert c.nodes["n3"].conf_state.is_voter("n4")


# --- TimeoutNow -------------------------------------------------------------------------------


def test_a_timeout_now_storm_from_members_does_not_move_leadership() -> None:
    c = Cluster(**LEASE)
    leader_with_lease(c)
    term = c.nodes["n1"].term
    for round_ in range(50):
        for dst in ("n2", "n3"):
            for src in ("n2", "n3", "n1x"):
                if src != dst:
                    for t in (term, term + 1, term - 1):
                        c.nodes[dst].step(TimeoutNow(src=src, dst=dst, term=t))
        c.stabilize()
        if round_ % 10 == 0:
            c.tick_all()
    assert c.leader() == "n1" and all(n.term == term for n in c.nodes.values())


def test_the_leaders_own_transfer_still_moves_leadership() -> None:
    c = Cluster(**LEASE)
    leader_with_lease(c)
    c.nodes["n1"].transfer_leadership("n3")
    c.stabilize()
    assert c.leader() == "n3"


# --- the leader lease -------------------------------------------------------------------------


def test_the_lease_needs_a_quorum_acknowledged_round() -> None:
    c = Cluster(**LEASE)
    past_quiet_period(c)
    c.elect("n1")
    leader = c.nodes["n1"]
    assert leader.lease_remaining() == 0  # elected, but no heartbeat round confirmed yet
    c.tick("n1")
    assert leader.lease_remaining() == leader.config.lease_ticks
    assert leader.config.lease_ticks < leader.config.election_ticks_min


def test_an_isolated_leader_loses_its_lease_before_anyone_else_can_lead() -> None:
    c = Cluster(**LEASE)
    leader_with_lease(c)
    old = c.nodes["n1"]
    c.isolate("n1")
    lease_gone_at: int | None = None
    new_leader_at: int | None = None
    for tick in range(1, 40):
        c.tick_all()
        if lease_gone_at is None and old.lease_remaining() == 0:
            lease_gone_at = tick
        if new_leader_at is None and any(
            n.role is Role.LEADER and n.term > old.term for n in c.nodes.values()
        ):
            new_leader_at = tick
            assert old.lease_remaining() == 0, "a second leader while the old one holds a lease"
    assert lease_gone_at is not None and new_leader_at is not None
    assert lease_gone_at < new_leader_at
    assert old.role is not Role.LEADER  # check-quorum stepped it down as well


def test_no_lease_during_and_right_after_a_transfer() -> None:
    c = Cluster(**LEASE)
    leader_with_lease(c)
    leader = c.nodes["n1"]
    c.isolate("n3")
    leader.transfer_leadership("n3")  # n3 cannot catch up: the transfer hangs, then aborts
    assert leader.lease_remaining() == 0
    c.tick("n1", leader.config.transfer_timeout)
    assert leader.transferee is None
    c.heal()
    c.tick("n1")
    assert leader.lease_remaining() == 0  # a TimeoutNow may still be on its way...
    c.tick("n1", leader.config.election_ticks_max + leader.config.transfer_timeout)
    assert leader.lease_remaining() > 0  # ...but not for ever


def test_a_restarted_node_grants_no_vote_at_first() -> None:
    c = Cluster(**LEASE)
    leader_with_lease(c)
    c.crash("n2")
    c.restart("n2")
    node = c.nodes["n2"]
    term = node.term
    request = VoteRequest(src="n3", dst="n2", term=term + 1, last_log_index=99, last_log_term=99)
    node.step(request)
    assert node.term == term  # ignored: it may have acknowledged n1's lease before going down
    for _ in range(node.config.election_ticks_min):
        node.tick()
    node.step(request)
    assert node.term == term + 1 and node.vote == "n3"


def test_append_entries_from_a_stranger_do_not_make_it_leader() -> None:
    c = Cluster(**LEASE)
    leader_with_lease(c)
    follower = c.nodes["n3"]
    forged = AppendEntries(
        src="rogue", dst="n3", term=follower.term, prev_log_index=0, prev_log_term=0, commit=0
    )
    assert follower.step(forged) is False
    assert follower.lead == "n1"
