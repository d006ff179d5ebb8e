"""storage.raftlog: the storage contract (both twins) and DiskStorage's files and recovery."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from controller.raft import (
    Compacted,
    ConfState,
    Entry,
    HardState,
    Snapshot,
    SnapshotMeta,
    Unavailable,
)
from storage.raftlog import CorruptStorage, DiskStorage, MemoryStorage
from storage.raftlog.files import decode_snapshot, encode_snapshot
from storage.raftlog.framing import SEGMENT_MAGIC, encode_entry

Store = MemoryStorage | DiskStorage


def entries(lo: int, hi: int, term: int = 1, size: int = 10) -> list[Entry]:
    return [Entry(term=term, index=i, data=bytes([i % 256]) * size) for i in range(lo, hi)]


def snap(index: int, term: int, data: bytes = b"state") -> Snapshot:
    conf = ConfState(voters=("n0", "n1", "n2"), learners=("n3",))
    return Snapshot(meta=SnapshotMeta(index=index, term=term, conf_state=conf), data=data)


@pytest.fixture(params=["memory", "disk"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Store]:
    if request.param == "memory":
        return MemoryStorage
    return lambda: DiskStorage.open(tmp_path / "raft", segment_bytes=256)


# --- the contract, for both implementations ---------------------------------------------------


def test_new_storage_is_empty(make_store: Callable[[], Store]) -> None:
    store = make_store()
    assert store.hard_state() == HardState()
    assert (store.first_index(), store.last_index()) == (1, 0)
    assert store.term(0) == 0
    assert store.snapshot().index == 0
    with pytest.raises(Unavailable):
        store.term(1)


def test_append_and_read(make_store: Callable[[], Store]) -> None:
    store = make_store()
    store.save(entries=entries(1, 21), hard_state=HardState(term=1, vote="n0", commit=3))
    assert store.last_index() == 20
    assert store.term(20) == 1
    assert store.entries(5, 8) == entries(5, 8)
    assert store.hard_state() == HardState(term=1, vote="n0", commit=3)
    with pytest.raises(Unavailable):
        store.entries(5, 22)


def test_entries_are_limited_by_bytes_but_never_empty(make_store: Callable[[], Store]) -> None:
    store = make_store()
    store.save(entries=entries(1, 11, size=100))
    assert len(store.entries(1, 11, max_bytes=1)) == 1
    assert len(store.entries(1, 11, max_bytes=3 * entries(1, 2, size=100)[0].size())) == 3


def test_suffix_truncation_replaces_conflicting_entries(make_store: Callable[[], Store]) -> None:
    store = make_store()
    store.save(entries=entries(1, 21, term=1))
    store.save(entries=entries(8, 10, term=2))
    assert store.last_index() == 9
    assert [store.term(i) for i in (7, 8, 9)] == [1, 2, 2]
    with pytest.raises(ValueError):
        store.save(entries=entries(12, 13, term=2))  # a gap


def test_compaction_drops_the_prefix(make_store: Callable[[], Store]) -> None:
    store = make_store()
    store.save(entries=entries(1, 31))
    store.save(compaction=snap(12, 1))
    assert store.first_index() == 13
    assert store.term(12) == 1
    with pytest.raises(Compacted):
        store.term(11)
    with pytest.raises(Compacted):
        store.entries(12, 14)
    assert store.entries(13, 31) == entries(13, 31)
    store.save(compaction=snap(5, 1))  # older than what we have: ignored
    assert store.snapshot().index == 12


def test_installed_snapshot_replaces_the_log(make_store: Callable[[], Store]) -> None:
    store = make_store()
    store.save(entries=entries(1, 11))
    store.save(snapshot=snap(50, 4, b"big state"), entries=entries(51, 53, term=4))
    assert (store.first_index(), store.last_index()) == (51, 52)
    assert store.snapshot().data == b"big state"
    assert store.snapshot_meta().conf_state.learners == ("n3",)


# --- DiskStorage: files and recovery ------------------------------------------------------------


def open_disk(path: Path) -> DiskStorage:
    return DiskStorage.open(path, segment_bytes=256)


def written(path: Path, **saved: Any) -> None:
    """A disk log at ``path`` that saved ``saved`` (DiskStorage.save's arguments), closed."""
    store = open_disk(path)
    store.save(**saved)
    store.close()


def segments(path: Path) -> list[Path]:
    return sorted((path / "log").glob("*.log"))


def test_reopen_recovers_everything(tmp_path: Path) -> None:
    store = open_disk(tmp_path)
    store.save(entries=entries(1, 41), hard_state=HardState(term=3, vote="n2", commit=40))
    store.save(compaction=snap(10, 1))
    store.close()
    again = open_disk(tmp_path)
    assert again.hard_state() == HardState(term=3, vote="n2", commit=40)
    assert (again.first_index(), again.last_index()) == (11, 40)
    assert again.entries(11, 41) == entries(11, 41)
    assert again.snapshot() == snap(10, 1)
    assert again.report.truncated == []


def test_segments_roll_and_are_named_by_first_index(tmp_path: Path) -> None:
    store = open_disk(tmp_path)
    store.save(entries=entries(1, 41))
    names = [p.name for p in segments(tmp_path)]
    assert len(names) > 3
    assert names[0] == "00000000000000000001.log"
    assert names == sorted(names)


def test_torn_tail_is_truncated(tmp_path: Path) -> None:
    written(tmp_path, entries=entries(1, 6))
    last = segments(tmp_path)[-1]
    with open(last, "ab") as f:
        f.write(encode_entry(Entry(term=1, index=6, data=b"z" * 50))[:-7])  # a torn write
    size_before = last.stat().st_size
    again = open_disk(tmp_path)
    assert again.last_index() == 5
    assert last.stat().st_size < size_before
    assert any("torn" in line for line in again.report.truncated)
    again.save(entries=entries(6, 9))  # appends cleanly after the cut
    again.close()
    assert open_disk(tmp_path).entries(1, 9) == entries(1, 9)


def test_corrupt_crc_mid_log_truncates_from_there(tmp_path: Path) -> None:
    written(tmp_path, entries=entries(1, 41))
    files = segments(tmp_path)
    victim = files[1]
    first = int(victim.name.split(".")[0])
    raw = bytearray(victim.read_bytes())
    frame = len(encode_entry(entries(first, first + 1)[0]))
    raw[len(SEGMENT_MAGIC) + frame + 20] ^= 0xFF  # the second entry of the second segment
    victim.write_bytes(bytes(raw))
    again = open_disk(tmp_path)
    assert again.last_index() == first
    assert any("CRC" in line for line in again.report.truncated)
    assert segments(tmp_path) == files[:2]  # later segments deleted
    assert again.entries(1, first + 1) == entries(1, first + 1)


def test_bad_segment_magic_drops_it_and_everything_after(tmp_path: Path) -> None:
    written(tmp_path, entries=entries(1, 41))
    files = segments(tmp_path)
    with open(files[2], "r+b") as f:
        f.write(b"GARBAGE!")
    again = open_disk(tmp_path)
    assert again.last_index() == int(files[2].name.split(".")[0]) - 1
    assert segments(tmp_path) == files[:2]


def test_suffix_truncation_survives_reopen(tmp_path: Path) -> None:
    store = open_disk(tmp_path)
    store.save(entries=entries(1, 41, term=1))
    store.save(entries=entries(7, 9, term=2))
    store.close()
    again = open_disk(tmp_path)
    assert again.last_index() == 8
    assert [again.term(i) for i in (6, 7, 8)] == [1, 2, 2]
    assert len(segments(tmp_path)) == 1


def test_compaction_deletes_covered_segments(tmp_path: Path) -> None:
    store = open_disk(tmp_path)
    store.save(entries=entries(1, 41))
    before = segments(tmp_path)
    store.save(compaction=snap(30, 1))
    after = segments(tmp_path)
    assert len(after) < len(before)
    assert int(after[0].name.split(".")[0]) <= 31
    assert [p.name for p in (tmp_path / "snap").iterdir()] == [
        "00000000000000000030-00000000000000000001.snap"
    ]
    store.close()
    again = open_disk(tmp_path)
    assert (again.first_index(), again.last_index()) == (31, 40)


def test_snapshot_install_survives_reopen(tmp_path: Path) -> None:
    store = open_disk(tmp_path)
    store.save(entries=entries(1, 11))
    store.save(snapshot=snap(100, 7), entries=entries(101, 104, term=7))
    store.close()
    again = open_disk(tmp_path)
    assert (again.first_index(), again.last_index()) == (101, 103)
    assert again.snapshot() == snap(100, 7)


def test_log_that_does_not_continue_the_snapshot_is_discarded(tmp_path: Path) -> None:
    written(tmp_path, entries=entries(1, 11, term=1))
    # A crash after the snapshot file landed but before the old log was deleted, where the old
    # log disagrees with the snapshot at its index.
    (tmp_path / "snap" / "00000000000000000005-00000000000000000009.snap").write_bytes(
        encode_snapshot(snap(5, 9))
    )
    again = open_disk(tmp_path)
    assert (again.first_index(), again.last_index()) == (6, 5)
    assert again.report.truncated


def test_corrupt_snapshot_falls_back_to_an_older_one(tmp_path: Path) -> None:
    store = open_disk(tmp_path)
    store.save(entries=entries(1, 41))
    store.save(compaction=snap(10, 1))
    store.close()
    older = tmp_path / "snap" / "00000000000000000010-00000000000000000001.snap"
    keep = older.read_bytes()
    written(tmp_path, compaction=snap(20, 1))
    older.write_bytes(keep)  # as if deleting it had not reached the disk
    newer = tmp_path / "snap" / "00000000000000000020-00000000000000000001.snap"
    newer.write_bytes(newer.read_bytes()[:-1] + b"\x00")
    again = open_disk(tmp_path)
    assert again.snapshot().index == 10
    assert again.first_index() == 11
    assert newer.with_name(newer.name + ".corrupt").exists()


def test_log_without_its_snapshot_refuses_to_start(tmp_path: Path) -> None:
    store = open_disk(tmp_path)
    store.save(entries=entries(1, 41))
    store.save(compaction=snap(30, 1))
    store.close()
    [only] = (tmp_path / "snap").iterdir()
    only.write_bytes(b"garbage")
    with pytest.raises(CorruptStorage):
        open_disk(tmp_path)


def test_hard_state_is_replaced_atomically(tmp_path: Path) -> None:
    store = open_disk(tmp_path)
    store.save(hard_state=HardState(term=2, vote="n1", commit=0))
    (tmp_path / "hardstate.tmp").write_bytes(b"half written")
    store.close()
    again = open_disk(tmp_path)
    assert again.hard_state() == HardState(term=2, vote="n1", commit=0)
    assert not (tmp_path / "hardstate.tmp").exists()


def test_commit_only_change_is_written_lazily(tmp_path: Path) -> None:
    store = open_disk(tmp_path)
    store.save(entries=entries(1, 6), hard_state=HardState(term=2, vote="n1", commit=1))
    mtime = os.stat(tmp_path / "hardstate").st_mtime_ns
    store.save(hard_state=HardState(term=2, vote="n1", commit=5), sync=False)
    assert os.stat(tmp_path / "hardstate").st_mtime_ns == mtime
    store.close()
    assert open_disk(tmp_path).hard_state().commit == 5


def test_corrupt_hard_state_refuses_to_start(tmp_path: Path) -> None:
    written(tmp_path, hard_state=HardState(term=2, vote="n1", commit=0))
    path = tmp_path / "hardstate"
    raw = bytearray(path.read_bytes())
    raw[20] ^= 0xFF  # the term, in the only slot written
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptStorage, match="CRC mismatch"):
        open_disk(tmp_path)


