"""Retention: which CommitLog segments to delete, oldest first.

A segment goes when its newest record is older than the retention period, or while the disk is
fuller than allowed. The segment being written is never deleted, and only a prefix of the log
is, so the log stays contiguous.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from storage.segment import Segment


@dataclass(frozen=True, slots=True)
class DiskUsage:
    used_ratio: float
    total_bytes: int


def disk_usage(path: Path) -> DiskUsage:
    """How full the file system holding ``path`` is (space usable by unprivileged writers)."""
    st = os.statvfs(path)
    total = st.f_blocks * st.f_frsize
    available = st.f_bavail * st.f_frsize
    if total <= 0:
        return DiskUsage(0.0, 0)
    return DiskUsage((total - available) / total, total)


def segments_to_delete(
    segments: Sequence[Segment],
    newest_timestamps: Mapping[int, int],
    *,
    now_ms: int,
    retention_ms: int,
    used_ratio: float,
    max_used_ratio: float,
    total_bytes: int,
    keep_from: int | None = None,
) -> int:
    """How many segments, from the oldest, retention deletes now.

    Deleting a segment is assumed to free its size, so a disk over its limit loses only as many
    segments as bring it under (all but the newest if the estimate never gets there). An
    expired segment holding offset ``keep_from`` or later (scheduled messages not delivered
    yet) is kept; only a disk over its limit deletes it.
    """
    count = 0
    ratio = used_ratio
    for seg in segments[:-1]:
        expired = newest_timestamps.get(seg.start, 0) < now_ms - retention_ms
        if expired and keep_from is not None and seg.end > keep_from:
            expired = False
        if not (expired or ratio > max_used_ratio):
            break
        count += 1
        if total_bytes > 0:
            ratio -= seg.size / total_bytes
    return count
