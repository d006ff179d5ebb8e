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
