"""ConsumeQueue segments are sparse and given their blocks ahead of the writes, a chunk at a time.

A queue's first segment was allocated in full (``posix_fallocate`` of ``entries`` x 20 bytes,
6 MB at the production 300,000 entries) however few messages it held: 1,500 nearly empty queues
used 8.4 GB a replica. Now a segment is created at its full length as a hole and
:meth:`storage.segment.Segment.allocate` gives it blocks in chunks (``allocate_bytes``, 64 KiB)
before entries are written there, so a full disk still fails at a ``posix_fallocate``
(DiskFullError, nothing written), never at a write through the mapping (SIGBUS)."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from storage.consumequeue import ALLOCATE_BYTES, ENTRY_SIZE
from storage.errors import DiskFullError, StoreError
from storage.segment import Segment
from storage.store import MessageStore
from storage.store_config import StoreConfig
from tests.storage.support import TOPIC, crash_copy, messages, open_store, read_queue

NOW = 1_700_000_000_000
ENTRIES = 300_000
"""The production segment: 6 MB."""
PER_CHUNK = ALLOCATE_BYTES // ENTRY_SIZE


def on_disk(path: Path) -> int:
    """Bytes the file system gave ``path`` (or every file under it): blocks, not sizes."""
    if path.is_file():
        return path.stat().st_blocks * 512
    return sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file())


def queue_dir(data: Path, topic: str = TOPIC, queue_id: int = 0) -> Path:
    return data / "consumequeue" / topic / str(queue_id)


def recorded(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Every ``posix_fallocate`` (offset, length) from now on, still made."""
    calls: list[tuple[int, int]] = []
    real = os.posix_fallocate

    def record(fd: int, offset: int, length: int) -> None:
        calls.append((offset, length))
        real(fd, offset, length)

    monkeypatch.setattr(os, "posix_fallocate", record)
    return calls


def no_space(fd: int, offset: int, length: int) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_segment_allocates_whole_chunks_once(tmp_path: Path) -> None:
    size = ENTRIES * ENTRY_SIZE
    seg = Segment.create(tmp_path, 0, size, allocate=0)
    try:
        assert seg.path.stat().st_size == size  # its full length: a hole
        assert on_disk(seg.path) == 0
        assert seg.allocate(0, ENTRY_SIZE, ALLOCATE_BYTES)
        assert on_disk(seg.path) == ALLOCATE_BYTES
        assert (seg.alloc_lo, seg.alloc_hi) == (0, ALLOCATE_BYTES)
        # Inside the chunk: nothing asked of the file system.
        assert not seg.allocate(ENTRY_SIZE, ALLOCATE_BYTES, ALLOCATE_BYTES)
        # Crossing into the next chunk: that one, the range known grows.
        assert seg.allocate(ALLOCATE_BYTES - 20, ALLOCATE_BYTES + 20, ALLOCATE_BYTES)
        assert (seg.alloc_lo, seg.alloc_hi) == (0, 2 * ALLOCATE_BYTES)
        assert on_disk(seg.path) == 2 * ALLOCATE_BYTES
        # The last chunk stops at the segment's end.
        assert seg.allocate(size - 20, size, ALLOCATE_BYTES)
        # Not contiguous with the first range: the newest range is the one known.
        assert seg.alloc_lo == size - size % ALLOCATE_BYTES
        assert seg.alloc_hi == size
        # A chunk not a multiple of the page size is rounded up to one.
        assert seg.allocate(3 * ALLOCATE_BYTES + 1, 3 * ALLOCATE_BYTES + 2, 1000)
        assert (seg.alloc_hi - seg.alloc_lo) % os.sysconf("SC_PAGE_SIZE") == 0
        # What was written reads back; the holes read as zeros, through the mapping and the file.
        seg.view[0:4] = b"abcd"
        assert bytes(seg.view[0:8]) == b"abcd\0\0\0\0"
        assert seg.read(size - 4096, 4096) == bytes(4096)
        assert bytes(seg.view[5 * ALLOCATE_BYTES : 5 * ALLOCATE_BYTES + 64]) == bytes(64)
    finally:
        seg.close()


def test_full_allocation_is_the_default(tmp_path: Path) -> None:
    """The CommitLog's segments (and the timer's, the index's) are allocated in full."""
    seg = Segment.create(tmp_path, 0, 1 << 20)
    try:
        assert on_disk(seg.path) >= 1 << 20
        assert (seg.alloc_lo, seg.alloc_hi) == (0, 1 << 20)
        assert not seg.allocate(0, 1 << 20, ALLOCATE_BYTES)
    finally:
        seg.close()


