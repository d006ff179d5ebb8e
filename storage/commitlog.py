"""The CommitLog: contiguous pre-allocated segments of records, and the write position.

Segment files live in ``<data_dir>/commitlog/`` named by their 20-digit start offset. Records
never cross a segment: when a batch does not fit in what is left (keeping at least 8 bytes for
a blank record), the tail is covered by a blank record and writing rolls to the next segment.
Bytes past the write position are always zero.
"""

from __future__ import annotations

import bisect
import os
import struct
from pathlib import Path
from typing import Final

import structlog

from protocol.message import BLANK_MAGIC, MESSAGE_MAGIC, RecordError, check_record, encode_blank
from storage.dispatch import BLANK_MIN, store_timestamp
from storage.errors import MessageTooLargeError, StoreError
from storage.segment import Segment, list_segment_files
from storage.tracker import FileTracker

_U32: Final = struct.Struct(">I")
_BLANK_MAGIC_RAW: Final = _U32.pack(BLANK_MAGIC)
_MESSAGE_MAGIC_RAW: Final = _U32.pack(MESSAGE_MAGIC)
_MAX_LAST_RECORD_PROBES: Final = 256

log = structlog.get_logger(__name__)


class CommitLog:
    def __init__(self, directory: Path, segment_bytes: int, tracker: FileTracker) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        self._tracker = tracker
        self.segments: list[Segment] = []
        self._starts: list[int] = []
        self.write_pos = 0
        # Newest store timestamp per segment start (retention by age).
        self.max_timestamps: dict[int, int] = {}
        self._warmed_to = 0
        self._warm_ok = True
        self.repaired: list[tuple[int, int]] = []
        """(offset, size) of each missing range :meth:`load` zero-filled."""

    # -- loading ---------------------------------------------------------------------------

    def load(self) -> None:
        """Open the segment files. The write position is set by recovery."""
        self.directory.mkdir(parents=True, exist_ok=True)
        segments = [Segment.open(path, start) for start, path in list_segment_files(self.directory)]
        self.repaired = []
        out: list[Segment] = segments[:1]
        keep = 0
        for seg in segments[1:]:
            prev = out[-1]
            if seg.start < prev.end:
                keep = len(out)  # overlapping files: not a layout this log ever writes
            elif seg.start > prev.end:
                out[-1:] = self._fill_hole(prev, seg.start)
            out.append(seg)
        segments = out
        if keep:
            log.warning(
                f"commitlog segments overlap at {segments[keep].path.name}, "
                f"deleting {keep} older segments",
            )
            for seg in segments[:keep]:
                self._tracker.retire(seg)
        self._set_segments(segments[keep:])
        self.max_timestamps.clear()
        self.write_pos = self.segments[-1].end if self.segments else 0

    def _fill_hole(self, prev: Segment, end: int) -> list[Segment]:
        """The bytes from ``prev.end`` to ``end`` (the next file's start) are missing: a file cut
        short (a truncated copy, a damaged disk) or segment files deleted by hand. The records
        around them are intact, so rather than drop everything before the hole (which once
        deleted a whole truncated first segment), grow ``prev`` back to its size and create
        zero-filled segments for the rest; recovery then validates every segment and reports
        the lost range. Returns ``prev`` (grown) and the new segments."""
        hole = prev.end
        log.error(
            f"commitlog bytes from offset {hole} to {end} are missing ({prev.path.name} is short "
            "or segment files are gone): zero-filled to keep the log contiguous",
            offset=hole,
            lost_bytes=end - hole,
            segment=prev.path.name,
        )
        target = min(end, prev.start + max(self.segment_bytes, prev.size))
        if target > prev.end:
            prev.close()
            os.truncate(prev.path, target - prev.start)
            prev = Segment.open(prev.path, prev.start)
            self._tracker.mark(prev)
        filled = [prev]
        while prev.end < end:
            prev = Segment.create(self.directory, prev.end, min(self.segment_bytes, end - prev.end))
            filled.append(prev)
        self._tracker.mark_dir(self.directory)
        self.repaired.append((hole, end - hole))
        return filled

    def _set_segments(self, segments: list[Segment]) -> None:
        self.segments = segments
        self._starts = [seg.start for seg in segments]

    # -- positions -------------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        return self.segments[0].start if self.segments else self.write_pos

    def segment_index(self, offset: int) -> int:
        """Index of the segment holding ``offset``, or -1."""
        i = bisect.bisect_right(self._starts, offset) - 1
        if i >= 0 and offset < self.segments[i].end:
            return i
        return -1

    def segment_at(self, offset: int) -> Segment | None:
        i = self.segment_index(offset)
        return self.segments[i] if i >= 0 else None

    # -- writing ---------------------------------------------------------------------------

    def _allocate(self, start: int) -> Segment:
        seg = Segment.create(self.directory, start, self.segment_bytes)
        self.segments.append(seg)
        self._starts.append(start)
        self.max_timestamps[start] = 0
        self._tracker.mark_dir(self.directory)
        return seg

    def reserve(self, nbytes: int) -> tuple[Segment, int]:
        """A segment with room for ``nbytes`` (plus a blank's minimum) at the write position,
        and the position in it. Rolls when needed: the new segment is allocated first (may raise
        DiskFullError, changing nothing), then the old tail is blanked."""
        pos = self.write_pos
        last = self.segments[-1] if self.segments else None
        if last is not None and pos + nbytes + BLANK_MIN <= last.end:
            return last, pos - last.start
        if nbytes + BLANK_MIN > self.segment_bytes:
            raise MessageTooLargeError(
                f"{nbytes} bytes do not fit in a {self.segment_bytes}-byte commitlog segment"
            )
        new = self._allocate(last.end if last is not None else pos)
        if last is not None and last.end - pos >= BLANK_MIN:
            last.view[pos - last.start : last.size] = encode_blank(last.end - pos)
        self.write_pos = new.start
        return new, 0

    def writable_segment(self) -> Segment:
        """The segment the write position is in, allocated when it is at a segment end."""
        last = self.segments[-1] if self.segments else None
        if last is not None and self.write_pos < last.end:
            return last
        return self._allocate(self.write_pos)

    def advance(self, new_pos: int, segment: Segment, timestamp: int) -> None:
        self.write_pos = new_pos
        if timestamp > self.max_timestamps.get(segment.start, 0):
            self.max_timestamps[segment.start] = timestamp

    # -- cutting ---------------------------------------------------------------------------

    def truncate(self, offset: int, *, dirty_end: int | None) -> tuple[bool, list[Segment]]:
        """Cut the log back to ``offset``: zero the rest of its segment and delete later ones
        (the first segment always stays). ``dirty_end`` bounds where data may lie (the write
        position) so only that much is zeroed; None means anywhere up to the segment end.

        Returns (whether any data was removed, the segments the caller must fsync). Nothing is
        durable until the caller fsyncs them and the directory."""
        removed = False
        keep: list[Segment] = []
        touched: list[Segment] = []
        for seg in self.segments:
            if seg.start > offset or (seg.start == offset and keep):
                removed |= any(bytes(seg.view[:BLANK_MIN]))
                self._tracker.retire(seg)
                self.max_timestamps.pop(seg.start, None)
                continue
            keep.append(seg)
            if offset < seg.end:
                hi = seg.size if dirty_end is None else min(seg.size, dirty_end - seg.start)
                if offset - seg.start < hi and seg.zero(offset - seg.start, hi):
                    removed = True
                    touched.append(seg)
                self.max_timestamps[seg.start] = self._newest_timestamp(seg, offset - seg.start)
        self._set_segments(keep)
        self.write_pos = offset
        return removed, touched

    def delete_oldest(self) -> Segment:
        """Retention: delete the first segment (never the last one)."""
        if len(self.segments) < 2:
            raise StoreError("the commitlog segment being written is never deleted")
        seg = self.segments[0]
        self._tracker.retire(seg)
        self.max_timestamps.pop(seg.start, None)
        self._set_segments(self.segments[1:])
        return seg

    # -- timestamps ------------------------------------------------------------------------

    def load_timestamps(self) -> None:
        """Find the newest store timestamp of every segment recovery did not scan."""
        for seg in self.segments:
            if seg.start in self.max_timestamps:
                continue
            end = seg.size
            if seg.end > self.write_pos:
                end = max(0, self.write_pos - seg.start)
            else:
                blank = seg.rfind(_BLANK_MAGIC_RAW, 0, seg.size) - 4
                if blank >= 0 and _U32.unpack_from(seg.view, blank)[0] == seg.size - blank:
                    end = blank
            self.max_timestamps[seg.start] = self._newest_timestamp(seg, end)

    def _newest_timestamp(self, seg: Segment, end: int) -> int:
        """Store timestamp of the record ending at ``end`` (relative), found by searching back
        for its magic; falls back to the file's modification time."""
        hi = end
        for _ in range(_MAX_LAST_RECORD_PROBES):
            found = seg.rfind(_MESSAGE_MAGIC_RAW, 0, hi)
            if found < 4:
                break
            pos = found - 4
            if _U32.unpack_from(seg.view, pos)[0] == end - pos:
                try:
                    check_record(seg.view, pos, end)
                except RecordError:
                    pass
                else:
                    return store_timestamp(seg.view, pos)
            hi = found + len(_MESSAGE_MAGIC_RAW) - 1
        if end == 0:
            return 0
        try:
            return int(seg.path.stat().st_mtime * 1000)
        except FileNotFoundError:
            return 0

    # -- durability ------------------------------------------------------------------------

    def segments_between(self, lo: int, hi: int) -> list[Segment]:
        """Segments overlapping [lo, hi) (a snapshot: safe from the flush thread)."""
        segments = list(self.segments)
        return [seg for seg in segments if seg.end > lo and seg.start < hi]

    def warm(self, pos: int, ahead: int) -> None:
        """Pre-fault the next ``ahead`` bytes after ``pos`` in the segment being written (from the
        flush thread, so the event loop's appends do not stop on page faults)."""
        if not self._warm_ok or ahead <= 0:
            return
        lo = max(pos, self._warmed_to)
        hi = pos + ahead
        if hi <= lo:
            return
        for seg in self.segments_between(lo, hi):
            a, b = max(lo, seg.start), min(hi, seg.end)
            if not seg.populate(a - seg.start, b - seg.start):
                self._warm_ok = False
                return
        self._warmed_to = hi

    def close(self) -> None:
        for seg in self.segments:
            seg.close()
        self._set_segments([])
        self.max_timestamps.clear()
