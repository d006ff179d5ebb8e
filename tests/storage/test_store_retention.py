"""Retention: by age and by disk usage, whole segments from the oldest, never the current one."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from storage import retention
from storage.store import GetStatus, MessageStore
from tests.storage.support import SEGMENT, TOPIC, commitlog_files, messages, open_store, read_queue

HOUR = 3_600_000
T0 = 1_700_000_000_000


def fill_segments(store: MessageStore, segments: int) -> list[int]:
    """Fill ``segments`` segments, one put per second; returns each segment's newest timestamp."""
    newest: dict[int, int] = {}
    i = 0
    while store.max_offset < (segments - 1) * SEGMENT + 100:
        ts = T0 + i * 1000
        result = store.put(TOPIC, i % 2, messages(4, size=1000), ts)
        newest[result.physical_offsets[0] // SEGMENT] = ts
        i += 1
    return [newest[k] for k in sorted(newest)]


def test_expired_segments_are_deleted_and_queue_min_moves(tmp_path: Path) -> None:
    store = open_store(tmp_path, retention_hours=1, consumequeue_segment_entries=8)
    newest = fill_segments(store, 4)
    # Segments 0 and 1 are older than an hour; segment 2 is not.
    deleted = store.delete_expired(newest[1] + HOUR + 1, disk_used_ratio=0.1)
    assert deleted == 2
    assert [f.name for f in commitlog_files(tmp_path)] == [
        f"{2 * SEGMENT:020d}",
        f"{3 * SEGMENT:020d}",
    ]
    assert store.min_offset == 2 * SEGMENT
    for queue_id in (0, 1):
        low = store.queue_min_offset(TOPIC, queue_id)
        assert low > 0
        too_small = store.get(TOPIC, queue_id, 0, 10, 1 << 20)
        assert (too_small.status, too_small.next_offset) == (GetStatus.OFFSET_TOO_SMALL, low)
        records = read_queue(store, TOPIC, queue_id, start=low)
        assert records[0].physical_offset >= 2 * SEGMENT
        assert [r.queue_offset for r in records] == list(
            range(low, store.queue_max_offset(TOPIC, queue_id))
        )
        # ConsumeQueue segments wholly below the new CommitLog start are gone.
        first_cq = sorted((tmp_path / "consumequeue" / TOPIC / str(queue_id)).iterdir())[0]
        assert int(first_cq.name) // 20 > low - 8
    assert store.delete_expired(newest[1] + HOUR + 1, disk_used_ratio=0.1) == 0
    store.close()


def test_the_segment_being_written_is_never_deleted(tmp_path: Path) -> None:
    store = open_store(tmp_path, retention_hours=1)
    fill_segments(store, 3)
    assert store.delete_expired(T0 + 1000 * HOUR, disk_used_ratio=1.0) == 2
    assert len(commitlog_files(tmp_path)) == 1
    assert store.delete_expired(T0 + 1000 * HOUR, disk_used_ratio=1.0) == 0
    store.put(TOPIC, 0, messages(1), T0)
    assert store.queue_max_offset(TOPIC, 0) == store.queue_min_offset(TOPIC, 0) + len(
        read_queue(store, TOPIC, 0, start=store.queue_min_offset(TOPIC, 0))
    )
    store.close()


def test_a_full_disk_deletes_young_segments_oldest_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(tmp_path, retention_hours=72, disk_max_used_ratio=0.85)
    newest = fill_segments(store, 5)
    now = newest[-1]
    monkeypatch.setattr(
        retention, "disk_usage", lambda _path: retention.DiskUsage(0.5, 10 * SEGMENT)
    )
    assert store.delete_expired(now) == 0  # young and room to spare
    # 0.97 full: each deleted segment frees a tenth of this tiny disk.
    assert store.delete_expired(now, disk_used_ratio=0.97) == 2
    assert store.min_offset == 2 * SEGMENT
    monkeypatch.setattr(
        retention, "disk_usage", lambda _path: retention.DiskUsage(0.9, 10 * SEGMENT)
    )
    assert store.delete_expired(now) == 1  # measured when not given
    assert store.min_offset == 3 * SEGMENT
    store.close()


def test_segment_ages_are_recovered_after_a_restart(tmp_path: Path) -> None:
    store = open_store(tmp_path, retention_hours=1)
    newest = fill_segments(store, 4)
    store.close()
    again = open_store(tmp_path, retention_hours=1)
    assert again.delete_expired(newest[0] + HOUR, disk_used_ratio=0.1) == 0
    assert again.delete_expired(newest[0] + HOUR + 1, disk_used_ratio=0.1) == 1
    assert again.delete_expired(newest[2] + HOUR + 1, disk_used_ratio=0.1) == 2
    again.close()


def test_reopen_after_retention_keeps_the_remaining_log(tmp_path: Path) -> None:
    store = open_store(tmp_path, retention_hours=1)
    newest = fill_segments(store, 4)
    store.delete_expired(newest[1] + HOUR + 1, disk_used_ratio=0.1)
    expected = {
        q: read_queue(store, TOPIC, q, start=store.queue_min_offset(TOPIC, q)) for q in (0, 1)
    }
    mins = {q: store.queue_min_offset(TOPIC, q) for q in (0, 1)}
    store.close()
    again = open_store(tmp_path, retention_hours=1)
    assert again.min_offset == 2 * SEGMENT
    assert {q: again.queue_min_offset(TOPIC, q) for q in (0, 1)} == mins
    assert {q: read_queue(again, TOPIC, q, start=mins[q]) for q in (0, 1)} == expected
    again.close()
    # Rebuilding ConsumeQueues from a log whose start was deleted: queues start mid-way.
    shutil.rmtree(tmp_path / "consumequeue")
    third = open_store(tmp_path, retention_hours=1)
    assert {q: third.queue_min_offset(TOPIC, q) for q in (0, 1)} == mins
    assert {q: read_queue(third, TOPIC, q, start=mins[q]) for q in (0, 1)} == expected
    assert third.get(TOPIC, 0, 0, 1, 100).status is GetStatus.OFFSET_TOO_SMALL
    third.close()


def test_keep_from_holds_expired_segments_unless_the_disk_is_too_full(tmp_path: Path) -> None:
    store = open_store(tmp_path, retention_hours=1)
    newest = fill_segments(store, 4)
    # An offset in segment 1 must stay (a scheduled message not delivered yet): only segment 0
    # goes by age, though segments 0 to 2 expired.
    late = newest[2] + HOUR + 1
    assert store.delete_expired(late, disk_used_ratio=0.1, keep_from=SEGMENT + 10) == 1
    assert store.min_offset == SEGMENT
    assert store.delete_expired(late, disk_used_ratio=0.1, keep_from=SEGMENT + 10) == 0
    assert store.delete_expired(late, disk_used_ratio=0.1, keep_from=None) == 2
    store.close()


def test_keep_from_yields_to_a_full_disk(tmp_path: Path) -> None:
    store = open_store(tmp_path, retention_hours=1)
    newest = fill_segments(store, 3)
    assert store.delete_expired(newest[0] + HOUR + 1, disk_used_ratio=0.99, keep_from=0) == 2
    store.close()
