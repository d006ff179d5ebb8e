"""Far-future entries live on disk: a million of them leave the process's memory bounded."""

from __future__ import annotations

import gc
import random
from pathlib import Path

from storage.timer.wheel import DAY_MS, TimingWheel, WheelConfig

T0 = 1_700_000_000_000
COUNT = 1_000_000
MIB = 1 << 20


def rss_anon() -> int:
    """Anonymous resident memory (the heap; not the timer log's file-backed mapping)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no RssAnon in /proc/self/status")


def test_a_million_far_future_entries_keep_memory_bounded(tmp_path: Path) -> None:
    config = WheelConfig()  # 1 s slots, 60 s buckets, 40 days
    wheel = TimingWheel(tmp_path, T0, config)
    rng = random.Random(5)
    # Delivery times are drawn before measuring: the list is the test's, not the wheel's.
    times = [T0 + rng.randrange(3_600_000, 40 * DAY_MS) for _ in range(COUNT)]
    gc.collect()
    before = rss_anon()
    schedule = wheel.schedule
    for i, at in enumerate(times):
        schedule(at, i * 1024, 1024, T0)
    gc.collect()
    grown = rss_anon() - before
    # The design's bound: one timer log position per non-empty 60 s bucket (at most 57,600
    # over 40 days, ~100 bytes each with dict and heap slots) and one key per log segment;
    # nothing per message. Holding a million entries would take well over 100 MiB.
    buckets = 40 * DAY_MS // config.bucket_ms
    assert wheel.near_count == 0
    assert wheel.far_buckets <= buckets
    assert wheel.log.end == COUNT * 48
    assert grown < 24 * MIB, f"memory grew {grown / MIB:.1f} MiB for {COUNT} far entries"
    print(f"\n{COUNT} far entries: RssAnon +{grown / MIB:.1f} MiB, {wheel.far_buckets} buckets")
    # They are all there: the first bucket loads from disk when its time comes.
    first = min(times)
    got = wheel.due(first)
    assert [e.due_ms for e in got] == [first] * times.count(first)
    wheel.close()
