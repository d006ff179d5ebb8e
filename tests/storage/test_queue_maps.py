"""ConsumeQueue segments are mapped while used, at most a limit at once (issue 34: a mapping
holds a file descriptor, so a store with a segment per queue took a descriptor per queue)."""

from __future__ import annotations

import os
from pathlib import Path

from storage.queues import ConsumeQueues
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
    queues = ConsumeQueues(tmp_path / "consumequeue", 4, FileTracker(), mapped_limit=LIMIT)
    queues.load(0, scrub=False)
    for n in range(QUEUES):
        q = queues.get_or_create(f"T{n // 8}", n % 8)
        q.reserve(0, 6)  # two segments of 4 entries
        q.append(0, [100 * n + i for i in range(6)], [10] * 6, [n] * 6)
        assert len(queues.maps) <= LIMIT
    assert descriptors(tmp_path) <= LIMIT
    for n in range(QUEUES):  # each one mapped again to be read
        q = queues.get_or_create(f"T{n // 8}", n % 8)
        assert [q.entry(i) for i in range(6)] == [(100 * n + i, 10, n) for i in range(6)]
    assert len(queues.maps) <= LIMIT
    queues.close()
    assert descriptors(tmp_path) == 0

    again = ConsumeQueues(tmp_path / "consumequeue", 4, FileTracker(), mapped_limit=LIMIT)
    again.load(1 << 40, scrub=False)
    assert len(again) == QUEUES
    assert len(again.maps) <= LIMIT
    assert descriptors(tmp_path) <= LIMIT
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
