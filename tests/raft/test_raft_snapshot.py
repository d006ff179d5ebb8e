"""Log compaction and InstallSnapshot (Raft paper section 7), in chunks."""

from __future__ import annotations

import pytest

from controller.raft import (
    AppendResponse,
    InstallSnapshot,
    InstallSnapshotAck,
    Snapshot,
    SnapshotMeta,
)
from tests.raft.harness import Cluster, drain, make_node


def test_7_compact_drops_the_applied_prefix() -> None:
    c = Cluster()
    c.elect("n1")
    for i in range(10):
        c.propose("n1", b"%d" % i)
    node = c.nodes["n1"]
    machine = c.machines["n1"]
    assert node.compact(machine.applied, machine.snapshot())
    c.stabilize()
    storage = c.storages["n1"]
    assert storage.snapshot().index == machine.applied
    assert storage.first_index() == machine.applied + 1
    assert storage.snapshot_meta().conf_state.voters == ("n1", "n2", "n3")


def test_7_compact_rejects_an_index_past_applied_and_ignores_an_old_one() -> None:
    c = Cluster()
    c.elect("n1")
    c.propose("n1", b"a")
    node = c.nodes["n1"]
    with pytest.raises(ValueError):
        node.compact(node.applied_index + 1, b"")
    assert node.compact(node.applied_index, c.machines["n1"].snapshot())
    c.stabilize()
    assert not node.compact(node.applied_index, b"")


def test_7_lagging_follower_receives_the_snapshot_in_chunks() -> None:
    c = Cluster(snapshot_every=5, snapshot_chunk_bytes=16)
    c.elect("n1")
    c.crash("n3")
    for i in range(30):
        c.propose("n1", b"entry-%02d" % i)
    assert c.storages["n1"].first_index() > 2  # n3's next entry is gone from the leader's log
    c.restart("n3")
    c.clear_log()
    c.tick_all(6)
    chunks = [m for m in c.sent(InstallSnapshot) if m.dst == "n3"]
    assert len(chunks) == len({m.offset for m in chunks})  # one stream, no duplicates
    snapshot = c.storages["n3"].snapshot()
    assert len(chunks) > 3 and all(len(m.data) <= 16 for m in chunks)
    assert [m.offset for m in chunks] == sorted(m.offset for m in chunks)
    assert chunks[-1].done and snapshot.index > 0
    assert c.applied_data("n3") == c.applied_data("n1") == [b"entry-%02d" % i for i in range(30)]


def test_7_lost_chunks_are_resent() -> None:
    c = Cluster(snapshot_every=5, snapshot_chunk_bytes=16)
    c.elect("n1")
    c.crash("n3")
    for i in range(20):
        c.propose("n1", b"entry-%02d" % i)
    c.restart("n3")
    dropped: list[int] = []

    def lose_every_third_chunk(m: object) -> bool:
        if isinstance(m, InstallSnapshot):
            dropped.append(m.offset)
            return len(dropped) % 3 == 0
        return False

    c.drop = lose_every_third_chunk
    c.tick_all(40)
    assert len(dropped) > 3
    assert c.applied_data("n3") == c.applied_data("n1")


def test_7_follower_restores_and_answers_with_its_new_last_index() -> None:
    follower = make_node("n2", terms=[1, 1], term=1)
    meta = SnapshotMeta(index=50, term=3, conf_state=follower.conf_state)
    data = b"0123456789abcdef" * 3
    out = []
    for offset in range(0, len(data), 20):
        chunk = data[offset : offset + 20]
        follower.step(
            InstallSnapshot(
                src="n1",
                dst="n2",
                term=3,
                meta=meta,
                offset=offset,
                data=chunk,
                done=offset + 20 >= len(data),
            )
        )
        out.extend(drain(follower))
    acks = [m for m in out if isinstance(m, InstallSnapshotAck)]
    assert [m.offset for m in acks] == [20, 40]
    [done] = [m for m in out if isinstance(m, AppendResponse)]
    assert done.index == 50 and not done.reject
    assert follower.storage.snapshot() == Snapshot(meta=meta, data=data)
    assert follower.commit_index == follower.applied_index == 50


def test_7_out_of_order_chunk_asks_for_the_missing_offset() -> None:
    follower = make_node("n2", term=1)
    meta = SnapshotMeta(index=50, term=3, conf_state=follower.conf_state)
    follower.step(
        InstallSnapshot(src="n1", dst="n2", term=3, meta=meta, offset=10, data=b"x", done=False)
    )
    [ack] = [m for m in drain(follower) if isinstance(m, InstallSnapshotAck)]
    assert ack.offset == 0


def test_7_snapshot_matching_the_log_only_moves_commit() -> None:
    follower = make_node("n2", terms=[1, 1, 2], term=2)
    meta = SnapshotMeta(index=3, term=1, conf_state=follower.conf_state)
    follower.step(
        InstallSnapshot(src="n1", dst="n2", term=2, meta=meta, offset=0, data=b"s", done=True)
    )
    drain(follower)
    assert follower.commit_index == 3
    assert follower.log.last_index() == 4  # the entries after the snapshot are kept
    assert follower.storage.snapshot().index == 0


def test_7_restart_recovers_from_the_snapshot() -> None:
    c = Cluster(snapshot_every=4)
    c.elect("n1")
    for i in range(12):
        c.propose("n1", b"%d" % i)
    c.crash("n2")
    c.restart("n2")
    assert c.machines["n2"].applied == c.storages["n2"].snapshot().index > 0
    c.tick_all(3)
    assert c.applied_data("n2") == c.applied_data("n1")
