"""Retention hands a deleted segment's unmapping to a worker thread (issue 34, the log sizes):
unmapping a deleted file frees its page cache, which took 1.1 s for a 1 GiB CommitLog segment on
the development machine, and the broker runs retention on its event loop (past the 1 s write
lease a master is fenced). The test records which thread unmaps each segment retention deletes
(a structural check: an earlier version compared the caller's time with a reference unmap's and
failed under load)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from protocol.message import Message
from storage import tracker
from storage.segment import Segment
from tests.storage.support import open_store

SEGMENT = 64 << 20
HOUR = 3_600_000


def test_deleting_an_expired_segment_does_not_unmap_it_on_the_callers_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    unmapped: list[tuple[Path, str]] = []
    unmap_now = Segment._unmap_now

    def recording(segment: Segment) -> None:
        unmapped.append((segment.path, threading.current_thread().name))
        unmap_now(segment)

    store = open_store(tmp_path / "store", commitlog_segment_bytes=SEGMENT)
    body = os.urandom(8 * 1024)
    batch = [Message(topic="T", body=body) for _ in range(64)]
    now = int(time.time() * 1000)
    try:
        while store.max_offset < SEGMENT + 4096:  # a whole segment written, the next begun
            store.put("T", 0, batch, now)
        store.flush()
        monkeypatch.setattr(Segment, "_unmap_now", recording)
        deleted = store.delete_expired(now + 100 * HOUR, disk_used_ratio=0.0)
        tracker._UNMAPPER.submit(lambda: None).result(timeout=60)  # the handed-off unmaps done
        retired = list(unmapped)
    finally:
        store.close()
    assert deleted == 1
    commitlog = [(p, name) for p, name in retired if "commitlog" in p.parts]
    assert len(commitlog) == 1, retired
    caller = threading.current_thread().name
    assert all(name != caller and name.startswith("unmap") for _, name in retired), retired
