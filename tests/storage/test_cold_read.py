"""Telling a cold read from a hot one (storage/cold_read.py): mincore on the segment's mapping
against pages really evicted from the page cache (POSIX_FADV_DONTNEED on a file no process
maps), RocketMQ's distance rule, and the spans a read would copy."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import pytest

from protocol.message import iter_records
from storage.cold_read import (
    ColdSpan,
    DistanceResidency,
    MincoreResidency,
    cold_spans,
    read_spans,
)
from storage.segment import Segment
from tests.storage.support import SEGMENT, TOPIC, messages, open_store
from tests.support.page_cache import evict

NOW = 1_700_000_100_000
SIZE = 32 * 1024 * 1024  # past the read-around of a fault (the device readahead, 8 MiB here)


@pytest.fixture
def mincore() -> MincoreResidency:
    probe = MincoreResidency.load()
    if probe is None:
        pytest.skip("no mincore(2) here")
    return probe


def test_mincore_tells_evicted_pages_from_cached_ones(
    tmp_path: Path, mincore: MincoreResidency
) -> None:
    path = tmp_path / f"{0:020d}"
    path.write_bytes(os.urandom(SIZE))
    evict(path)
    seg = Segment.open(path, 1000)
    try:
        assert not mincore.resident(seg, 1000, 1000 + 4096)
        bytes(seg.view[SIZE - 16384 : SIZE - 8192])  # pages faulted in through the mapping
        assert mincore.resident(seg, 1000 + SIZE - 16384, 1000 + SIZE - 8192)
        assert mincore.resident(seg, 1000 + SIZE - 16000, 1000 + SIZE - 15000)  # within a page
        # The mapping's read-around (the device's readahead) may have loaded more; the start of
        # the file, untouched, stays out.
        assert not mincore.resident(seg, 1000, 1000 + 4096)
        # How far from the start nothing is cached: up to the first page read around the fault.
        until = mincore.cold_until(seg, 1000, 1000 + SIZE)
        assert 1000 < until <= 1000 + SIZE - 16384 and (until - 1000) % mmap.PAGESIZE == 0
        assert not mincore.resident(seg, 1000, until)
        assert mincore.resident(seg, until, until + 1)
        assert mincore.cold_until(seg, 1000, 1000 + 4096) == 1000 + 4096  # none cached in it
        assert mincore.cold_until(seg, until + 10, until + 4096) == until + 10
    finally:
        seg.close()
    # The probe released the mapping: the segment closed, and a closed one is left to the read.
    assert seg.closed
    assert mincore.resident(seg, 1000, 2000)


def test_distance_rule_is_rocketmqs_share_of_memory() -> None:
    write_pos = [10_000]
    rule = DistanceResidency(lambda: write_pos[0], memory_bytes=1000, ratio=0.4)
    seg = Segment.__new__(Segment)  # the rule looks at offsets only
    assert rule.resident(seg, 9_600, 9_700)
    assert rule.cold_until(seg, 9_000, 9_700) == 9_600
    assert not rule.resident(seg, 9_599, 9_700)
    write_pos[0] = 20_000
    assert not rule.resident(seg, 9_600, 9_700)


def drop_cached(seg: Segment) -> None:
    """What dropping the page cache does to a segment this process maps: its pages leave this
    process's page tables (the data is in the file) and then the cache."""
    seg.fsync()
    seg._mm.madvise(mmap.MADV_DONTNEED)
    evict(seg.path)


def test_a_reads_spans_are_the_bytes_its_get_copies_and_cold_until_loaded(
    tmp_path: Path, mincore: MincoreResidency
) -> None:
    store = open_store(tmp_path / "data")
    try:
        for i in range(40):  # 40 puts of 10 records of ~1 KiB over several 64 KiB segments
            store.put(TOPIC, 0, messages(10, 1000, prefix=f"p{i}-"), NOW)
            store.put(TOPIC, 1, messages(2, 1000), NOW)
        for seg in store._commitlog.segments:
            drop_cached(seg)
        queue = store._queues.get(TOPIC, 0)
        assert queue is not None
        commitlog = store._commitlog
        runs = read_spans(queue, commitlog, 5, 32, 1 << 20, None, None, 0)
        exact = cold_spans(runs, mincore, commitlog.write_pos, ahead=0)
        spans = store.cold_spans(TOPIC, 0, 5, 32, 1 << 20)
        got = store.get(TOPIC, 0, 5, 32, 1 << 20)
        assert got.count == 32
        # Queue 1's records lie between queue 0's runs: a span per run, adding up to the body.
        assert len(exact) == len(runs) > 1
        assert sum(span.size for span in exact) == len(got.body)
        first = next(iter(iter_records(got.body)))
        seg_start = int(exact[0].path.name)
        assert exact[0] == ColdSpan(exact[0].path, first.physical_offset - seg_start, exact[0].size)
        # With the read-ahead: a span per segment, from the first run to the segment's end
        # (the next segment's from its first run).
        assert [s.path for s in spans] == list(dict.fromkeys(s.path for s in exact))
        assert spans[0].position == exact[0].position
        assert spans[0].position + spans[0].size == SEGMENT
        for span in spans[1:]:
            assert span.position + span.size in (SEGMENT, commitlog.write_pos - int(span.path.name))
        # The get read those pages through the mapping: now hot, nothing to load.
        assert store.cold_spans(TOPIC, 0, 5, 32, 1 << 20) == []
        # Past the end, or an unknown queue: nothing.
        assert store.cold_spans(TOPIC, 0, 400, 32, 1 << 20) == []
        assert store.cold_spans("Nope", 0, 0, 32, 1 << 20) == []
    finally:
        store.close()


def test_spans_keep_to_the_reads_limits_and_tag_hashes(tmp_path: Path) -> None:
    store = open_store(tmp_path / "data")
    try:
        store.put(TOPIC, 0, messages(20, 1000, tag="A"), NOW)
        store.put(TOPIC, 0, messages(20, 1000, tag="B"), NOW)
        queue = store._queues.get(TOPIC, 0)
        assert queue is not None
        commitlog = store._commitlog

        def total(**kw: object) -> tuple[int, int]:
            args: dict[str, object] = {
                "max_count": 32,
                "max_bytes": 1 << 20,
                "max_physical_offset": None,
                "tag_hashes": None,
                "entries_to_scan": 0,
            }
            args.update(kw)
            spans = read_spans(queue, commitlog, 0, **args)  # type: ignore[arg-type]
            return len(spans), sum(hi - lo for _, lo, hi in spans)

        def body(count: int, max_bytes: int = 1 << 20) -> int:
            return len(store.get(TOPIC, 0, 0, count, max_bytes).body)

        assert total()[1] == body(32)
        assert total(max_count=5)[1] == body(5)
        assert total(max_bytes=body(3))[1] == body(3)
        assert total(max_bytes=body(3) - 1)[1] == body(2)
        assert total(max_bytes=1)[1] == body(1)  # at least one record, as the get
        b_hash = queue.entry(20)[2]
        b_only = store.get(TOPIC, 0, 0, 32, 1 << 20, None, frozenset({b_hash}), 64)
        assert total(tag_hashes=frozenset({b_hash}), entries_to_scan=64)[1] == len(b_only.body)
        visible = store.get(TOPIC, 0, 0, 32, 1 << 20, body(10))
        assert visible.count == 10
        assert total(max_physical_offset=body(10))[1] == len(visible.body)
    finally:
        store.close()
