"""ConsumeQueue segments are mapped while used, at most a limit at once (issue 34: a mapping
holds a file descriptor, so a store with a segment per queue took a descriptor per queue)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from storage.errors import StoreError
from storage.queues import ConsumeQueues
from storage.segment import Segment
from storage.tracker import FileTracker

QUEUES = 200
LIMIT = 8


def descriptors(under: Path) -> int:
    """This process's open descriptors on files below ``under`` (the store's own: the test
    process may hold others, which earlier tests' garbage or threads close at any time)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed since the listing
        if target.startswith(f"{under}/"):
            count += 1
    return count


def test_more_queues_than_mappings_write_read_and_load_again(tmp_path: Path) -> None:
    assert descriptors(tmp_path) == 0
    # LIMIT mapped, and as many files kept open past them and a spare (test_queue_files.py).
    queues = ConsumeQueues(
        tmp_path / "consumequeue", 4, FileTracker(), mapped_limit=LIMIT, open_files=LIMIT
    )
    queues.load(0, scrub=False)
    for n in range(QUEUES):
        q = queues.get_or_create(f"T{n // 8}", n % 8)
        q.reserve(0, 6)  # two segments of 4 entries
        q.append(0, [100 * n + i for i in range(6)], [10] * 6, [n] * 6)
        assert len(queues.maps) <= LIMIT
    assert descriptors(tmp_path) <= 2 * LIMIT + 1
    for n in range(QUEUES):  # each one mapped again to be read
        q = queues.get_or_create(f"T{n // 8}", n % 8)
        assert [q.entry(i) for i in range(6)] == [(100 * n + i, 10, n) for i in range(6)]
    assert len(queues.maps) <= LIMIT
    queues.close()
    assert descriptors(tmp_path) == 0

    again = ConsumeQueues(
        tmp_path / "consumequeue", 4, FileTracker(), mapped_limit=LIMIT, open_files=LIMIT
    )
    again.load(1 << 40, scrub=False)
    assert len(again) == QUEUES
    assert len(again.maps) <= LIMIT
    assert descriptors(tmp_path) <= 2 * LIMIT + 1
    for n in range(QUEUES):
        q = again.get_or_create(f"T{n // 8}", n % 8)
        assert (q.min_offset, q.max_offset) == (0, 6)
        q.reserve(6, 1)
        q.append(6, [100 * n + 6], [10], [n])
        assert q.read(5, 2) == q.read(5, 1) + q.read(6, 1)
        assert q.truncate_to(3)
        assert q.max_offset == 3
    assert len(again.maps) <= LIMIT
    again.close()


def mapped_files(queues: ConsumeQueues) -> set[Path]:
    """The files of the queues' segments mapped now."""
    return {seg.path for q in queues for seg in q.segments if seg.mapped}


