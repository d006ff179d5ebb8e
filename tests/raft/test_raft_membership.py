"""Membership changes one server at a time (Raft dissertation chapter 4)."""

from __future__ import annotations

import pytest

from controller.raft import (
    AppendEntries,
    ConfChange,
    ConfChangeRejected,
    ConfChangeType,
    Entry,
    EntryType,
    NotLeader,
    ProposalDropped,
    Role,
    VoteRequest,
    VoteResponse,
    decode_conf_change,
    encode_conf_change,
)
from tests.raft.harness import Cluster, append_to_n2, drain, make_node


def add_learner(c: Cluster, leader: str, node_id: str, context: bytes = b"") -> int:
    index = c.nodes[leader].propose_conf_change(ConfChange.add_learner(node_id, context))
    c.stabilize()
    return index


def test_4_conf_change_codec_round_trip() -> None:
    for cc in (
        ConfChange.bootstrap(["n1", "n2"]),
        ConfChange.add_learner("n4", b"127.0.0.1:9848"),
        ConfChange.promote("n4"),
        ConfChange.remove("n2"),
    ):
        assert decode_conf_change(encode_conf_change(cc)) == cc
    with pytest.raises(ValueError):
        decode_conf_change(b"\x01\x00\x05\x00")


def test_4_learner_receives_the_log_but_does_not_vote_or_count() -> None:
    c = Cluster(joining=["n4"], auto_promote_learners=False)
    c.elect("n1")
    c.propose("n1", b"before")
    add_learner(c, "n1", "n4", b"addr-of-n4")
    c.propose("n1", b"after")
    assert c.applied_data("n4") == [b"before", b"after"]
    assert all(n.conf_state.learners == ("n4",) for n in c.nodes.values())
    # The learner never campaigns...
    c.tick("n4", 30)
    assert c.nodes["n4"].role is Role.FOLLOWER
    assert not [m for m in c.log if isinstance(m, VoteRequest) and m.src == "n4"]
    # ...and its acknowledgement does not make a quorum with the leader.
    c.crash("n2")
    c.crash("n3")
    index = c.nodes["n1"].propose(b"needs-a-voter")
    c.stabilize()
    assert c.nodes["n4"].log.last_index() >= index
    assert c.nodes["n1"].commit_index < index


def test_4_committed_conf_change_reaches_the_driver_with_its_context() -> None:
    c = Cluster(joining=["n4"], auto_promote_learners=False)
    c.elect("n1")
    index = add_learner(c, "n1", "n4", b"127.0.0.1:9848")
    [entry] = c.nodes["n2"].log.slice(index, index + 1)
    assert entry.type is EntryType.CONF_CHANGE
    cc = decode_conf_change(entry.data)
    assert (cc.type, cc.node_id, cc.context) == (
        ConfChangeType.ADD_LEARNER,
        "n4",
        b"127.0.0.1:9848",
    )


def test_4_learner_is_promoted_once_caught_up() -> None:
    c = Cluster(joining=["n4"])
    c.elect("n1")
    for i in range(10):
        c.propose("n1", b"%d" % i)
    add_learner(c, "n1", "n4")
    c.tick_all(2)
    assert all(n.conf_state.voters == ("n1", "n2", "n3", "n4") for n in c.nodes.values())
    assert all(not n.conf_state.learners for n in c.nodes.values())
    # n4 now counts: with n2 and n3 down, n1 and n4 are not a majority of four, with n3 back
    # they are.
    c.crash("n2")
    c.crash("n3")
    index = c.nodes["n1"].propose(b"x")
    c.stabilize()
    assert c.nodes["n1"].commit_index < index
    c.restart("n3")
    c.tick_all(2)
    assert c.nodes["n1"].commit_index >= index


def test_4_promotion_of_a_lagging_learner_is_rejected() -> None:
    c = Cluster(joining=["n4"], auto_promote_learners=False)
    c.elect("n1")
    c.isolate("n4")
    add_learner(c, "n1", "n4")
    c.propose("n1", b"x")
    with pytest.raises(ConfChangeRejected):
        c.nodes["n1"].propose_conf_change(ConfChange.promote("n4"))
    c.heal()
    c.tick_all(2)
    c.nodes["n1"].propose_conf_change(ConfChange.promote("n4"))
    c.stabilize()
    assert c.nodes["n4"].conf_state.is_voter("n4")