def test_a_term_or_vote_change_is_one_flush_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An election step (a new term, a vote) makes the hard state durable with one flush of a
    file written in place: no temporary file, no rename, no directory fsync (issue 34: each
    step cost a file created, two fsyncs and a rename on the shared disk)."""
    store = open_disk(tmp_path)
    store.save(entries=entries(1, 3), hard_state=HardState(term=1, vote="n0", commit=0))
    calls: list[str] = []

    def counted(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            return real(*args, **kwargs)

        return call

    for name in ("fsync", "fdatasync", "replace", "rename"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, counted(name, getattr(os, name)))
    store.save(hard_state=HardState(term=2, vote=None, commit=0))
    store.save(hard_state=HardState(term=2, vote="n1", commit=0))
    store.save(hard_state=HardState(term=3, vote="n2", commit=0))
    flushes = [c for c in calls if c in ("fsync", "fdatasync")]
    assert len(flushes) == 3, calls  # one per step
    assert "replace" not in calls and "rename" not in calls, calls
    calls.clear()
    store.save(entries=entries(3, 4, term=4), hard_state=HardState(term=4, vote="n0", commit=0))
    assert len([c for c in calls if c in ("fsync", "fdatasync")]) == 2, calls  # segment + state
    store.close()
    assert open_disk(tmp_path).hard_state() == HardState(term=4, vote="n0", commit=0)


def test_a_damaged_hard_state_slot_is_refused_not_passed_over(tmp_path: Path) -> None:
    """Written in turn into two slots. A damaged newest slot cannot be told from a write torn
    by a power cut; taking the older slot would bring back an older term and vote, after which
    this node could vote a second time in the newer term (two leaders in one term). So the
    store refuses to open, as it refuses a hard state that fails its CRC (docs/operations.md),
    whichever slot is damaged."""
    from storage.raftlog.files import HARD_STATE_SLOT

    store = open_disk(tmp_path)
    store.save(hard_state=HardState(term=5, vote="n2", commit=0))
    store.save(hard_state=HardState(term=6, vote="n3", commit=0))
    store.close()
    path = tmp_path / "hardstate"
    good = path.read_bytes()
    assert len(good) == 2 * HARD_STATE_SLOT
    for slot in (0, 1):
        raw = bytearray(good)
        raw[slot * HARD_STATE_SLOT + 20] ^= 0x01
        path.write_bytes(bytes(raw))
        with pytest.raises(CorruptStorage, match=f"hardstate: slot {slot}: CRC mismatch"):
            open_disk(tmp_path)
    path.write_bytes(good)
    assert open_disk(tmp_path).hard_state() == HardState(term=6, vote="n3", commit=0)


def test_the_first_version_hard_state_file_is_read_and_rewritten(tmp_path: Path) -> None:
    from storage.raftlog.files import HARD_STATE_SLOT, encode_hard_state

    written(tmp_path, entries=entries(1, 3))
    (tmp_path / "hardstate").write_bytes(encode_hard_state(HardState(term=5, vote="n2", commit=2)))
    store = open_disk(tmp_path)
    assert store.hard_state() == HardState(term=5, vote="n2", commit=2)
    store.save(hard_state=HardState(term=6, vote=None, commit=2))
    store.save(hard_state=HardState(term=6, vote="n1", commit=2))
    assert (tmp_path / "hardstate").stat().st_size == 2 * HARD_STATE_SLOT
    store.close()
    assert open_disk(tmp_path).hard_state() == HardState(term=6, vote="n1", commit=2)


def test_snapshot_file_round_trip() -> None:
    s = snap(123, 4, bytes(range(256)))
    assert decode_snapshot(encode_snapshot(s)) == s


def test_disk_storage_matches_its_memory_twin_under_random_operations(tmp_path: Path) -> None:
    import random

    for seed in range(15):
        rng = random.Random(seed)
        path = tmp_path / str(seed)
        disk, mem = open_disk(path), MemoryStorage()
        term = 1
        for _ in range(60):
            roll = rng.random()
            if roll < 0.7:
                start = rng.randint(mem.first_index(), mem.last_index() + 1)
                term += rng.random() < 0.3
                batch = entries(
                    start, start + rng.randint(1, 8), term=term, size=rng.randint(0, 40)
                )
                hs = HardState(term=term, vote=rng.choice([None, "n1"]), commit=0)
                for store in (disk, mem):
                    store.save(entries=batch, hard_state=hs)
            elif roll < 0.9 and mem.last_index() >= mem.first_index():
                at = rng.randint(mem.first_index(), mem.last_index())
                for store in (disk, mem):
                    store.save(compaction=snap(at, mem.term(at)))
            else:
                at = mem.last_index() + rng.randint(1, 20)
                term += 1
                for store in (disk, mem):
                    store.save(snapshot=snap(at, term))
            if rng.random() < 0.2:
                disk.close()
                disk = open_disk(path)
            assert (disk.first_index(), disk.last_index()) == (mem.first_index(), mem.last_index())
            assert disk.snapshot() == mem.snapshot()
            assert (disk.hard_state().term, disk.hard_state().vote) == (
                mem.hard_state().term,
                mem.hard_state().vote,
            )
            if mem.last_index() >= mem.first_index():
                lo, hi = mem.first_index(), mem.last_index() + 1
                assert disk.entries(lo, hi) == mem.entries(lo, hi)
        disk.close()


# --- committed entries are never repaired away -----------------------------------------------


def _tree(path: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()
    }


def test_damage_below_the_commit_index_refuses_and_changes_nothing(tmp_path: Path) -> None:
    written(tmp_path, entries=entries(1, 61), hard_state=HardState(term=2, vote="n0", commit=60))
    files = segments(tmp_path)
    victim = files[len(files) // 2]
    first = int(victim.name.split(".")[0])
    raw = bytearray(victim.read_bytes())
    frame = len(encode_entry(entries(first, first + 1)[0]))
    offset = len(SEGMENT_MAGIC) + frame  # the second entry of that segment
    raw[offset + 20] ^= 0xFF
    victim.write_bytes(bytes(raw))
    before = _tree(tmp_path)
    with pytest.raises(CorruptStorage) as refused:
        open_disk(tmp_path)
    message = str(refused.value)
    assert str(victim) in message
    assert f"offset {offset}" in message
    assert "CRC mismatch" in message
    assert f"entry {first}" in message and "up to 60 are committed" in message
    assert "\n" not in message
    assert _tree(tmp_path) == before  # nothing truncated, removed or set aside


def test_a_missing_tail_segment_below_the_commit_index_refuses(tmp_path: Path) -> None:
    written(tmp_path, entries=entries(1, 41), hard_state=HardState(term=2, vote="n0", commit=40))
    segments(tmp_path)[-1].unlink()
    with pytest.raises(CorruptStorage, match="committed"):
        open_disk(tmp_path)


def test_a_torn_tail_past_the_commit_index_is_still_repaired(tmp_path: Path) -> None:
    written(tmp_path, entries=entries(1, 11), hard_state=HardState(term=2, vote="n0", commit=8))
    last = segments(tmp_path)[-1]
    raw = last.read_bytes()
    last.write_bytes(raw[:-5])  # entry 10 torn: never acknowledged, never committed here
    again = open_disk(tmp_path)
    assert again.last_index() == 9
    assert again.hard_state().commit == 8
    assert any("torn" in line for line in again.report.truncated)


def test_a_term_that_cannot_be_incremented_refuses_to_start(tmp_path: Path) -> None:
    written(tmp_path, hard_state=HardState(term=(1 << 64) - 1, vote=None, commit=0))
    with pytest.raises(CorruptStorage, match="cannot be incremented"):
        open_disk(tmp_path)


def test_the_operator_may_accept_the_loss_explicitly(tmp_path: Path) -> None:
    from storage.raftlog.repair import main as repair

    written(tmp_path, entries=entries(1, 41), hard_state=HardState(term=2, vote="n0", commit=40))
    files = segments(tmp_path)
    victim = files[1]
    first = int(victim.name.split(".")[0])
    raw = bytearray(victim.read_bytes())
    raw[len(SEGMENT_MAGIC) + 20] ^= 0xFF  # the first entry of the second segment
    victim.write_bytes(bytes(raw))
    with pytest.raises(SystemExit):
        repair([str(tmp_path)])  # without --accept-loss: refused by the parser
    with pytest.raises(CorruptStorage):
        open_disk(tmp_path)
    assert repair([str(tmp_path), "--accept-loss"]) == 0
    again = open_disk(tmp_path)
    assert again.last_index() == first - 1
    assert again.hard_state() == HardState(term=2, vote="n0", commit=first - 1)
    assert again.report.truncated == []


def test_the_commit_index_survives_a_crash_of_the_process(tmp_path: Path) -> None:
    store = open_disk(tmp_path)
    store.save(entries=entries(1, 41), hard_state=HardState(term=2, vote="n0", commit=1))
    mtime = os.stat(tmp_path / "hardstate").st_mtime_ns
    store.save(hard_state=HardState(term=2, vote="n0", commit=40), sync=False)
    assert os.stat(tmp_path / "hardstate").st_mtime_ns == mtime  # still no fsync for it
    # kill -9: no close(); what was written is in the page cache.
    again = open_disk(tmp_path)
    assert again.hard_state() == HardState(term=2, vote="n0", commit=40)
    again.close()
    victim = segments(tmp_path)[1]
    raw = bytearray(victim.read_bytes())
    raw[len(SEGMENT_MAGIC) + 20] ^= 0xFF
    victim.write_bytes(bytes(raw))
    with pytest.raises(CorruptStorage, match="up to 40 are committed"):
        open_disk(tmp_path)


def test_a_damaged_commit_hint_is_ignored(tmp_path: Path) -> None:
    store = open_disk(tmp_path)
    store.save(entries=entries(1, 11), hard_state=HardState(term=2, vote="n0", commit=1))
    store.save(hard_state=HardState(term=2, vote="n0", commit=9), sync=False)
    (tmp_path / "commit").write_bytes(b"torn")
    again = open_disk(tmp_path)
    assert again.hard_state().commit == 1 and again.last_index() == 10
    assert any("commit hint" in line for line in again.report.truncated)