def test_writes_past_the_limit_map_no_segment_and_write_the_same_bytes(tmp_path: Path) -> None:
    """Puts over ten times as many queues as may be mapped, in turn (the 10x column of
    bench/scale_bench.py's brokers: 10,000 queues, 4,096 mapped): each put mapped its queue's
    segment and unmapped another's. Now a write maps a segment only while there is room and
    writes the others through the file; the files hold the same bytes as a store that keeps
    every segment mapped, and open again the same."""
    queues = 10 * LIMIT
    limited = ConsumeQueues(tmp_path / "limited", 4, FileTracker(), mapped_limit=LIMIT)
    roomy = ConsumeQueues(tmp_path / "roomy", 4, FileTracker(), mapped_limit=10 * queues)
    for store in (limited, roomy):
        store.load(0, scrub=False)

    def put(store: ConsumeQueues, n: int, count: int) -> None:
        q = store.get_or_create(f"T{n // 8}", n % 8)
        first = q.max_offset
        q.reserve(first, count)
        offsets = [1000 * n + first + i for i in range(count)]
        q.append(first, offsets, [10 + n] * count, [n] * count)

    for n in range(queues):  # each queue's first segment: the first LIMIT created mapped
        put(limited, n, 1)
        put(roomy, n, 1)
    held = mapped_files(limited)
    assert 0 < len(held) <= LIMIT
    # In turn, the other way round, batches of 1 to 6 entries (segments of 4: later
    # segments created, batches across two segments).
    for count in (1, 2, 6, 1):
        for n in reversed(range(queues)):
            put(limited, n, count)
            put(roomy, n, count)
            assert mapped_files(limited) == held, f"queue {n}: a put mapped a segment"
    assert len(roomy.maps) > LIMIT  # the roomy store wrote through its mappings

    roomy_root = tmp_path / "roomy"
    files = sorted(p.relative_to(roomy_root) for p in roomy_root.rglob("*") if p.is_file())
    assert len(files) == queues * 3  # 11 entries: three segments of 4 a queue
    for rel in files:
        assert (tmp_path / "limited" / rel).read_bytes() == (tmp_path / "roomy" / rel).read_bytes()
    for n in range(queues):
        a = limited.get_or_create(f"T{n // 8}", n % 8)
        b = roomy.get_or_create(f"T{n // 8}", n % 8)
        assert a.read(0, 11) == b.read(0, 11)
        assert [a.entry(i) for i in range(11)] == [(1000 * n + i, 10 + n, n) for i in range(11)]
    limited.close()
    roomy.close()

    again = ConsumeQueues(tmp_path / "limited", 4, FileTracker(), mapped_limit=LIMIT)
    again.load(1 << 40, scrub=False)
    for n in range(queues):
        q = again.get_or_create(f"T{n // 8}", n % 8)
        assert (q.min_offset, q.max_offset) == (0, 11)
        assert [q.entry(i) for i in range(11)] == [(1000 * n + i, 10 + n, n) for i in range(11)]
    again.close()


def test_reads_past_the_limit_map_no_segment_and_read_the_same(tmp_path: Path) -> None:
    """Reads over ten times as many queues as may be mapped, in turn (consumers pulling 10,000
    queues with 4,096 mapped; the offset searches, the visible max offset and retention go
    through the same entries): each read of a queue whose segment was not mapped mapped it and
    unmapped another's. Now a read maps a segment only while there is room and reads the
    others through the file, the same entries as a store that keeps every segment mapped.
    A deleted queue's segments leave the count, so the room they held is used again."""
    queues = 10 * LIMIT
    limited = ConsumeQueues(tmp_path / "limited", 4, FileTracker(), mapped_limit=LIMIT)
    roomy = ConsumeQueues(tmp_path / "roomy", 4, FileTracker(), mapped_limit=10 * queues)
    for store in (limited, roomy):
        store.load(0, scrub=False)
        for n in range(queues):  # 11 entries: three segments of 4 a queue
            q = store.get_or_create(f"T{n // 8}", n % 8)
            q.reserve(0, 11)
            q.append(0, [1000 * n + i for i in range(11)], [10 + n] * 11, [n] * 11)
    held = mapped_files(limited)
    assert 0 < len(held) <= LIMIT
    assert len(roomy.maps) > LIMIT

    for n in reversed(range(queues)):  # the other way round from the writes
        a = limited.get_or_create(f"T{n // 8}", n % 8)
        b = roomy.get_or_create(f"T{n // 8}", n % 8)
        assert a.read(0, 11) == b.read(0, 11)
        assert a.read(3, 6) == b.read(3, 6)  # across two segments
        assert a.read(9, 5) == b.read(9, 5)  # clipped to the max offset
        assert [a.entry(i) for i in range(13)] == [b.entry(i) for i in range(13)]
        assert a.entry(12) == (0, 0, 0)  # past the segments
        assert a.first_at_or_after(1000 * n + 6) == b.first_at_or_after(1000 * n + 6) == 6
        assert mapped_files(limited) == held, f"queue {n}: a read mapped a segment"

    # Retention reads each queue's segments' last entries (and searches for the new min).
    assert limited.delete_below(1000 * queues) == roomy.delete_below(1000 * queues) == 2 * queues
    for n in range(queues):
        a = limited.get_or_create(f"T{n // 8}", n % 8)
        b = roomy.get_or_create(f"T{n // 8}", n % 8)
        assert (a.min_offset, a.max_offset) == (b.min_offset, b.max_offset) == (11, 11)
        assert a.entry(10) == b.entry(10) == (1000 * n + 10, 10 + n, n)
    # The deleted segments left the count: the room they held went to the segments read next.
    now = mapped_files(limited)
    assert len(now) == len(limited.maps) == LIMIT and now != held

    limited.retire_topic("T0", {})  # a deleted topic's segments leave the count too
    assert len(limited.maps) == LIMIT - len({p for p in now if p.parent.parent.name == "T0"})
    left = len(limited.maps)
    assert left < LIMIT
    q = next(q for q in limited if not q.segments[-1].mapped)
    n = 8 * int(q.topic[1:]) + q.queue_id
    assert q.entry(10) == (1000 * n + 10, 10 + n, n)
    assert q.segments[-1].mapped  # there is room: mapped
    assert len(limited.maps) == left + 1
    limited.close()
    roomy.close()


