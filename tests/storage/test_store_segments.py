"""On-disk layout and segment rollover: blank tails, segment names, reads across segments."""

from __future__ import annotations

from pathlib import Path

from protocol.message import BLANK_MAGIC, MESSAGE_MAGIC, iter_records, peek_prefix
from storage.store import GetStatus
from tests.storage.support import SEGMENT, TOPIC, commitlog_files, messages, open_store, read_queue

NOW = 1_700_000_000_000


def test_layout_on_disk(tmp_path: Path) -> None:
    store = open_store(tmp_path, consumequeue_segment_entries=50)
    store.put(TOPIC, 2, messages(3), NOW)
    assert (tmp_path / "abort").exists()
    assert (tmp_path / "checkpoint").exists()
    [segment] = commitlog_files(tmp_path)
    assert segment.name == "00000000000000000000"
    assert segment.stat().st_size == SEGMENT  # pre-allocated
    [cq] = sorted((tmp_path / "consumequeue" / TOPIC / "2").iterdir())
    assert cq.name == "00000000000000000000"
    assert cq.stat().st_size == 50 * 20
    entries = cq.read_bytes()
    assert int.from_bytes(entries[0:8], "big") == 0  # CommitLog offset of the first record
    assert int.from_bytes(entries[8:12], "big") > 0  # its size
    assert entries[60:] == bytes(len(entries) - 60)  # unwritten entries are zero
    store.close()
    assert not (tmp_path / "abort").exists()


def test_rollover_writes_a_blank_tail_and_names_the_next_segment(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    ends = []
    while len(commitlog_files(tmp_path)) < 3:
        ends.append(store.put(TOPIC, 0, messages(7, size=1000), NOW).end_offset)
    files = commitlog_files(tmp_path)
    assert [f.name for f in files] == [f"{i * SEGMENT:020d}" for i in range(3)]
    first = files[0].read_bytes()
    last_end_in_first = max(e for e in ends if e <= SEGMENT)
    size, magic = peek_prefix(first, last_end_in_first)
    assert magic == BLANK_MAGIC
    assert last_end_in_first + size == SEGMENT
    assert SEGMENT - last_end_in_first >= 8
    assert peek_prefix(files[1].read_bytes(), 0)[1] == MESSAGE_MAGIC
    # Records never cross a segment: every put lies within one.
    for result in [store.put(TOPIC, 0, messages(7, size=1000), NOW) for _ in range(20)]:
        first_off = result.physical_offsets[0]
        assert first_off // SEGMENT == (result.end_offset - 1) // SEGMENT
    store.close()


def test_get_across_segments_returns_every_message_in_order(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    for i in range(60):
        store.put(TOPIC, i % 2, messages(5, size=700, prefix=f"b{i}-"), NOW)
    assert len(commitlog_files(tmp_path)) > 3
    for queue_id in (0, 1):
        records = read_queue(store, TOPIC, queue_id)
        assert [r.queue_offset for r in records] == list(range(150))
        assert records[5].body.startswith(f"b{2 + queue_id}-0:".encode())
    # One get spanning a segment boundary returns records from both segments.
    result = store.get(TOPIC, 0, 0, 150, 1 << 30)
    assert result.count == 150
    assert len({r.physical_offset // SEGMENT for r in iter_records(result.body)}) > 2
    store.close()


def test_read_raw_stops_at_segment_ends_and_includes_the_blank(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    while store.max_offset < SEGMENT + 5000:
        store.put(TOPIC, 0, messages(3, size=900), NOW)
    chunks = []
    offset = 0
    while offset < store.max_offset:
        chunk = store.read_raw(offset, 10_000)
        assert chunk.nbytes > 0
        chunks.append((offset, chunk.tobytes()))
        offset += chunk.nbytes
    assert offset == store.max_offset
    assert store.read_raw(store.max_offset, 100).nbytes == 0
    for start, data in chunks:
        assert start // SEGMENT == (start + len(data) - 1) // SEGMENT
    blank_chunks = [data for _, data in chunks if peek_prefix(data, len(data) - 8)[1] == 0]
    assert blank_chunks, "the chunk ending the first segment carries its blank tail"
    # Whole records only: every chunk decodes on its own.
    assert sum(len(list(iter_records(data))) for _, data in chunks) == store.queue_max_offset(
        TOPIC, 0
    )
    store.close()


def test_read_raw_returns_at_least_one_record(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    result = store.put(TOPIC, 0, messages(2, size=500), NOW)
    chunk = store.read_raw(0, 1)
    assert chunk.nbytes == result.physical_offsets[1]
    store.close()


def test_consume_queue_rolls_over_its_segments(tmp_path: Path) -> None:
    store = open_store(tmp_path, consumequeue_segment_entries=16)
    for _ in range(10):
        store.put(TOPIC, 0, messages(5), NOW)
    files = sorted((tmp_path / "consumequeue" / TOPIC / "0").iterdir())
    assert [f.name for f in files] == [f"{i * 16 * 20:020d}" for i in range(4)]
    assert [r.queue_offset for r in read_queue(store, TOPIC, 0)] == list(range(50))
    assert store.get(TOPIC, 0, 14, 5, 1 << 20).count == 5
    store.close()
    again = open_store(tmp_path, consumequeue_segment_entries=16)
    assert again.queue_max_offset(TOPIC, 0) == 50
    assert again.get(TOPIC, 0, 49, 5, 1 << 20).status is GetStatus.FOUND
    again.close()


def test_flush_prefaults_the_segment_ahead_of_the_write_position(tmp_path: Path) -> None:
    from storage.segment import Segment

    seg = Segment.create(tmp_path, 0, 1 << 20)
    try:
        assert seg.populate(0, 256 * 1024) is True
        assert bytes(seg.view[:16]) == bytes(16)  # populating never changes content
    finally:
        seg.close()