def test_segment_allocate_names_the_file_on_a_full_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seg = Segment.create(tmp_path, 0, 1 << 20, allocate=0)
    try:
        monkeypatch.setattr(os, "posix_fallocate", no_space)
        with pytest.raises(
            DiskFullError, match=f"no space to allocate 65536 bytes at 0 of {seg.path}"
        ):
            seg.allocate(0, 20, ALLOCATE_BYTES)
        assert (seg.alloc_lo, seg.alloc_hi) == (0, 0)
    finally:
        seg.close()


def test_a_one_message_queue_uses_one_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(
        tmp_path, consumequeue_segment_entries=ENTRIES, commitlog_segment_bytes=1 << 24
    )
    store.put(TOPIC, 0, messages(1), NOW)  # the CommitLog's segment and the index's file
    calls = recorded(monkeypatch)
    for t in range(20):
        store.put(f"Sparse{t}", 0, messages(1), NOW)
    store.flush()
    for t in range(20):
        path = next(queue_dir(tmp_path, f"Sparse{t}").iterdir())
        assert path.stat().st_size == ENTRIES * ENTRY_SIZE
        assert on_disk(path) <= ALLOCATE_BYTES, path
    # One fallocate a queue, of its first chunk only.
    assert calls == [(0, ALLOCATE_BYTES)] * 20
    store.close()


