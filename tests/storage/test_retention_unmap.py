"""Retention hands a deleted segment's unmapping to a worker thread (issue 34, the log sizes):
unmapping a deleted file frees its page cache, which took 1.1 s for a 1 GiB CommitLog segment on
the development machine, and the broker runs retention on its event loop (past the 1 s write
lease a master is fenced). The caller's time is measured against unmapping a file of the same
size, pages in the cache, done here."""

from __future__ import annotations

import mmap
import os
import time
from pathlib import Path

from protocol.message import Message
from tests.storage.support import open_store

SEGMENT = 256 << 20
HOUR = 3_600_000


def unmap_cost(path: Path) -> float:
    """Seconds to unmap a deleted file of SEGMENT bytes, every page written through the map."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    os.posix_fallocate(fd, 0, SEGMENT)
    mm = mmap.mmap(fd, SEGMENT)
    os.close(fd)
    for i in range(0, SEGMENT, mmap.PAGESIZE):
        mm[i] = 1
    path.unlink()
    t0 = time.perf_counter()
    mm.close()
    return time.perf_counter() - t0


def test_deleting_an_expired_segment_does_not_unmap_it_on_the_callers_thread(
    tmp_path: Path,
) -> None:
    store = open_store(tmp_path / "store", commitlog_segment_bytes=SEGMENT)
    body = os.urandom(8 * 1024)
    batch = [Message(topic="T", body=body) for _ in range(64)]
    now = int(time.time() * 1000)
    try:
        while store.max_offset < SEGMENT + 4096:  # a whole segment written, the next begun
            store.put("T", 0, batch, now)
        store.flush()
        t0 = time.perf_counter()
        deleted = store.delete_expired(now + 100 * HOUR, disk_used_ratio=0.0)
        took = time.perf_counter() - t0
    finally:
        store.close()
    assert deleted == 1
    reference = unmap_cost(tmp_path / "reference")
    assert took < reference / 3, (took, reference)
