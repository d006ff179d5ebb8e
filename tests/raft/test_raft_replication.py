"""Log replication (Raft paper section 5.3) and safety (section 5.4)."""

from __future__ import annotations

import pytest

from controller.raft import (
    AppendEntries,
    AppendResponse,
    Entry,
    EntryType,
    Heartbeat,
    HeartbeatResponse,
    ProgressState,
    RaftNode,
    Role,
    VoteResponse,
)
from tests.raft.harness import Cluster, drain, make_node


def lead(node_id: str, voters: tuple[str, ...], terms: list[int], **cfg: object) -> RaftNode:
    """A node made leader by votes fed to it directly; returns it with its log persisted."""
    node = make_node(node_id, voters, terms=terms, pre_vote=False, **cfg)
    node.campaign()
    drain(node)
    for voter in voters:
        if voter != node_id:
            node.step(VoteResponse(src=voter, dst=node_id, term=node.term, granted=True))
    assert node.role is Role.LEADER
    return node


# --- 5.3 log replication ------------------------------------------------------------------------


def test_5_3_leader_replicates_and_every_node_applies_in_order() -> None:
    c = Cluster()
    c.elect("n1")
    for i in range(20):
        c.propose("n1", b"cmd%d" % i)
    expected = [b"cmd%d" % i for i in range(20)]
    assert all(c.applied_data(n) == expected for n in c.nodes)


def test_5_3_proposal_at_a_follower_raises_not_leader_with_the_leader() -> None:
    from controller.raft import NotLeader

    c = Cluster()
    c.elect("n1")
    try:
        c.nodes["n2"].propose(b"x")
    except NotLeader as exc:
        assert exc.leader_id == "n1"
    else:
        raise AssertionError("a follower accepted a proposal")


def test_5_3_log_matching_rejects_a_mismatched_prev_entry() -> None:
    follower = make_node("n2", terms=[1, 2, 2], term=3)
    follower.step(
        AppendEntries(
            src="n1",
            dst="n2",
            term=3,
            prev_log_index=4,
            prev_log_term=3,
            commit=1,
            entries=(Entry(term=3, index=5),),
        )
    )
    [resp] = [m for m in drain(follower) if isinstance(m, AppendResponse)]
    assert resp.reject and resp.index == 4
    # The hint: our last entry at or below index 4 whose term is <= 3.
    assert (resp.reject_hint, resp.hint_term) == (4, 2)
    assert follower.log.last_index() == 4


def test_5_3_follower_overwrites_a_conflicting_suffix() -> None:
    follower = make_node("n2", terms=[1, 2, 2, 2], term=3)
    follower.step(
        AppendEntries(
            src="n1",
            dst="n2",
            term=3,
            prev_log_index=3,
            prev_log_term=2,
            commit=1,
            entries=(Entry(term=3, index=4, data=b"new"),),
        )
    )
    out = drain(follower)
    assert [m.index for m in out if isinstance(m, AppendResponse) and not m.reject] == [4]
    assert follower.log.last_index() == 4
    assert follower.log.slice(4, 5)[0].data == b"new"
    assert follower.storage.last_index() == 4  # the stored suffix was replaced too


def test_5_3_duplicate_and_stale_appends_do_not_truncate() -> None:
    follower = make_node("n2", terms=[1, 2, 2], term=2)
    stale = AppendEntries(
        src="n1",
        dst="n2",
        term=2,
        prev_log_index=2,
        prev_log_term=1,
        commit=1,
        entries=(Entry(term=2, index=3, data=b"e3"),),
    )
    follower.step(stale)
    drain(follower)
    assert follower.log.last_index() == 4  # entry 4 survives a delayed, shorter append


def test_5_3_leader_append_only() -> None:
    leader = lead("n1", ("n1", "n2", "n3"), [1, 2])
    before = leader.log.slice(1, leader.log.last_index() + 1)
    # An append from a deposed leader of an older term must not touch the leader's log.
    leader.step(
        AppendEntries(
            src="n2",
            dst="n1",
            term=leader.term - 1,
            prev_log_index=1,
            prev_log_term=1,
            commit=1,
            entries=(Entry(term=leader.term - 1, index=2, data=b"other"),),
        )
    )
    assert leader.log.slice(1, leader.log.last_index() + 1) == before
    assert leader.role is Role.LEADER


def test_5_3_new_leader_appends_a_noop_of_its_term() -> None:
    leader = lead("n1", ("n1", "n2", "n3"), [1, 2])
    [noop] = leader.log.slice(leader.log.last_index(), leader.log.last_index() + 1)
    assert noop.type is EntryType.NOOP and noop.term == leader.term


def test_5_3_fast_backoff_skips_a_whole_term_per_round_trip() -> None:
    # The follower holds 40 entries of term 3 that the leader never had; the leader's log has
    # term 4 from index 5 on. A one-index-per-round-trip back-off would take 6 rejections.
    leader = lead("n1", ("n1", "n2", "n3"), [2, 2, 2, 4, 4, 4, 4, 4])
    follower = make_node("n2", terms=[2, 2, 2] + [3] * 40, term=3)
    rejects = 0
    pending = drain(leader)
    while pending:
        replies = []
        for m in pending:
            if m.dst == "n2":
                follower.step(m)
                replies.extend(drain(follower))
        rejects += sum(1 for m in replies if isinstance(m, AppendResponse) and m.reject)
        for m in replies:
            leader.step(m)
        pending = drain(leader)
    assert rejects == 1
    assert follower.log.last_index() == leader.log.last_index() == 10
    assert follower.log.slice(2, 11) == leader.log.slice(2, 11)


