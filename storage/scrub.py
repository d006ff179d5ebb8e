"""The background scrub's reading of the CommitLog (issue 31): every record below a limit (the
flushed offset: bytes that no longer change but by a repair) re-read and checked, a slice at a
time, from where the last slice ended; at the limit it starts again from the oldest record (one
pass). Its position is kept in ``<data_dir>/scrub`` (``storage.small_file``), so a restart
carries on where it stood.

A record checks when its magic, size and CRC hold and it names its own CommitLog offset
(``protocol.message.check_record``, as recovery and reads check); a segment's blank tail is
passed. What fails is damage: a record whose header holds but whose CRC does not is its size;
one whose header does not hold runs to the next valid record (``storage.dispatch.next_record``,
as recovery resumes). Damage is handed back, not acted on: repairing it is the broker's.

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
from storage.small_file import read_atomic, write_atomic

__all__ = ["SCRUB_FILE", "Scrub", "ScrubStep"]

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
            view = seg.view
            rel = pos - seg.start
            seg_limit = min(seg.end, limit) - seg.start
            if seg_limit - rel < 8:
                if seg.end <= limit:  # the tail of a sealed segment too short for a record
                    out.scanned += seg.end - pos
                    pos = seg.end
                    continue
                break
            size, magic = peek_prefix(view, rel)
            if magic == BLANK_MAGIC and size == seg.size - rel:
                out.scanned += min(seg.end, limit) - pos
                pos = min(seg.end, limit)
                continue
            if magic == MESSAGE_MAGIC and size >= MIN_RECORD_SIZE and rel + size <= seg_limit:
                try:
                    check_record(view, rel, rel + size)
                    intact = DISPATCH_HEAD.unpack_from(view, rel)[5] == pos
                except RecordError:
                    intact = False
                if not intact:
                    out.damage.append((pos, size))
                out.scanned += size
                pos += size
                continue
            found = next_record(view, seg.start, rel, seg.size, seg_limit)
            end = seg.start + (seg_limit if found is None else found)
            out.damage.append((pos, end - pos))
            out.scanned += end - pos
            pos = end
        self.position = pos
        return out
