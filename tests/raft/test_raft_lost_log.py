"""A member that lost its data directory and came back under its old id is reported.

Raft assumes a member keeps every entry it acknowledged. One started again with an empty log
(a wiped or replaced disk, the same id) founds its group again from the bootstrap entry and
then rejects every append: its log ends below what it had acknowledged. The leader neither
counts it up to date nor brings it up to date as if it were new (the entries it counted for
may now be on a minority); it reports it, so the operator removes it and adds it back under a
new id. A member that only fell behind, or was partitioned, is never reported.
"""

from __future__ import annotations

from controller.raft import ConfChange, bootstrap
from protocol.raft_types import NodeId
from storage.raftlog.memory import MemoryStorage
from tests.raft.harness import Cluster


def lost(c: Cluster, leader: NodeId) -> dict[NodeId, int]:
    status = c.nodes[leader].status()
    return {p.node_id: p.lost_log for p in status.progress if p.lost_log is not None}


def wipe(c: Cluster, node_id: NodeId) -> None:
    """Start ``node_id`` again on an empty storage that founds the group, as a controller with
    an empty data directory and ``join = false`` does."""
    c.crash(node_id)
    storage = MemoryStorage()
    hs, entry = bootstrap(sorted(c.nodes))
    storage.save(hard_state=hs, entries=[entry])
    c.storages[node_id] = storage
    c.restart(node_id)


def test_a_member_back_with_an_empty_log_is_reported_lost() -> None:
    c = Cluster()
    c.elect("n1")
    for i in range(5):
        c.propose("n1", b"x%d" % i)
    acked = c.nodes["n1"].status()
    assert {p.node_id: p.match for p in acked.progress}["n3"] >= 6
    changes = c.nodes["n1"].lost_log_changes
    assert lost(c, "n1") == {}

    wipe(c, "n3")
    c.tick_all(3)  # heartbeats carry no index: nothing tells yet
    assert lost(c, "n1") == {}
    c.propose("n1", b"after")  # the append after what n3 had acknowledged: it rejects it
    assert lost(c, "n1") == {"n3": 1}
    assert c.nodes["n1"].lost_log_changes == changes + 1
    # It is not brought up to date as if new: the leader keeps its match and commits on n1
    # and n2 only.
    assert {p.node_id: p.match for p in c.nodes["n1"].status().progress}["n3"] >= 6
    assert c.applied_data("n2")[-1] == b"after"
    assert c.nodes["n3"].log.last_index() == 1
    c.propose("n1", b"more")
    c.tick_all(5)
    assert c.nodes["n1"].lost_log_changes == changes + 1  # reported once, not per append


def test_a_removed_member_is_no_longer_reported() -> None:
    c = Cluster()
    c.elect("n1")
    c.propose("n1", b"x")
    wipe(c, "n3")
    c.propose("n1", b"y")
    assert lost(c, "n1") == {"n3": 1}
    changes = c.nodes["n1"].lost_log_changes
    c.nodes["n1"].propose_conf_change(ConfChange.remove("n3"))
    c.stabilize()
    assert lost(c, "n1") == {}
    assert c.nodes["n1"].lost_log_changes == changes + 1


def test_a_member_that_only_fell_behind_is_not_reported() -> None:
    c = Cluster()
    c.elect("n1")
    c.propose("n1", b"a")
    c.crash("n3")
    for i in range(5):
        c.propose("n1", b"y%d" % i)
    c.restart("n3")  # its log kept: it is behind, and catches up
    c.tick_all(3)
    assert lost(c, "n1") == {}
    assert c.nodes["n3"].log.last_index() == c.nodes["n1"].log.last_index()


def leader_among(c: Cluster, ids: set[NodeId]) -> NodeId:
    for _ in range(50):
        c.tick_all()
        leader = c.leader()
        if leader in ids:
            return leader
    raise AssertionError(f"no leader among {sorted(ids)}")


def test_a_deposed_leader_with_a_conflicting_suffix_is_not_reported() -> None:
    c = Cluster()
    c.elect("n1")
    c.propose("n1", b"a")
    c.isolate("n1")  # n1 keeps appending what will never commit
    for i in range(3):
        c.nodes["n1"].propose(b"lost%d" % i)
        c.stabilize()
    leader = leader_among(c, {"n2", "n3"})
    c.propose(leader, b"b")
    c.heal()
    c.tick_all(3)
    c.propose(leader, b"c")  # n1's suffix is replaced: a rejection, not a lost log
    assert lost(c, leader) == {}
    assert c.applied_data("n1")[-1] == b"c"


def test_a_new_leader_reports_it_too() -> None:
    c = Cluster()
    c.elect("n1")
    c.propose("n1", b"x")
    c.crash("n1")
    leader = leader_among(c, {"n2", "n3"})
    c.propose(leader, b"y")  # the new leader learns the other's match from its acknowledgement
    other = ({"n2", "n3"} - {leader}).pop()
    c.restart("n1")
    wipe(c, other)
    c.propose(leader, b"z")
    assert lost(c, leader) == {other: 1}
