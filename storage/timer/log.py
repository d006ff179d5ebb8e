"""The timer log: an append-only, segmented file of fixed-size timer records.

Every scheduled message and every cancel (recall) the timing wheel is told about is one record,
appended in the order the broker dispatches the CommitLog records that carry them. The log is a
**cache**: each record is derived from one CommitLog record (the scheduled message under the
timer system topic, or the recall message), so the broker can rebuild any part of it by
replaying those CommitLog records from :attr:`TimerLog.indexed_through`. Recovery therefore
truncates at the first damaged record instead of refusing to start; what it cut is replayed.

Record layout (48 bytes, big-endian)::

    0  2  magic       0x544D ("TM"); zero marks never-written space
    2  1  kind        1 = schedule, 2 = cancel
    3  1  flags       reserved, 0
    4  4  size        CommitLog record size of the scheduled message (0 for a cancel)
    8  8  due_ms      when the entry is due (epoch ms), after the wheel's clamping
    16 8  offset      CommitLog offset of the scheduled message (for a cancel: its target)
    24 8  source_end  end offset of the CommitLog record this entry came from (replay mark)
    32 8  prev        position of the previous record of the same wheel bucket, -1 if none
    40 4  crc         CRC32 of bytes [0, 40)
    44 4  padding     zero

A position is a byte offset into the log; segments are files named by the position of their
first byte (20 digits, as in :mod:`storage.segment`), pre-allocated and zero-filled, so a record
never straddles two segments (the segment size is a multiple of 48). ``prev`` chains the records
of one coarse bucket of the wheel backwards through the log: the wheel holds one position per
far-future bucket in memory, not one per message.

This module does file I/O but no asyncio, no clock and no sockets.
"""

from __future__ import annotations

import enum
import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import structlog

from storage.errors import StoreError
from storage.segment import Segment, list_segment_files
from storage.small_file import fsync_dir

MAGIC: Final = 0x544D
RECORD: Final = struct.Struct(">HBBiqqqqI4x")
RECORD_SIZE: Final = RECORD.size
_CRC_SPAN: Final = 40
_CRC: Final = struct.Struct(">I")
NO_PREV: Final = -1
DEFAULT_SEGMENT_RECORDS: Final = 1 << 17
"""Records per segment by default: 6 MiB files."""

log = structlog.get_logger(__name__)


class TimerKind(enum.IntEnum):
    SCHEDULE = 1
    CANCEL = 2


@dataclass(frozen=True, slots=True)
class TimerRecord:
    kind: TimerKind
    due_ms: int
    offset: int
    size: int
    source_end: int
    prev: int


@dataclass(frozen=True, slots=True)
class LogRecovery:
    """What :meth:`TimerLog.open` found."""

    records: int
    """Valid records kept."""
    end: int
    """Position after the last kept record."""
    truncated_bytes: int
    """Bytes of damaged or unreachable records cut off (0 after a clean tail)."""
    reason: str
    """Why the tail was cut ('' when nothing was)."""


def encode_record(rec: TimerRecord) -> bytes:
    raw = bytearray(
        RECORD.pack(
            MAGIC, rec.kind, 0, rec.size, rec.due_ms, rec.offset, rec.source_end, rec.prev, 0
        )
    )
    _CRC.pack_into(raw, _CRC_SPAN, zlib.crc32(raw[:_CRC_SPAN]))
    return bytes(raw)


def decode_record(raw: bytes | memoryview) -> TimerRecord | None:
    """The record in ``raw`` (exactly :data:`RECORD_SIZE` bytes), or None if torn or corrupt."""
    magic, kind, flags, size, due, offset, source_end, prev, crc = RECORD.unpack(raw)
    if magic != MAGIC or flags != 0 or zlib.crc32(raw[:_CRC_SPAN]) != crc:
        return None
    if (
        kind not in (TimerKind.SCHEDULE, TimerKind.CANCEL)
        or size < 0
        or offset < 0
        or prev < NO_PREV
    ):
        return None
    return TimerRecord(TimerKind(kind), due, offset, size, source_end, prev)