def test_blocks_come_a_chunk_ahead_of_the_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(
        tmp_path,
        consumequeue_segment_entries=ENTRIES,
        commitlog_segment_bytes=1 << 24,
        index_enable=False,  # its files, allocated in full, would roll too
    )
    store.put("Other", 0, messages(1), NOW)  # the CommitLog's segment
    calls = recorded(monkeypatch)
    written = 0
    while written < 2 * PER_CHUNK + 10:
        store.put(TOPIC, 0, messages(500, size=10), NOW)
        written += 500
        path = next(queue_dir(tmp_path).iterdir())
        # Every entry written lies in an allocated chunk; no more than the chunk it ends in.
        chunks = -(-written * ENTRY_SIZE // ALLOCATE_BYTES)
        assert on_disk(path) == chunks * ALLOCATE_BYTES, written
    assert calls == [(i * ALLOCATE_BYTES, ALLOCATE_BYTES) for i in range(3)]
    store.close()


def test_a_full_disk_at_the_next_chunk_refuses_the_put_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(
        tmp_path, consumequeue_segment_entries=ENTRIES, commitlog_segment_bytes=1 << 24
    )
    while store.queue_max_offset(TOPIC, 0) + 100 <= PER_CHUNK:
        store.put(TOPIC, 0, messages(100, size=10), NOW)
    end, queue_end = store.max_offset, store.queue_max_offset(TOPIC, 0)
    before = read_queue(store, TOPIC, 0)
    path = next(queue_dir(tmp_path).iterdir())
    with monkeypatch.context() as m:
        m.setattr(os, "posix_fallocate", no_space)
        with pytest.raises(DiskFullError, match=str(path)):
            store.put(TOPIC, 0, messages(100, size=10), NOW)
        with pytest.raises(DiskFullError):
            store.put("Fresh", 0, messages(1), NOW)
        assert store.topics() == [TOPIC]  # the queue that got no block is not listed
        assert not queue_dir(tmp_path, "Fresh").exists() or not any(
            queue_dir(tmp_path, "Fresh").iterdir()
        )
        assert store.max_offset == end
        assert store.queue_max_offset(TOPIC, 0) == queue_end
        assert read_queue(store, TOPIC, 0) == before  # reads go on
        # Puts that fit in the chunk allocated go on.
        room = PER_CHUNK - queue_end
        store.put(TOPIC, 0, messages(room, size=10), NOW)
        assert store.queue_max_offset(TOPIC, 0) == PER_CHUNK
        assert on_disk(path) == ALLOCATE_BYTES
    store.put(TOPIC, 0, messages(100, size=10), NOW)
    store.put("Fresh", 0, messages(1), NOW)
    assert len(read_queue(store, TOPIC, 0)) == PER_CHUNK + 100
    store.close()
    again = open_store(tmp_path, consumequeue_segment_entries=ENTRIES)
    assert again.queue_max_offset(TOPIC, 0) == PER_CHUNK + 100
    assert len(read_queue(again, "Fresh", 0)) == 1
    again.close()


def test_reopened_queues_read_their_holes_as_zeros(tmp_path: Path) -> None:
    """A clean start and one after kill -9 (scrubbing past the trusted entries) find each sparse
    queue's end in its hole, and the next put after either allocates where it writes."""
    store = open_store(tmp_path / "live", consumequeue_segment_entries=ENTRIES)
    for t in range(5):
        store.put(f"Q{t}", 0, messages(t + 1), NOW)
    store.flush()
    crashed = crash_copy(store, tmp_path / "crashed")
    store.put("Q0", 0, messages(2), NOW)  # not flushed: replayed after the crash
    crashed_late = crash_copy(store, tmp_path / "crashed-late")
    store.close()
    for data, q0 in ((tmp_path / "live", 3), (crashed, 1), (crashed_late, 3)):
        again = open_store(data, consumequeue_segment_entries=ENTRIES)
        assert [again.queue_max_offset(f"Q{t}", 0) for t in range(5)] == [q0, 2, 3, 4, 5], data
        again.put("Q1", 0, messages(1), NOW)
        assert [r.queue_offset for r in read_queue(again, "Q1", 0)] == [0, 1, 2]
        again.close()
    for t in range(5):  # (the copies are not sparse: copytree wrote their holes)
        assert on_disk(queue_dir(tmp_path / "live", f"Q{t}")) <= ALLOCATE_BYTES, t


def test_a_replica_allocates_as_it_replays(tmp_path: Path) -> None:
    master = open_store(tmp_path / "master", consumequeue_segment_entries=ENTRIES)
    slave = open_store(tmp_path / "slave", consumequeue_segment_entries=ENTRIES)
    for t in range(30):
        master.put(f"R{t}", 0, messages(2), NOW)
    slave.append_raw(0, master.read_raw(0, master.max_offset))
    for t in range(30):
        assert read_queue(slave, f"R{t}", 0) == read_queue(master, f"R{t}", 0)
        assert on_disk(queue_dir(tmp_path / "slave", f"R{t}")) <= ALLOCATE_BYTES
    slave.close()
    master.close()


@pytest.mark.parametrize("bad", [0, 1000, 4097])
def test_the_chunk_must_be_whole_pages(tmp_path: Path, bad: int) -> None:
    with pytest.raises(StoreError, match="consumequeue_allocate_bytes"):
        MessageStore(StoreConfig(data_dir=tmp_path, consumequeue_allocate_bytes=bad)).open()


def test_a_configured_chunk(tmp_path: Path) -> None:
    store = open_store(
        tmp_path, consumequeue_segment_entries=ENTRIES, consumequeue_allocate_bytes=8192
    )
    store.put(TOPIC, 0, messages(1), NOW)
    store.flush()
    assert on_disk(queue_dir(tmp_path)) == 8192
    store.close()


_ON_TMPFS = """
import os, sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from tests.storage.support import messages, open_store
data = Path(sys.argv[1]) / "data"
store = open_store(data, consumequeue_segment_entries=300_000)
for t in range(5):
    store.put(f"T{t}", 0, messages(1), 1_700_000_000_000)
store.flush()
store.close()
for _ in range(2):  # after a clean stop, then as after a crash (the abort marker: a scrub)
    again = open_store(data, consumequeue_segment_entries=300_000)
    assert [again.queue_max_offset(f"T{t}", 0) for t in range(5)] == [1] * 5
    again.close()
    (data / "abort").write_text("")
used = [sum(p.stat().st_blocks * 512 for p in (data / "consumequeue" / f"T{t}").rglob("*"))
        for t in range(5)]
print(used)
"""


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare"
)
def test_opening_a_queue_reads_no_page_of_its_hole(tmp_path: Path) -> None:
    """On tmpfs a read of a hole through a mapping takes a page (of memory, counted as the
    file's blocks): the open of a queue searches for its end only where the file holds data
    (SEEK_DATA), so it reads no page of the hole; before, the binary search over the whole
    segment read about 18 pages of it, and a full tmpfs would fault there (SIGBUS)."""
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    root = Path(__file__).resolve().parents[2]
    script = tmp_path / "on_tmpfs.py"
    script.write_text(_ON_TMPFS)
    done = subprocess.run(
        [
            "unshare", "--mount", "--propagation", "private", "sh", "-c",
            f'mount -t tmpfs -o size=64m tmpfs "{mount}" && exec "$@"', "sh",
            sys.executable, str(script), str(mount), str(root),
        ],
        capture_output=True, text=True, timeout=120, cwd=root,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    last = done.stdout.strip().splitlines()[-1]  # after the store's log lines
    used = [int(n) for n in last.strip("[]").split(",")]
    assert used == [ALLOCATE_BYTES] * 5, used