def test_4_invalid_changes_are_rejected() -> None:
    c = Cluster()
    c.elect("n1")
    leader = c.nodes["n1"]
    with pytest.raises(ConfChangeRejected):
        leader.propose_conf_change(ConfChange.add_learner("n2"))
    with pytest.raises(ConfChangeRejected):
        leader.propose_conf_change(ConfChange.promote("n2"))
    with pytest.raises(ConfChangeRejected):
        leader.propose_conf_change(ConfChange.remove("n9"))
    with pytest.raises(ConfChangeRejected):
        leader.propose_conf_change(ConfChange.bootstrap(["n1"]))
    with pytest.raises(NotLeader):
        c.nodes["n2"].propose_conf_change(ConfChange.remove("n3"))


def test_4_one_change_at_a_time() -> None:
    c = Cluster(joining=["n4", "n5"], auto_promote_learners=False)
    c.elect("n1")
    leader = c.nodes["n1"]
    leader.propose_conf_change(ConfChange.add_learner("n4"))
    with pytest.raises(ProposalDropped):
        leader.propose_conf_change(ConfChange.add_learner("n5"))
    c.stabilize()
    leader.propose_conf_change(ConfChange.add_learner("n5"))  # the first one committed


def test_4_new_leader_waits_for_a_commit_in_its_term() -> None:
    node = make_node("n1", terms=[1], pre_vote=False)
    node.campaign()
    drain(node)
    node.step(VoteResponse(src="n2", dst="n1", term=node.term, granted=True))
    assert node.role is Role.LEADER
    with pytest.raises(ProposalDropped):
        node.propose_conf_change(ConfChange.remove("n3"))


def test_4_configuration_takes_effect_when_appended_and_reverts_when_truncated() -> None:
    follower = make_node("n2", term=2)
    cc = encode_conf_change(ConfChange.add_learner("n4"))
    follower.step(append_to_n2(Entry(term=2, index=2, type=EntryType.CONF_CHANGE, data=cc)))
    assert follower.conf_state.learners == ("n4",)  # in use before it commits
    follower.step(
        AppendEntries(
            src="n3",
            dst="n2",
            term=3,
            prev_log_index=1,
            prev_log_term=1,
            commit=1,
            entries=(Entry(term=3, index=2, type=EntryType.NOOP),),
        )
    )
    assert follower.conf_state.learners == ()


def test_4_removed_follower_leaves_and_the_rest_continue() -> None:
    c = Cluster()
    c.elect("n1")
    c.nodes["n1"].propose_conf_change(ConfChange.remove("n3"))
    c.stabilize()
    assert c.nodes["n1"].conf_state.voters == ("n1", "n2")
    c.propose("n1", b"after-removal")
    assert c.applied_data("n2")[-1] == b"after-removal"
    assert b"after-removal" not in c.applied_data("n3")


def test_4_removed_node_does_not_disrupt_the_group() -> None:
    c = Cluster()
    c.elect("n1")
    c.isolate("n3")  # n3 never learns it was removed
    c.nodes["n1"].propose_conf_change(ConfChange.remove("n3"))
    c.stabilize()
    term = c.nodes["n1"].term
    c.heal()
    c.tick_all(40)  # n3 times out again and again, asking for (pre-)votes
    assert any(isinstance(m, VoteRequest) and m.src == "n3" for m in c.log)
    assert c.leader() == "n1" and c.nodes["n1"].term == term


def test_4_removing_the_leader_hands_over_and_steps_down() -> None:
    c = Cluster()
    c.elect("n1")
    c.propose("n1", b"x")
    c.nodes["n1"].propose_conf_change(ConfChange.remove("n1"))
    c.stabilize()
    assert c.nodes["n1"].role is Role.FOLLOWER
    new = c.leader()  # TimeoutNow made the successor campaign at once, no timeout needed
    assert new in ("n2", "n3")
    c.propose(new, b"y")
    assert c.applied_data(new)[-1] == b"y"
    c.tick_all(30)
    assert c.leader() == new  # the removed leader never campaigns
