"""A key index file damaged while the broker runs is rebuilt (issue 31 item 5): the scrub's
check of a sealed file (MessageStore.check_index) finds it, drops it and every later file, and
indexes the CommitLog again from there; lookups by key find every message after."""

from __future__ import annotations

from pathlib import Path

from storage.store import MessageStore
from tests.storage.support import TOPIC, messages, open_store

COUNT = 3000


def keys_found(store: MessageStore) -> int:
    return sum(1 for i in range(0, COUNT, 97) if store.query_by_key(TOPIC, f"k{i}", 0, 1 << 62, 4))


def test_a_damaged_sealed_index_file_is_rebuilt_and_lookups_find_everything(
    tmp_path: Path,
) -> None:
    store = open_store(tmp_path, index_max_entries=1000)
    for batch in range(0, COUNT, 100):
        msgs = messages(100, 40)
        for i, m in enumerate(msgs):
            m.keys = f"k{batch + i}"
        store.put(TOPIC, 0, msgs, 1_700_000_000_000)
    store.flush()
    assert store.index is not None
    files = sorted((tmp_path / "index").iterdir())
    assert len(files) >= 2  # sealed files (1000 entries a file here)
    expected = keys_found(store)
    assert store.check_index() is None  # intact: nothing done
    with files[0].open("r+b") as f:  # a slot of the first (sealed) file
        f.seek(4096 + 17)
        byte = f.read(1)[0]
        f.seek(4096 + 17)
        f.write(bytes([byte ^ 0xFF]))
    reasons = [store.check_index() for _ in range(len(files))]
    assert "body CRC mismatch" in reasons
    assert store.index.stats().rebuilt_files == 1
    assert store.check_index() is None
    assert keys_found(store) == expected
    store.close()
    reopened = open_store(tmp_path, index_max_entries=1000)
    assert reopened.index is not None and reopened.index.stats().rebuilt_files == 0
    assert keys_found(reopened) == expected
    reopened.close()
