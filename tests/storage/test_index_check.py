"""A key index file damaged while the broker runs is rebuilt (issue 31 item 5): the scrub's
check of a sealed file (StoreRepair.check_index) finds it, drops it and every later file, and
the CommitLog is indexed again from there, in slices (StoreRepair.rebuild_index: the broker's
loop serves between them) or whole by a lookup; lookups by key find every message after."""

from __future__ import annotations

from pathlib import Path

from storage.store import MessageStore
from tests.storage.support import TOPIC, messages, open_store

COUNT = 3000


def keys_found(store: MessageStore, count: int = COUNT) -> int:
    return sum(1 for i in range(0, count, 97) if store.query_by_key(TOPIC, f"k{i}", 0, 1 << 62, 4))


def put_keyed(store: MessageStore, first: int, count: int) -> None:
    """``count`` messages keyed k<first>.., in batches of 100."""
    for batch in range(first, first + count, 100):
        msgs = messages(100, 40)
        for i, m in enumerate(msgs):
            m.keys = f"k{batch + i}"
        store.put(TOPIC, 0, msgs, 1_700_000_000_000)


def damaged_first_file(tmp_path: Path) -> tuple[MessageStore, list[Path]]:
    """A store of COUNT keyed messages whose first (sealed) key index file has a slot damaged."""
    store = open_store(tmp_path, index_max_entries=1000)
    put_keyed(store, 0, COUNT)
    store.flush()
    assert store.index is not None
    files = sorted((tmp_path / "index").iterdir())
    assert len(files) >= 2  # sealed files (1000 entries a file here)
    assert store.repairs.check_index() is None  # intact: nothing done
    with files[0].open("r+b") as f:  # a slot of the first (sealed) file
        f.seek(4096 + 17)
        byte = f.read(1)[0]
        f.seek(4096 + 17)
        f.write(bytes([byte ^ 0xFF]))
    return store, files


def test_a_damaged_sealed_index_file_is_rebuilt_and_lookups_find_everything(
    tmp_path: Path,
) -> None:
    store, files = damaged_first_file(tmp_path)
    assert store.index is not None
    expected = COUNT // 97 + 1
    reasons = [store.repairs.check_index() for _ in range(len(files))]
    assert "body CRC mismatch" in reasons
    assert store.index.stats().rebuilt_files == 1
    assert store.repairs.check_index() is None
    assert keys_found(store) == expected
    store.close()
    reopened = open_store(tmp_path, index_max_entries=1000)
    assert reopened.index is not None and reopened.index.stats().rebuilt_files == 0
    assert keys_found(reopened) == expected
    reopened.close()


def test_the_rebuild_runs_in_slices_and_indexes_what_was_put_meanwhile(tmp_path: Path) -> None:
    # The scrub rebuilds a damaged file a slice at a time on the broker's loop (requests are
    # served between slices), not in one go: each slice indexes about the bytes asked for;
    # puts meanwhile leave their records to the slices.
    store, _files = damaged_first_file(tmp_path)
    index = store.index
    assert index is not None
    while store.repairs.check_index() is None:
        pass
    assert index.behind
    put_keyed(store, COUNT, 300)  # not indexed by the puts: the slices read them
    through = index.indexed_through
    starts = {start for start, _end in store.commitlog_segments()}
    slices = 0
    while not store.repairs.rebuild_index(4096):
        slices += 1
        # One record past at most, or on past a segment's blank tail to the next segment.
        moved = index.indexed_through - through
        assert 0 < moved <= 4096 + 200 or index.indexed_through in starts, moved
        through = index.indexed_through
    assert not index.behind and index.indexed_through == store.max_offset
    assert slices > 10
    assert keys_found(store, COUNT + 300) == (COUNT + 300 - 1) // 97 + 1
    put_keyed(store, COUNT + 300, 100)  # puts index again
    assert index.indexed_through == store.max_offset
    store.close()
