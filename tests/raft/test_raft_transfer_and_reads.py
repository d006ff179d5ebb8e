"""Leadership transfer and preferred leader (dissertation 3.10); read-index (section 6.4)."""

from __future__ import annotations

import random

import pytest

from controller.raft import (
    AppendEntries,
    Heartbeat,
    HeartbeatResponse,
    NotLeader,
    ProposalDropped,
    RaftConfig,
    RaftNode,
    ReadIndexRequest,
    ReadState,
    Role,
    TimeoutNow,
    TransferRejected,
    bootstrap,
)
from storage.raftlog import MemoryStorage
from tests.raft.harness import Cluster, drain

# --- leadership transfer --------------------------------------------------------------------


def test_3_10_transfer_to_a_caught_up_follower_is_immediate() -> None:
    c = Cluster()
    c.elect("n1")
    c.propose("n1", b"x")
    c.clear_log()
    c.nodes["n1"].transfer_leadership("n2")
    c.stabilize()  # no ticks: nobody waits for an election timeout
    assert [m.dst for m in c.sent(TimeoutNow)] == ["n2"]
    assert c.leader() == "n2" and c.nodes["n2"].term == 3
    assert c.nodes["n1"].role is Role.FOLLOWER and c.nodes["n1"].lead == "n2"


def test_3_10_transfer_waits_for_the_target_to_catch_up() -> None:
    c = Cluster()
    c.elect("n1")
    c.drop = lambda m: isinstance(m, AppendEntries) and m.dst == "n3"
    for i in range(5):
        c.propose("n1", b"%d" % i)
    c.heal()
    c.clear_log()
    c.nodes["n1"].transfer_leadership("n3")
    c.stabilize()
    first_timeout = next(i for i, m in enumerate(c.log) if isinstance(m, TimeoutNow))
    assert any(isinstance(m, AppendEntries) and m.dst == "n3" for m in c.log[:first_timeout])
    assert c.leader() == "n3"
    assert c.applied_data("n3")[-5:] == [b"%d" % i for i in range(5)]


def test_3_10_no_proposals_during_a_transfer() -> None:
    c = Cluster()
    c.elect("n1")
    c.isolate("n3")
    c.propose("n1", b"x")
    c.nodes["n1"].transfer_leadership("n3")
    with pytest.raises(ProposalDropped):
        c.nodes["n1"].propose(b"y")
    assert c.nodes["n1"].transferee == "n3"


def test_3_10_transfer_is_abandoned_after_an_election_timeout() -> None:
    c = Cluster()
    c.elect("n1")
    c.isolate("n3")
    c.propose("n1", b"x")
    c.nodes["n1"].transfer_leadership("n3")
    c.tick("n1", 3)
    assert c.nodes["n1"].transferee is None
    assert c.nodes["n1"].role is Role.LEADER
    c.propose("n1", b"y")  # accepted again


def test_3_10_transfer_target_must_be_a_voter() -> None:
    c = Cluster()
    c.elect("n1")
    with pytest.raises(TransferRejected):
        c.nodes["n1"].transfer_leadership("n9")
    with pytest.raises(NotLeader):
        c.nodes["n2"].transfer_leadership("n3")


def test_preferred_leader_takes_leadership_back_once_healthy_and_caught_up() -> None:
    c = Cluster(preferred_leader="n3")
    c.crash("n3")
    c.elect("n1")
    for i in range(3):
        c.propose("n1", b"%d" % i)
    c.tick_all(5)
    assert c.leader() == "n1"  # the preferred leader is down: nothing to do
    c.restart("n3")
    c.tick_all(3)
    assert c.leader() == "n3"
    assert c.applied_data("n3") == [b"0", b"1", b"2"]
    c.tick_all(20)
    assert c.leader() == "n3"  # and it stays there


# --- read-index -------------------------------------------------------------------------------


def test_6_4_leader_read_waits_for_a_heartbeat_quorum() -> None:
    c = Cluster()
    c.elect("n1")
    c.propose("n1", b"x")
    commit = c.nodes["n1"].commit_index
    c.clear_log()
    c.nodes["n1"].read_index(b"ctx-1")
    leader = c.nodes["n1"]._leader
    assert leader is not None
    seq = leader.readonly.last_seq  # the read's sequence number (every round has its own)
    c.stabilize()
    assert c.reads["n1"] == [ReadState(index=commit, ctx=b"ctx-1")]
    assert any(isinstance(m, Heartbeat) and m.read_seq == seq for m in c.log)
    assert any(isinstance(m, HeartbeatResponse) and m.read_seq == seq for m in c.log)


def test_6_4_partitioned_leader_cannot_answer_reads() -> None:
    c = Cluster()
    c.elect("n1")
    c.isolate("n1")
    c.nodes["n1"].read_index(b"stale?")
    c.stabilize()
    c.tick("n1", 2)
    assert c.reads["n1"] == []


def test_6_4_one_follower_ack_is_enough_in_three() -> None:
    c = Cluster()
    c.elect("n1")
    c.isolate("n3")
    c.nodes["n1"].read_index(b"ctx")
    c.stabilize()
    assert [rs.ctx for rs in c.reads["n1"]] == [b"ctx"]


def test_6_4_follower_read_is_forwarded_and_served_after_apply() -> None:
    c = Cluster()
    c.elect("n1")
    c.drop = lambda m: isinstance(m, AppendEntries) and m.dst == "n2"
    for i in range(3):
        c.propose("n1", b"%d" % i)
    c.clear_log()
    c.nodes["n2"].read_index(b"from-n2")
    c.stabilize()
    assert any(isinstance(m, ReadIndexRequest) for m in c.log)
    leader_commit = c.nodes["n1"].commit_index
    assert c.reads["n2"] == []  # n2 has not applied up to the read index yet
    c.heal()
    c.tick("n1", 1)
    assert c.reads["n2"] == [ReadState(index=leader_commit, ctx=b"from-n2")]
    assert c.machines["n2"].applied >= leader_commit


def test_6_4_read_before_the_first_commit_of_the_term_is_postponed() -> None:
    c = Cluster()
    c.drop = lambda m: isinstance(m, AppendEntries)
    c.elect("n1")
    c.nodes["n1"].read_index(b"early")
    c.stabilize()
    assert c.reads["n1"] == []
    assert not any(isinstance(m, HeartbeatResponse) and m.read_seq for m in c.log)
    c.heal()
    c.tick("n1", 1)
    assert [rs.ctx for rs in c.reads["n1"]] == [b"early"]
    assert c.reads["n1"][0].index == c.nodes["n1"].commit_index


def test_6_4_single_voter_reads_at_once() -> None:
    storage = MemoryStorage()
    hs, entry = bootstrap(["solo"])
    storage.save(hard_state=hs, entries=[entry])
    node = RaftNode(RaftConfig(node_id="solo"), storage, random.Random(0))
    node.campaign()
    drain(node)
    drain(node)
    assert node.role is Role.LEADER
    node.read_index(b"r")
    rd = node.ready()
    assert rd is not None and rd.read_states == (ReadState(index=node.commit_index, ctx=b"r"),)


def test_6_4_no_leader_no_read() -> None:
    c = Cluster()
    with pytest.raises(NotLeader):
        c.nodes["n1"].read_index(b"x")