def test_a_read_through_the_file_refuses_what_the_segment_does_not_hold(tmp_path: Path) -> None:
    """Segment.read: outside the segment, or a file cut shorter than the segment, is a clear
    StoreError (a mapping would have raised SIGBUS on the cut file)."""
    seg = Segment.create(tmp_path, 0, 80, mapped=False)
    seg.write(20, b"x" * 20)
    assert seg.read(20, 20) == b"x" * 20
    assert seg.read(0, 20) == bytes(20)
    with pytest.raises(StoreError, match="outside segment"):
        seg.read(70, 20)
    os.truncate(seg.path, 50)
    with pytest.raises(StoreError, match="short read"):
        seg.read(40, 20)
    seg.path.unlink()
    with pytest.raises(StoreError, match="cannot read"):
        seg.read(0, 20)


def test_a_load_past_the_limit_finds_the_same_end_and_holes(tmp_path: Path) -> None:
    """A queue's load maps its first segment and reads the rest as any read does: past the
    limit through the file. The end and a damaged (zeroed) entry inside the queue are found
    as by a store that maps every segment."""
    for name in ("limited", "roomy"):
        queues = ConsumeQueues(tmp_path / name, 4, FileTracker(), mapped_limit=100)
        queues.load(0, scrub=False)
        for n in range(2):  # 11 entries: three segments of 4
            q = queues.get_or_create("T", n)
            q.reserve(0, 11)
            q.append(0, [1000 * n + i for i in range(11)], [10] * 11, [n] * 11)
        queues.close()
        with open(tmp_path / name / "T" / "1" / "00000000000000000080", "r+b") as f:
            f.seek(2 * 20)  # entry 6, in the second segment: the load's binary search sees it
            f.write(bytes(20))
    limited = ConsumeQueues(tmp_path / "limited", 4, FileTracker(), mapped_limit=1)
    roomy = ConsumeQueues(tmp_path / "roomy", 4, FileTracker(), mapped_limit=100)
    for store in (limited, roomy):
        store.load(1 << 40, scrub=False)
    for n in range(2):
        a = limited.get_or_create("T", n)
        b = roomy.get_or_create("T", n)
        assert (a.min_offset, a.max_offset, a.holes) == (b.min_offset, b.max_offset, b.holes)
        assert (a.max_offset, a.holes) == (11, [6] if n else [])
        assert a.read(0, 11) == b.read(0, 11)
    one = limited.get_or_create("T", 1)
    assert [seg.mapped for seg in one.segments] == [True, False, False]  # read through the file
    limited.close()
    roomy.close()
