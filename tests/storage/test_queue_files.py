"""ConsumeQueue segment files past the mapped ones are kept open, the lately used ones (issue 34:
at 10,000 queues the put's and the pull's CPU a message grew 1.2 to 1.6 times over 1,000 queues,
the rest of it each read's and write's own work past the mapped limit: an open by path, a
pread or pwrite and a close, three system calls and a path lookup where one does).

``storage.consumequeue.SegmentFiles`` keeps at most ``open_files`` of them open (and one spare),
a file not open replacing the least lately used one only when used more often; a segment deleted (retention, a cut, a deleted topic) or closed leaves it
first, and a store's close closes them all. Durability is the flush's as before: the segments
written are marked for it (``FileTracker``) whether their descriptor stays open or not."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from storage.consumequeue import ENTRY, ConsumeQueue
from storage.queues import ConsumeQueues
from storage.tracker import FileTracker
from tests.storage.test_queue_maps import descriptors

LIMIT = 8
"""Segments mapped at most: the first 8 queues' (created mapped), the others' go through the
file."""
QUEUES = 100
"""Queues past the mapped ones."""


def deleted_descriptors(under: Path) -> list[str]:
    """This process's descriptors on files below ``under`` deleted since they were opened."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(f"{under}/") and target.endswith(" (deleted)"):
            found.append(target)
    return found


def filled(store: ConsumeQueues, count: int) -> list[ConsumeQueue]:
    """``LIMIT + count`` queues with one entry each (``1000 * n``); the ``count`` whose
    segments were created unmapped."""
    store.load(0, scrub=False)
    for n in range(LIMIT + count):
        q = store.get_or_create(f"T{n // 8}", n % 8)
        q.reserve(0, 1)
        q.append(0, [1000 * n], [10 + n], [n])
    past = [q for q in store if not q.segments[0].mapped]
    assert len(past) == count and len(store.maps) == LIMIT
    return past


def number(q: ConsumeQueue) -> int:
    return 8 * int(q.topic[1:]) + q.queue_id


def put_and_read(q: ConsumeQueue) -> None:
    """One more entry at the queue's end; it and the whole queue read back."""
    n, at = number(q), q.max_offset
    q.reserve(at, 1)
    q.append(at, [1000 * n + at], [10 + n], [n])
    assert q.entry(at) == (1000 * n + at, 10 + n, n)
    assert [q.entry(i) for i in range(at + 1)] == [(1000 * n + i, 10 + n, n) for i in range(at + 1)]
    assert len(q.read(0, at + 1)) == 20 * (at + 1)


