"""The Ready contract between the core and its driver, and the core on DiskStorage."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from controller.raft import (
    AppendEntries,
    AppendResponse,
    Entry,
    EntryType,
    HardState,
    Message,
    RaftConfig,
    RaftNode,
    ReadyNotAdvanced,
    Role,
    VoteResponse,
    bootstrap,
)
from storage.raftlog import DiskStorage, MemoryStorage
from tests.raft.harness import append_to_n2, drain, make_node


def solo() -> RaftNode:
    storage = MemoryStorage()
    hs, entry = bootstrap(["solo"])
    storage.save(hard_state=hs, entries=[entry])
    return RaftNode(RaftConfig(node_id="solo"), storage, random.Random(0))


def test_one_ready_at_a_time() -> None:
    node = solo()
    node.campaign()
    rd = node.ready()
    assert rd is not None
    assert not node.has_ready()
    with pytest.raises(ReadyNotAdvanced):
        node.ready()
    with pytest.raises(ValueError):
        node.advance(type(rd)())
    node.advance(rd)


def test_own_vote_counts_only_once_durable() -> None:
    node = solo()
    node.campaign()
    assert node.role is Role.CANDIDATE
    rd = node.ready()
    assert rd is not None and rd.hard_state == HardState(term=2, vote="solo", commit=1)
    assert rd.must_sync
    assert node.role is Role.CANDIDATE  # not before advance()
    node.advance(rd)
    assert node.role is Role.LEADER


def test_leader_counts_its_own_entries_only_once_durable() -> None:
    node = make_node("n1", pre_vote=False)
    node.campaign()
    drain(node)
    node.step(VoteResponse(src="n2", dst="n1", term=node.term, granted=True))
    drain(node)  # the no-op is durable
    node.step(AppendResponse(src="n2", dst="n1", term=node.term, index=node.log.last_index()))
    drain(node)  # n2 now in the replicate state
    index = node.propose(b"x")
    rd = node.ready()
    assert rd is not None and [e.index for e in rd.entries] == [index]
    appends = [m for m in rd.messages if isinstance(m, AppendEntries)]
    assert appends, "a leader's appends may go out before its own fsync"
    node.step(AppendResponse(src="n2", dst="n1", term=node.term, index=index))
    assert node.commit_index < index  # n2 alone is not a majority of three
    node.storage.save(entries=rd.entries, hard_state=rd.hard_state)  # type: ignore[attr-defined]
    node.advance(rd)
    assert node.commit_index == index


def test_follower_acks_leave_only_after_persistence() -> None:
    node = make_node("n2", term=2)
    node.step(append_to_n2(Entry(term=2, index=2, data=b"a")))
    rd = node.ready()
    assert rd is not None
    assert [type(m) for m in rd.persisted_messages] == [AppendResponse]
    assert rd.messages == ()


def test_committed_entries_are_handed_out_once_and_applied_moves_on_advance() -> None:
    node = solo()
    node.campaign()
    seen: list[Entry] = []
    for _ in range(5):
        while (rd := node.ready()) is not None:
            node.storage.save(entries=rd.entries, hard_state=rd.hard_state)  # type: ignore[attr-defined]
            seen.extend(rd.committed_entries)
            node.advance(rd)
        node.propose(b"p")
    assert [e.index for e in seen] == list(range(1, len(seen) + 1))
    assert [e.type for e in seen[:2]] == [EntryType.CONF_CHANGE, EntryType.NOOP]
    assert node.applied_index == seen[-1].index


def test_commit_only_hard_state_change_needs_no_sync() -> None:
    node = make_node("n2", term=2)
    node.step(append_to_n2(Entry(term=2, index=2, data=b"a")))
    drain(node)
    from controller.raft import Heartbeat

    node.step(Heartbeat(src="n1", dst="n2", term=2, commit=2))
    rd = node.ready()
    assert rd is not None and rd.hard_state is not None and rd.hard_state.commit == 2
    assert not rd.must_sync


def test_soft_state_reports_role_changes() -> None:
    node = solo()
    node.campaign()
    roles = []
    while (rd := node.ready()) is not None:
        if rd.soft_state is not None:
            roles.append(rd.soft_state.role)
        node.storage.save(entries=rd.entries, hard_state=rd.hard_state)  # type: ignore[attr-defined]
        node.advance(rd)
    assert roles[-1] is Role.LEADER


# --- the core on DiskStorage -----------------------------------------------------------------


class DiskCluster:
    def __init__(self, root: Path, ids: list[str]) -> None:
        self.root = root
        self.ids = ids
        self.stores: dict[str, DiskStorage] = {}
        self.nodes: dict[str, RaftNode] = {}
        self.applied: dict[str, list[bytes]] = {i: [] for i in ids}
        for node_id in ids:
            store = DiskStorage.open(root / node_id, segment_bytes=512)
            hs, entry = bootstrap(ids)
            store.save(hard_state=hs, entries=[entry])
            self.stores[node_id] = store
            self.start(node_id)

    def start(self, node_id: str) -> None:
        self.nodes[node_id] = RaftNode(
            RaftConfig(node_id=node_id), self.stores[node_id], random.Random(node_id)
        )
        self.applied[node_id] = []

    def reopen(self, node_id: str) -> None:
        self.stores[node_id].close()
        self.stores[node_id] = DiskStorage.open(self.root / node_id, segment_bytes=512)
        self.start(node_id)

    def stabilize(self) -> None:
        while True:
            pending: list[Message] = []
            for node_id, node in self.nodes.items():
                while (rd := node.ready()) is not None:
                    pending.extend(rd.messages)
                    self.stores[node_id].save(
                        hard_state=rd.hard_state,
                        entries=rd.entries,
                        snapshot=rd.snapshot,
                        compaction=rd.compaction,
                        sync=rd.must_sync,
                    )
                    pending.extend(rd.persisted_messages)
                    self.applied[node_id].extend(
                        e.data for e in rd.committed_entries if e.type is EntryType.NORMAL
                    )
                    node.advance(rd)
            if not pending:
                return
            for m in pending:
                self.nodes[m.dst].step(m)


def test_cluster_on_disk_survives_a_restart(tmp_path: Path) -> None:
    c = DiskCluster(tmp_path, ["n1", "n2", "n3"])
    c.nodes["n1"].campaign()
    c.stabilize()
    for i in range(30):
        c.nodes["n1"].propose(b"v%d" % i)
        c.stabilize()
    c.reopen("n2")
    assert c.stores["n2"].last_index() == c.nodes["n1"].log.last_index()
    for _ in range(10):
        c.nodes["n2"].tick()
        c.nodes["n1"].tick()
        c.stabilize()
    assert c.applied["n2"] == [b"v%d" % i for i in range(30)]  # replayed from disk on restart
    assert c.nodes["n1"].role is Role.LEADER
    assert c.stores["n2"].hard_state().term == c.nodes["n1"].term
