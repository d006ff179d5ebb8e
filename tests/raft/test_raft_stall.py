"""RaftNode.tick_after_stall: ticks a node could not run (its process or machine stood still)
count for the leader's lease but not as the others' silence (issue 17: a whole-host stall of
a few hundred ms must not start an election)."""

from __future__ import annotations

from controller.raft import Role
from tests.raft.harness import Cluster

LEASE = {"leader_lease": True}
STALL = 10
"""Ticks: past the longest election timeout (election_ticks_max = 6 by default)."""


def leading(c: Cluster) -> None:
    for node in c.nodes.values():  # past the quiet period of a just started node
        node._now = node.config.election_ticks_min
    c.elect("n1")
    c.tick("n1")  # a heartbeat round a quorum acknowledged: n1 holds a lease


def test_missed_ticks_fed_one_by_one_start_an_election() -> None:
    """The old way, for contrast: every node is fed the ticks of the stall before the messages
    that could not be read meanwhile; the followers' campaign is under way before the leader's
    first heartbeat after the stall reaches them, and it wins."""
    c = Cluster(**LEASE)
    leading(c)
    term = c.nodes["n1"].term
    for node_id in ("n2", "n3"):
        for _ in range(STALL):
            c.nodes[node_id].tick()
    c.stabilize()
    for _ in range(STALL):
        c.nodes["n1"].tick()
    c.stabilize()
    assert max(n.term for n in c.nodes.values()) > term
    assert c.leader() != "n1"


def test_a_stall_of_every_node_keeps_the_leader_and_the_term() -> None:
    c = Cluster(**LEASE)
    leading(c)
    term = c.nodes["n1"].term
    for node_id in ("n2", "n3"):  # in the same order as above
        c.nodes[node_id].tick_after_stall(STALL)
    c.stabilize()
    c.nodes["n1"].tick_after_stall(STALL)
    c.stabilize()
    c.tick_all(2)
    assert c.leader() == "n1"
    assert {n.term for n in c.nodes.values()} == {term}
    assert {n.lead for n in c.nodes.values()} == {"n1"}
    assert c.nodes["n1"].lease_remaining() > 0  # renewed by the heartbeats after the stall


def test_the_stall_counts_against_the_leaders_lease() -> None:
    c = Cluster(**LEASE)
    leading(c)
    leader = c.nodes["n1"]
    assert leader.lease_remaining() > 0
    c.isolate("n1")  # nothing it sends after the stall is answered
    leader.tick_after_stall(leader.config.lease_ticks)
    assert leader.lease_remaining() == 0


def test_a_leader_unheard_after_a_stall_steps_down_one_check_later() -> None:
    c = Cluster(**LEASE)
    leading(c)
    leader = c.nodes["n1"]
    c.isolate("n1")
    leader.tick_after_stall(STALL)
    c.stabilize()
    assert leader.role is Role.LEADER  # the quorum check starts over after the stall
    c.tick("n1", leader.config.election_ticks_min)
    assert leader.role is Role.FOLLOWER  # and nobody answered within it


def test_a_follower_that_stalled_still_replaces_a_dead_leader() -> None:
    c = Cluster(**LEASE)
    leading(c)
    term = c.nodes["n1"].term
    c.crash("n1")
    c.nodes["n2"].tick_after_stall(STALL)
    c.nodes["n3"].tick_after_stall(STALL)
    c.stabilize()
    assert c.leader() is None  # the stall is not evidence of the leader's death ...
    c.tick_all(2 * c.nodes["n2"].config.election_ticks_max)
    leader = c.leader()  # ... but its silence afterwards is
    assert leader in ("n2", "n3") and c.nodes[leader].term > term


def test_a_stalled_follower_grants_no_vote_before_an_election_timeout() -> None:
    """Not counting the stall keeps a follower inside the leader's lease longer, never shorter:
    it still refuses another candidate right after the stall."""
    c = Cluster(**LEASE)
    leading(c)
    term = c.nodes["n1"].term
    c.nodes["n2"].tick_after_stall(STALL)
    c.isolate("n1")
    c.nodes["n3"].campaign()  # a forced campaign (as by a candidate that did not stall)
    c.stabilize()
    assert c.nodes["n2"].term == term and c.nodes["n2"].lead == "n1"
    assert c.nodes["n3"].role is not Role.LEADER