class TimerLog:
    """The segment files of one timer log. Not thread-safe: one owner calls every method."""

    __slots__ = ("_dirty", "directory", "end", "segment_bytes", "segments")

    def __init__(self, directory: Path, *, segment_records: int = DEFAULT_SEGMENT_RECORDS) -> None:
        if segment_records <= 0:
            raise ValueError("segment_records must be positive")
        self.directory = directory
        self.segment_bytes = segment_records * RECORD_SIZE
        self.segments: list[Segment] = []
        self.end = 0
        """Position the next record is written at."""
        self._dirty: set[Segment] = set()

    @property
    def start(self) -> int:
        """Position of the first record still on disk (records below it were deleted)."""
        return self.segments[0].start if self.segments else self.end

    # -- opening and recovery ----------------------------------------------------------------

    def open(self) -> LogRecovery:
        """Map the segment files and find the end: the first never-written or damaged record.

        Everything from a damaged record on is zeroed (later segments deleted) and reported, as
        are valid-looking records after a hole: a crash can persist a later page and lose an
        earlier one, and a record after a hole may point (``prev``) into it. The broker replays
        the CommitLog from :attr:`indexed_through` to put back what was cut.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        found = list_segment_files(self.directory)
        full = max((path.stat().st_size for _, path in found), default=0)
        segments: list[Segment] = []
        for start, path in found:
            if path.stat().st_size < full:
                # Cut short (a torn copy or a truncated file): give it back its zero-filled
                # length so the scan below finds the torn record and cuts the log there.
                os.truncate(path, full)
            seg = Segment.open(path, start)
            if (
                seg.size % RECORD_SIZE
                or start % RECORD_SIZE
                or (segments and start != segments[-1].end)
            ):
                seg.close()
                for s in segments:
                    s.close()
                raise StoreError(f"timer log segment {path} has a bad size or name")
            segments.append(seg)
        self.segments = segments
        if not segments:
            self.end = 0
            return LogRecovery(records=0, end=0, truncated_bytes=0, reason="")
        self.segment_bytes = segments[-1].size
        records = 0
        end = segments[0].start
        reason = ""
        for seg in segments:
            view = seg.view
            stop = None
            for rel in range(0, seg.size, RECORD_SIZE):
                raw = view[rel : rel + RECORD_SIZE]
                if raw[0] == 0 and raw[1] == 0:
                    stop = rel
                    break
                if decode_record(raw) is None:
                    stop = rel
                    reason = f"damaged record at position {seg.start + rel}"
                    break
                records += 1
            if stop is None:
                end = seg.end
                continue
            end = seg.start + stop
            break
        truncated = self._cut(end)
        if truncated and not reason:
            reason = f"records after a hole at position {end}"
        if truncated:
            log.warning(
                f"timer log {self.directory}: cut {truncated} bytes at {end}: {reason}",
                directory=str(self.directory),
                position=end,
            )
        self.end = end
        return LogRecovery(records=records, end=end, truncated_bytes=truncated, reason=reason)

    def _cut(self, end: int) -> int:
        """Zero everything at and past ``end``; the count of non-zero bytes that held."""
        cut = 0
        keep: list[Segment] = []
        for seg in self.segments:
            if seg.start >= end and keep:
                cut += _nonzero(seg.view, 0, seg.size)
                seg.unlink()
                seg.close()
                continue
            keep.append(seg)
            lo = max(0, end - seg.start)
            if lo < seg.size:
                n = _nonzero(seg.view, lo, seg.size)
                if n:
                    cut += n
                    seg.zero(lo, seg.size)
                    self._dirty.add(seg)
        if cut:
            self.segments = keep
            self.flush()
        return cut

    # -- reading ----------------------------------------------------------------------------

    def read(self, pos: int) -> TimerRecord:
        seg = self._segment(pos)
        if seg is None or pos >= self.end or (pos - seg.start) % RECORD_SIZE:
            raise StoreError(f"timer log has no record at position {pos}")
        rel = pos - seg.start
        rec = decode_record(seg.view[rel : rel + RECORD_SIZE])
        if rec is None:
            raise StoreError(f"timer log record at position {pos} is damaged")
        return rec

    def scan(self, start: int | None = None) -> Iterator[tuple[int, TimerRecord]]:
        """(position, record) of every record from ``start`` (default: the first) to the end."""
        pos = self.start if start is None else max(start, self.start)
        for seg in list(self.segments):
            if seg.end <= pos:
                continue
            hi = min(seg.end, self.end) - seg.start
            lo = pos - seg.start
            if hi <= lo:
                break
            chunk = bytes(seg.view[lo:hi])
            at = seg.start + lo
            for i in range(0, len(chunk), RECORD_SIZE):
                raw = chunk[i : i + RECORD_SIZE]
                _, kind, _, size, due, offset, source_end, prev, crc = RECORD.unpack(raw)
                if zlib.crc32(raw[:_CRC_SPAN]) != crc:
                    raise StoreError(f"timer log record at position {at + i} is damaged")
                yield at + i, TimerRecord(TimerKind(kind), due, offset, size, source_end, prev)
            pos = seg.start + hi

    def _segment(self, pos: int) -> Segment | None:
        if not self.segments or pos < self.segments[0].start:
            return None
        n = (pos - self.segments[0].start) // self.segment_bytes
        return self.segments[n] if n < len(self.segments) else None

    # -- writing ----------------------------------------------------------------------------

    def append(self, rec: TimerRecord) -> int:
        """Write ``rec`` after the last record; its position. May raise DiskFullError."""
        if not self.segments or self.end >= self.segments[-1].end:
            seg = Segment.create(self.directory, self.end, self.segment_bytes)
            self.segments.append(seg)
            fsync_dir(self.directory)
        seg = self.segments[-1]
        pos = self.end
        rel = pos - seg.start
        seg.view[rel : rel + RECORD_SIZE] = encode_record(rec)
        self._dirty.add(seg)
        self.end = pos + RECORD_SIZE
        return pos

    def flush(self) -> None:
        """Make every record appended so far durable."""
        dirty, self._dirty = self._dirty, set()
        for seg in dirty:
            seg.fsync()

    def delete_segments_below(self, pos: int) -> int:
        """Delete whole segments lying entirely below ``pos`` (never the last); how many."""
        deleted = 0
        while len(self.segments) > 1 and self.segments[0].end <= pos:
            seg = self.segments.pop(0)
            self._dirty.discard(seg)
            seg.unlink()
            seg.close()
            deleted += 1
        if deleted:
            fsync_dir(self.directory)
        return deleted

    def close(self) -> None:
        self.flush()
        for seg in self.segments:
            seg.close()
        self.segments = []


def _nonzero(view: memoryview, lo: int, hi: int) -> int:
    """Bytes of the records of ``view[lo:hi]`` (``lo`` record-aligned) up to and including the
    last one holding a non-zero byte."""
    held = len(bytes(view[lo:hi]).rstrip(b"\0"))
    return -(-held // RECORD_SIZE) * RECORD_SIZE