def test_5_3_batching_puts_many_proposals_in_one_append() -> None:
    c = Cluster()
    c.elect("n1")
    c.clear_log()
    leader = c.nodes["n1"]
    for i in range(50):
        leader.propose(b"%03d" % i)
    c.stabilize()
    appends = [m for m in c.sent(AppendEntries) if m.dst == "n2" and m.entries]
    assert len(appends) == 1 and len(appends[0].entries) == 50


def test_5_3_batches_are_bounded_by_max_msg_bytes() -> None:
    c = Cluster(max_msg_bytes=500)
    c.elect("n1")
    c.clear_log()
    leader = c.nodes["n1"]
    for _ in range(50):
        leader.propose(b"x" * 100)
    c.stabilize()
    appends = [m for m in c.sent(AppendEntries) if m.dst == "n2" and m.entries]
    assert len(appends) > 10
    assert all(sum(e.size() for e in m.entries) <= 500 for m in appends)
    assert c.applied_data("n2") == [b"x" * 100] * 50


def test_leader_refuses_proposals_past_max_uncommitted_bytes() -> None:
    from controller.raft import ProposalDropped

    c = Cluster(max_uncommitted_bytes=250)
    c.elect("n1")
    c.isolate("n1")  # nothing can commit
    leader = c.nodes["n1"]
    leader.propose(b"a" * 100)
    leader.propose(b"b" * 100)
    with pytest.raises(ProposalDropped):
        leader.propose(b"c" * 100)
    c.heal()
    c.stabilize()
    c.tick("n1", 1)
    leader.propose(b"c" * 100)  # committed, so there is room again
    c.stabilize()
    assert c.applied_data("n2") == [b"a" * 100, b"b" * 100, b"c" * 100]


def test_5_3_pipelining_window_bounds_appends_in_flight() -> None:
    c = Cluster(max_inflight=4, max_msg_bytes=200)
    c.elect("n1")
    leader = c.nodes["n1"]
    c.drop = lambda m: isinstance(m, AppendResponse)  # nothing acked: the window fills
    c.clear_log()
    for _ in range(10):
        for _ in range(3):
            leader.propose(b"y" * 150)
        c.stabilize()
    to_n2 = [m for m in c.sent(AppendEntries) if m.dst == "n2" and m.entries]
    assert len(to_n2) == 4
    [pr] = [p for p in leader.status().progress if p.node_id == "n2"]
    assert pr.state is ProgressState.REPLICATE
    c.heal()
    c.tick("n1", 2)
    assert c.applied_data("n2") == [b"y" * 150] * 30


def test_5_3_lost_appends_are_recovered_after_a_heartbeat() -> None:
    c = Cluster()
    c.elect("n1")
    c.drop = lambda m: isinstance(m, AppendEntries) and m.dst == "n3"
    c.propose("n1", b"a")
    c.propose("n1", b"b")
    assert c.applied_data("n3") == []
    c.heal()
    c.tick("n1", 1)
    assert c.applied_data("n3") == [b"a", b"b"]


# --- 5.4 safety ---------------------------------------------------------------------------------


def test_5_4_2_figure_8_previous_term_entry_is_not_committed_by_counting() -> None:
    # n1 leads term 4 with an uncommitted entry of term 2 at index 2, then its no-op at 3.
    leader = lead("n1", ("n1", "n2", "n3", "n4", "n5"), [2], term=3)
    drain(leader)
    assert leader.term == 4 and leader.log.last_index() == 3
    for voter in ("n2", "n3"):
        leader.step(AppendResponse(src=voter, dst="n1", term=4, index=2))
    assert leader.commit_index == 1  # a majority holds index 2, but it is from term 2
    for voter in ("n2", "n3"):
        leader.step(AppendResponse(src=voter, dst="n1", term=4, index=3))
    assert leader.commit_index == 3  # committing the term-4 entry commits index 2 with it


def test_5_4_leader_completeness_new_leader_holds_every_committed_entry() -> None:
    c = Cluster(ids=("n1", "n2", "n3", "n4", "n5"))
    c.elect("n1")
    for i in range(5):
        c.propose("n1", b"c%d" % i)
    committed = c.nodes["n1"].commit_index
    c.crash("n1")
    c.tick_all(10)
    new = c.leader()
    assert new is not None and new != "n1"
    log = c.nodes[new].log
    assert [e.data for e in log.slice(2, committed + 1) if e.type is EntryType.NORMAL] == [
        b"c%d" % i for i in range(5)
    ]


def test_5_4_3_state_machine_safety_across_leader_changes() -> None:
    c = Cluster(ids=("n1", "n2", "n3", "n4", "n5"))
    c.elect("n1")
    for round_ in range(4):
        leader = c.leader()
        assert leader is not None
        for i in range(3):
            c.propose(leader, b"r%d-%d" % (round_, i))
        c.crash(leader)
        c.tick_all(10)
        c.restart(leader)
        c.tick_all(5)
    reference = c.applied_data("n1")
    assert len(reference) == 12
    assert all(c.applied_data(n) == reference for n in c.nodes)


def test_heartbeat_carries_commit_no_further_than_the_followers_match() -> None:
    c = Cluster()
    c.elect("n1")
    c.drop = lambda m: isinstance(m, AppendEntries) and m.dst == "n3"
    c.propose("n1", b"a")
    c.clear_log()
    c.drop = lambda m: isinstance(m, AppendEntries)
    c.tick("n1", 1)
    beats = [m for m in c.sent(Heartbeat) if m.dst == "n3"]
    assert beats and beats[0].commit < c.nodes["n1"].commit_index
    assert any(isinstance(m, HeartbeatResponse) for m in c.log)
