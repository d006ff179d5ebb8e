"""The timer log as files: records round-trip, segments roll, and recovery cuts a torn tail."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from storage.errors import StoreError
from storage.segment import list_segment_files
from storage.timer.log import (
    NO_PREV,
    RECORD_SIZE,
    LogRecovery,
    TimerKind,
    TimerLog,
    TimerRecord,
    decode_record,
    encode_record,
)

PER_SEGMENT = 10


def rec(i: int, kind: TimerKind = TimerKind.SCHEDULE) -> TimerRecord:
    return TimerRecord(kind, 1_000 + i, i * 100, 100, i * 100 + 100, i - 1 if i else NO_PREV)


def write(directory: Path, count: int) -> list[TimerRecord]:
    log = TimerLog(directory, segment_records=PER_SEGMENT)
    assert log.open().records == 0
    records = [rec(i) for i in range(count)]
    for i, r in enumerate(records):
        assert log.append(r) == i * RECORD_SIZE
    log.close()
    return records


def opened(directory: Path) -> tuple[TimerLog, LogRecovery]:
    """The log in ``directory`` opened, and what its open found."""
    log = TimerLog(directory, segment_records=PER_SEGMENT)
    return log, log.open()


def reopen(directory: Path) -> tuple[TimerLog, list[TimerRecord]]:
    log, _ = opened(directory)
    return log, [r for _, r in log.scan()]


def records_on_reopen(directory: Path) -> list[TimerRecord]:
    """Every record a new open of the log in ``directory`` finds (it is closed again)."""
    log, got = reopen(directory)
    log.close()
    return got


def segment_path(directory: Path, pos: int) -> tuple[Path, int]:
    """The segment file holding position ``pos`` and ``pos`` relative to it."""
    start = pos - pos % (PER_SEGMENT * RECORD_SIZE)
    return directory / f"{start:020d}", pos - start


def test_encode_decode_round_trip_and_checks() -> None:
    r = TimerRecord(TimerKind.CANCEL, 3_456_000_000_000, 7, 0, 99, 48)
    raw = encode_record(r)
    assert len(raw) == RECORD_SIZE == 48
    assert decode_record(raw) == r
    for i in range(40):  # any flipped byte under the CRC is caught
        bad = bytearray(raw)
        bad[i] ^= 0x01
        assert decode_record(bytes(bad)) is None, i


def test_records_survive_reopen_across_segments(tmp_path: Path) -> None:
    records = write(tmp_path, 35)
    assert len(list_segment_files(tmp_path)) == 4
    log, got = reopen(tmp_path)
    assert got == records
    assert log.read(12 * RECORD_SIZE) == records[12]
    assert log.end == 35 * RECORD_SIZE
    assert log.append(rec(35)) == 35 * RECORD_SIZE
    log.close()


def test_torn_last_record_is_cut_and_reported(tmp_path: Path) -> None:
    write(tmp_path, 15)
    path, rel = segment_path(tmp_path, 14 * RECORD_SIZE)
    with path.open("r+b") as f:  # a write that reached the disk only halfway
        f.seek(rel + RECORD_SIZE // 2)
        f.write(bytes(RECORD_SIZE // 2))
    log, report = opened(tmp_path)
    assert report.records == 14
    assert report.end == 14 * RECORD_SIZE
    assert report.truncated_bytes > 0
    assert "damaged record at position 672" in report.reason
    assert [r for _, r in log.scan()] == [rec(i) for i in range(14)]
    # The space is writable again and the next open finds a clean log.
    assert log.append(rec(14)) == 14 * RECORD_SIZE
    log.close()
    assert records_on_reopen(tmp_path) == [rec(i) for i in range(15)]


def test_file_truncated_mid_record(tmp_path: Path) -> None:
    write(tmp_path, 15)
    path, rel = segment_path(tmp_path, 13 * RECORD_SIZE)
    os.truncate(path, rel + 20)
    log, report = opened(tmp_path)
    assert (report.records, report.end) == (13, 13 * RECORD_SIZE)
    assert report.truncated_bytes == RECORD_SIZE  # the torn record
    assert path.stat().st_size == PER_SEGMENT * RECORD_SIZE
    log.close()


def test_flipped_byte_cuts_everything_after_it(tmp_path: Path) -> None:
    write(tmp_path, 25)
    path, rel = segment_path(tmp_path, 7 * RECORD_SIZE)
    with path.open("r+b") as f:
        f.seek(rel + 10)
        byte = f.read(1)
        f.seek(rel + 10)
        f.write(bytes([byte[0] ^ 0x40]))
    log, report = opened(tmp_path)
    assert (report.records, report.end) == (7, 7 * RECORD_SIZE)
    assert report.truncated_bytes == 25 * RECORD_SIZE - 7 * RECORD_SIZE
    # Later segments are gone: the cut is final, not hidden behind a hole.
    assert len(list_segment_files(tmp_path)) == 1
    log.close()
    assert records_on_reopen(tmp_path) == [rec(i) for i in range(7)]


def test_records_after_a_hole_are_cut(tmp_path: Path) -> None:
    write(tmp_path, 8)
    path, rel = segment_path(tmp_path, 5 * RECORD_SIZE)
    with path.open("r+b") as f:  # a crash kept a later page but lost this one
        f.seek(rel)
        f.write(bytes(RECORD_SIZE))
    log, report = opened(tmp_path)
    assert (report.records, report.end) == (5, 5 * RECORD_SIZE)
    assert report.truncated_bytes > 0
    assert "hole" in report.reason
    log.close()


def test_bad_segment_layout_is_refused(tmp_path: Path) -> None:
    write(tmp_path, 25)
    (tmp_path / f"{PER_SEGMENT * RECORD_SIZE:020d}").unlink()  # a gap between segments
    with pytest.raises(StoreError, match="bad size or name"):
        TimerLog(tmp_path, segment_records=PER_SEGMENT).open()


def test_delete_segments_below_keeps_the_last(tmp_path: Path) -> None:
    write(tmp_path, 25)
    log, _ = opened(tmp_path)
    assert log.delete_segments_below(15 * RECORD_SIZE) == 1
    assert log.start == 10 * RECORD_SIZE
    assert [r for _, r in log.scan()] == [rec(i) for i in range(10, 25)]
    assert log.delete_segments_below(10**9) == 1
    assert len(log.segments) == 1
    log.close()
    log, got = reopen(tmp_path)
    assert got == [rec(i) for i in range(20, 25)]
    assert log.start == 20 * RECORD_SIZE
    log.close()
