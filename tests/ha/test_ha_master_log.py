"""The master's view of its log (StoreMasterLog) read from a real store."""

from __future__ import annotations

from pathlib import Path

from broker.ha.master_server import StoreMasterLog
from protocol.message import Message
from storage.epoch_file import EpochFile
from storage.store import MessageStore, StoreConfig

SEGMENT = 64 * 1024
NOW = 1_700_000_000_000


def test_last_file_start_is_the_start_of_the_segment_the_next_write_goes_into(
    tmp_path: Path,
) -> None:
    store = MessageStore(
        StoreConfig(data_dir=tmp_path, commitlog_segment_bytes=SEGMENT, max_message_bytes=4096)
    )
    store.open()
    try:
        log = StoreMasterLog(store, EpochFile(tmp_path), lambda: 0)
        assert log.last_file_start == 0  # no segment yet
        batch = [Message(topic="T", body=b"x" * 1000) for _ in range(8)]
        while len(store.commitlog_segments()) < 3:
            store.put("T", 0, batch, NOW)
        last_start = store.commitlog_segments()[-1][0]
        assert last_start == 2 * SEGMENT < store.max_offset
        assert log.last_file_start == last_start
        # The log ends exactly where its last segment ends: the next write starts a segment.
        store.truncate(last_start)
        assert store.commitlog_segments()[-1][1] == store.max_offset
        assert log.last_file_start == store.max_offset == last_start
    finally:
        store.close()