@pytest.fixture
def opens(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[list[str]]:
    """Every ``os.open`` of a file below ``tmp_path`` from now on (the segments' reads and
    writes through the file call it: storage/segment.py is interpreted in both builds)."""
    seen: list[str] = []
    real = os.open

    def counting(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        if str(path).startswith(f"{tmp_path}/"):
            seen.append(str(path))
        return real(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", counting)
    yield seen


def test_queues_used_lately_past_the_mapped_limit_open_no_file(
    tmp_path: Path, opens: list[str]
) -> None:
    """Rounds of a write and reads of the same 100 queues past the mapped limit (the store's
    default of files kept open), whose segments the fill created and wrote: no round opens a
    file. Before, each read and each write opened (and closed) the file."""
    store = ConsumeQueues(tmp_path / "consumequeue", 4, FileTracker(), mapped_limit=LIMIT)
    past = filled(store, QUEUES)
    for r in range(3):  # entries 1 to 3: the first segment of 4
        opens.clear()
        for q in past:
            put_and_read(q)
        assert not opens, (
            f"round {r}: {len(opens)} opens of ConsumeQueue files for the {QUEUES} queues "
            "past the mapped limit"
        )
    assert len(store.files) == QUEUES
    assert descriptors(tmp_path) == LIMIT + QUEUES
    store.close()
    assert descriptors(tmp_path) == 0


def test_more_queues_than_files_kept_open_keep_the_open_ones(
    tmp_path: Path, opens: list[str]
) -> None:
    """100 queues past the mapped limit and 16 files kept open: the descriptors stay within
    the mapped and the open ones (and the spare); the 16 files opened first stay open through
    a pass over all of them, a queue outside them opens its file for its access (as the spare,
    closing none of the 16); every entry reads back, and the segments written stay marked for
    the flush whether their descriptor was closed or not."""
    tracker = FileTracker()
    store = ConsumeQueues(tmp_path / "consumequeue", 4, tracker, mapped_limit=LIMIT, open_files=16)
    past = filled(store, QUEUES)
    tracker.take()
    for q in past:
        put_and_read(q)
        assert len(store.files) <= 16
        assert descriptors(tmp_path) <= LIMIT + 16 + 1
    marked, _ = tracker.take()
    assert {seg.path for seg in marked} == {q.segments[0].path for q in past}
    for seg in marked:
        seg.fsync()  # the flush's fsync by path: the closed ones' too
    opens.clear()
    for q in past[:16]:
        put_and_read(q)
    assert not opens, opens
    put_and_read(past[-2])  # past[-1] is the spare still open from the pass
    assert len(opens) == 1 and len(store.files) == 16
    store.close()
    assert descriptors(tmp_path) == 0

    again = ConsumeQueues(tmp_path / "consumequeue", 4, FileTracker(), mapped_limit=LIMIT)
    again.load(1 << 40, scrub=False)
    for q in past:
        n = number(q)
        loaded = again.get(q.topic, q.queue_id)
        assert loaded is not None and loaded.max_offset == q.max_offset
        assert [loaded.entry(i) for i in range(q.max_offset)] == [
            (1000 * n + i, 10 + n, n) for i in range(q.max_offset)
        ]
    again.close()


def test_passes_over_more_queues_than_files_kept_open_keep_them_open(
    tmp_path: Path, opens: list[str]
) -> None:
    """Passes over 100 queues past the mapped limit in turn, 16 files kept open, each queue a
    write and reads (several reads and writes of its file in a row): from the second pass on
    the 16 kept open are used without an open and each other queue opens its file once, 84
    opens a pass. Least lately used closed, for each queue, the file the pass would want 16
    queues later: every queue opened its file, 100 opens every pass (the bench's puts over
    10,000 queues in turn: an open, the write and a close each, master and slave)."""
    store = ConsumeQueues(
        tmp_path / "consumequeue", 4, FileTracker(), mapped_limit=LIMIT, open_files=16
    )
    past = filled(store, QUEUES)
    for r in range(3):
        opens.clear()
        for q in past:
            put_and_read(q)
        if r:
            assert len(opens) == QUEUES - 16, (
                f"pass {r}: {len(opens)} opens of ConsumeQueue files for {QUEUES} queues past "
                f"the mapped limit in turn, 16 kept open ({QUEUES - 16} expected)"
            )
        assert len(store.files) == 16 and descriptors(tmp_path) <= LIMIT + 16 + 1
    # A queue busier than the ones kept open is taken in: used between two kept ones each time,
    # its count passes that of the least lately used kept one, which is closed for it.
    busy = past[50]
    for i in range(4):
        assert past[i].entry(0)[0] == 1000 * number(past[i])
        assert busy.entry(0)[0] == 1000 * number(busy)
    put_and_read(past[0])  # the spare is another file now
    opens.clear()
    assert busy.read(0, 1) == ENTRY.pack(1000 * number(busy), 10 + number(busy), number(busy))
    assert not opens and len(store.files) == 16
    store.close()
    assert descriptors(tmp_path) == 0


def test_deleted_segments_leave_no_descriptor(tmp_path: Path) -> None:
    """Retention, a cut and a deleted topic close the descriptor of every segment they delete
    and take it out of the files kept open before its file goes: no descriptor keeps a deleted
    file's blocks, and the room it held goes to other files."""
    store = ConsumeQueues(tmp_path / "consumequeue", 4, FileTracker(), mapped_limit=LIMIT)
    past = filled(store, 16)
    for q in past:  # 11 entries: three segments of 4, each one's file kept open
        n = number(q)
        q.reserve(1, 10)
        q.append(1, [1000 * n + i for i in range(1, 11)], [10 + n] * 10, [n] * 10)
        assert q.entry(5) == (1000 * n + 5, 10 + n, n)
        assert q.entry(10) == (1000 * n + 10, 10 + n, n)
    assert descriptors(tmp_path) == LIMIT + 16 * 3

    assert past[0].delete_below(1_000_000) == 2  # retention: two segments go
    assert past[1].truncate_to(2)  # a cut: the two later segments go
    assert not deleted_descriptors(tmp_path)
    assert descriptors(tmp_path) == LIMIT + 16 * 3 - 4
    assert len(store.files) == 16 * 3 - 4  # they left the files kept open too
    doomed = {q.topic for q in past[2:]} - {past[0].topic, past[1].topic}
    for topic in doomed:
        store.retire_topic(topic, {})
    assert not deleted_descriptors(tmp_path)
    left = [q for q in past if q.topic not in doomed]
    assert descriptors(tmp_path) == LIMIT + sum(len(q.segments) for q in left)
    assert len(store.files) == sum(len(q.segments) for q in left)
    store.close()
    assert descriptors(tmp_path) == 0


def test_no_files_kept_open_opens_each_time(tmp_path: Path, opens: list[str]) -> None:
    """``open_files`` 0: each read and write through the file opens it, as before."""
    store = ConsumeQueues(
        tmp_path / "consumequeue", 4, FileTracker(), mapped_limit=LIMIT, open_files=0
    )
    past = filled(store, 4)
    opens.clear()
    for q in past:
        n = number(q)
        assert q.entry(0) == (1000 * n, 10 + n, n)
    assert len(opens) == 4 and len(store.files) == 0
    assert descriptors(tmp_path) == LIMIT
    store.close()
