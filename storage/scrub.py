"""The background scrub's reading of the CommitLog (issue 31): every record below a limit (the
flushed offset: bytes that no longer change but by a repair) re-read and checked, a slice at a
time, from where the last slice ended; at the limit it starts again from the oldest record (one
pass). Its position is kept in ``<data_dir>/scrub`` (``storage.small_file``), so a restart
carries on where it stood.

A record checks when its magic, size and CRC hold and it names its own CommitLog offset
(``protocol.message.check_record``, as recovery and reads check); a segment's blank tail is
passed. What fails is damage, running to the next valid record (``storage.dispatch.next_record``,
as recovery resumes: a damaged size field may still look plausible). Damage is handed back, not acted on: repairing it is the broker's.

Plain synchronous code over the mapped segments (the broker calls it on its loop thread, in
slices small enough not to hold the loop); no clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from protocol.message import (
    BLANK_MAGIC,
    DISPATCH_HEAD,
    MESSAGE_MAGIC,
    MIN_RECORD_SIZE,
    RecordError,
    check_record,
    peek_prefix,
)
from storage.commitlog import CommitLog
from storage.dispatch import next_record
from storage.errors import StoreError
from storage.segment import Segment
from storage.small_file import read_atomic, write_atomic

__all__ = ["SCRUB_FILE", "Scrub", "ScrubStep", "check_at", "checked_records"]

SCRUB_FILE: Final = "scrub"


@dataclass(slots=True)
class ScrubStep:
    """What one :meth:`Scrub.step` read: ``scanned`` bytes, the ``damage`` found (CommitLog
    offset, size) and whether a pass ended (the scrub went back to the oldest record)."""

    scanned: int = 0
    damage: list[tuple[int, int]] = field(default_factory=list)
    wrapped: bool = False


class Scrub:
    def __init__(self, commitlog: CommitLog, directory: Path) -> None:
        self._commitlog = commitlog
        self._path = directory / SCRUB_FILE
        self.position = 0
        """The CommitLog offset the next slice starts at."""
        self.passes = 0
        """Passes ended since the store was created."""

    def load(self) -> None:
        """Read the position a previous run saved (none: from the start)."""
        try:
            raw = read_atomic(self._path)
        except StoreError:
            raw = None  # both copies damaged: start again from the oldest record
        if raw is None:
            return
        try:
            position, passes = (int(x) for x in raw.decode().split())
        except ValueError:
            return
        self.position, self.passes = max(0, position), max(0, passes)

    def save(self) -> None:
        """Keep the position durably (a restart carries on from it)."""
        write_atomic(self._path, f"{self.position} {self.passes}".encode())

    def step(self, limit: int, max_bytes: int) -> ScrubStep:
        """Check the records from :attr:`position` up to ``max_bytes`` (whole records, at
        least one) and below ``limit``, a record boundary (a record running past it is
        damaged); at ``limit`` go back to the oldest record."""
        commitlog = self._commitlog
        out = ScrubStep()
        limit = min(limit, commitlog.write_pos)
        pos = max(self.position, commitlog.min_offset)
        if pos >= limit:
            if limit > commitlog.min_offset:  # a pass over something ended
                self.passes += 1
                out.wrapped = True
            self.position = commitlog.min_offset
            return out
        while pos < limit and out.scanned < max_bytes:
            seg = commitlog.segment_at(pos)
            if seg is None:  # deleted under us (retention): go on from the oldest
                pos = commitlog.min_offset
                break
            rel = pos - seg.start
            seg_limit = min(seg.end, limit) - seg.start
            if seg_limit - rel < 8:
                if seg.end <= limit:  # the tail of a sealed segment too short for a record
                    out.scanned += seg.end - pos
                    pos = seg.end
                    continue
                break
            extent, intact = check_at(seg, rel, seg_limit)
            if not intact:
                out.damage.append((pos, extent))
            out.scanned += extent
            pos += extent
        self.position = pos
        return out


def checked_records(commitlog: CommitLog, offset: int, max_bytes: int) -> tuple[memoryview, int]:
    """Whole records (and blank tails) from CommitLog ``offset`` that pass their checks
    (:func:`check_at`), up to ``max_bytes`` (at least one), never crossing a segment end; and
    the extent of the damage that ends them (0: none): when the first fails, the view is
    empty and the damage starts at ``offset``. Empty at the write position; raises
    :class:`StoreError` for an offset outside the log. The view aliases the mapped segment."""
    if offset == commitlog.write_pos:
        return memoryview(b""), 0
    seg = commitlog.segment_at(offset)
    if seg is None or not commitlog.min_offset <= offset < commitlog.write_pos:
        raise StoreError(
            f"offset {offset} outside the commitlog [{commitlog.min_offset}, {commitlog.write_pos})"
        )
    start = offset - seg.start
    limit = min(seg.end, commitlog.write_pos) - seg.start
    rel = start
    while rel < limit and rel - start < max_bytes:
        if limit - rel < 8:  # a sealed segment's tail too short for a record (zeros)
            rel = limit
            break
        extent, intact = check_at(seg, rel, limit)
        if not intact:
            return seg.view[start:rel], extent
        rel += extent
    return seg.view[start:rel], 0


def check_at(seg: Segment, rel: int, limit: int) -> tuple[int, bool]:
    """(extent, intact) of what lies at ``rel`` in ``seg``, below ``limit`` (relative, at least
    8 bytes past ``rel``): a segment's blank tail (to ``limit``, intact); a record that passes
    its checks (CRC, and it names its own offset: its size, intact); else damage running to the
    next valid record (``storage.dispatch.next_record``, as recovery resumes) or ``limit``."""
    view = seg.view
    size, magic = peek_prefix(view, rel)
    if magic == BLANK_MAGIC and size == seg.size - rel:
        return limit - rel, True
    if magic == MESSAGE_MAGIC and size >= MIN_RECORD_SIZE and rel + size <= limit:
        try:
            check_record(view, rel, rel + size)
            if DISPATCH_HEAD.unpack_from(view, rel)[5] == seg.start + rel:
                return size, True
        except RecordError:
            pass
    # Damage runs to the next valid record: a size field that fails may still look plausible.
    found = next_record(view, seg.start, rel, seg.size, limit)
    return (limit if found is None else found) - rel, False
