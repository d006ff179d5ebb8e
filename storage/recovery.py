"""Bringing the CommitLog and ConsumeQueues back into agreement when the store opens.

After a clean stop (no abort marker, a checkpoint) records are validated from the segment holding
the checkpoint's dispatched offset (the last one), and the ConsumeQueues are only listed: each is
loaded when first used (``storage.queues``). After an unclean stop, or when the CommitLog
had to be repaired on load, every segment is validated: a sequential CRC scan, so its time is
bounded by the log's size. Records past the dispatched offset are also replayed into their
ConsumeQueues through the :class:`Replayer`.

What the scan cannot read is told apart by what follows it:

- nothing valid follows (only zeros or garbage up to the end of the written data): the end of
  the log, a torn write. The CommitLog is cut there and ConsumeQueue entries at or past the cut
  are dropped (as RocketMQ does). Bytes cut below the checkpoint's flushed offset were durable:
  they are corruption, copied to the quarantine directory and reported before the cut.
- valid records follow (later in the segment, or in a later segment): damage in the middle.
  The damaged range is copied to ``<data_dir>/quarantine/`` and reported (:class:`Damage`), the
  bytes stay where they are (a read of a record there gets an explicit error naming its offset)
  and the scan resumes at the next valid record. Nothing after the damage is deleted.

The caller makes the result durable before serving.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from storage.checkpoint import Checkpoint
from storage.commitlog import CommitLog
from storage.dispatch import Replayer, Scan, next_record
from storage.queues import ConsumeQueues
from storage.segment import Segment, segment_name
from storage.small_file import fsync_dir

_APPLY_CHUNK_BYTES = 4 << 20
_COPY_CHUNK = 1 << 20

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Damage:
    """CommitLog bytes that hold no readable record."""

    offset: int
    size: int
    reason: str
    copy: Path | None
    """Where a copy of the bytes was put aside (None when they were all zero or missing)."""
    cut: bool
    """Recovery cut the log there (the end of the log); otherwise the bytes stay in place."""


@dataclass(frozen=True, slots=True)
class RecoveryResult:
    end: int
    """The CommitLog write position: every record below it is valid (or in ``damaged``) and
    dispatched."""
    scanned_from: int
    """Records from here on were read from the page cache and must be fsynced."""
    truncated: bool
    replayed: int
    """Records whose ConsumeQueue entries were rebuilt."""
    touched: list[Segment]
    """Segments recovery zeroed (to fsync)."""
    damaged: list[Damage] = field(default_factory=list)
    """Unreadable ranges found and quarantined (kept in place, or cut at the end)."""


@dataclass(slots=True)
class Walk:
    """What :func:`walk` found: where valid data ends (None: at the last segment's end), why it
    ended there (None: nothing invalid), and the damaged ranges it skipped."""

    end: int | None = None
    reason: str | None = None
    damaged: list[Damage] = field(default_factory=list)
    written_end: int | None = None
    """With ``end``: below this offset the segment holding ``end`` may hold data past it
    (bytes from there on were never written: nothing to zero there)."""


def quarantine_dir(commitlog: CommitLog) -> Path:
    return commitlog.directory.parent / "quarantine"


def quarantine(
    commitlog: CommitLog,
    seg: Segment,
    lo: int,
    hi: int,
    reason: str,
    *,
    cut: bool,
    copy: bool = True,
    trim: bool = True,
) -> Damage:
    """Copy segment bytes ``[lo, hi)`` (relative) aside under the quarantine directory (unless
    they are all zero; with ``trim`` without the zeros that end them: a segment's unwritten
    tail) and describe them; the CommitLog itself is not changed."""
    view = seg.view
    nonzero_end = seg.nonzero_end(lo, hi)
    target: Path | None = None
    if nonzero_end > lo and not trim:
        nonzero_end = hi
    if nonzero_end > lo and copy:
        directory = quarantine_dir(commitlog)
        directory.mkdir(exist_ok=True)
        target = directory / f"commitlog-{segment_name(seg.start + lo)}-{hi - lo}"
        with target.open("wb") as f:
            # The copy has the holes of the segment: only its data ranges are read and written.
            for start, stop in seg.data_ranges(lo, nonzero_end):
                f.seek(start - lo)
                for a in range(start, stop, _COPY_CHUNK):
                    f.write(view[a : min(a + _COPY_CHUNK, stop)])
            f.truncate(nonzero_end - lo)
            f.flush()
            os.fsync(f.fileno())  # durable before the caller cuts the log
        fsync_dir(directory)
    return Damage(seg.start + lo, hi - lo, reason, target, cut)


def walk(
    commitlog: CommitLog,
    replayer: Replayer,
    first: int,
    *,
    dispatch_from: int,
    durable: int,
    on_scan: Callable[[Segment, Scan], None],
    copy: bool = True,
) -> Walk:
    """Validate (and from ``dispatch_from`` on, dispatch) every segment from index ``first``,
    skipping damaged ranges as the module docstring says; ``durable`` is the offset below which
    bytes were known durable. ``on_scan`` gets every chunk's scan (to apply or collect it).
    Without ``copy`` nothing is written to the quarantine directory (a read-only walk)."""
    segments = commitlog.segments
    found = Walk()
    for i in range(first, len(segments)):
        seg = segments[i]
        pos = 0
        while True:
            scan = replayer.scan(
                seg.view,
                base=seg.start,
                start=pos,
                limit=seg.size,
                segment_end=seg.size,
                zeros_end_data=True,
                dispatch_from=dispatch_from - seg.start,
                max_bytes=_APPLY_CHUNK_BYTES,
            )
            on_scan(seg, scan)
            pos = scan.end
            if scan.more:
                continue
            if scan.complete:
                break
            reason = scan.error.reason if scan.error is not None else "unwritten (zero) bytes"
            torn = seg.start + pos >= durable
            # Past the first bad or blank record, only what was ever written is read: the rest
            # of a pre-allocated segment is a hole (never written), see Segment.data_ranges.
            written = _written_end(seg, pos)
            resume = None if torn else next_record(seg.view, seg.start, pos, seg.size, written)
            later = [s for s in segments[i + 1 :] if any(bytes(s.view[:8]))]
            if torn or (resume is None and not later):
                # The end of the log: a torn write past the durable offset, or damage at the
                # end of durable data. Whatever is cut is copied aside first.
                found.end = seg.start + pos
                # A write that did not reach the disk whole (a power loss writes pages back in
                # any order) can leave later records or garbage past zeros: they are cut (copied
                # aside first), so that no later recovery takes stale records for new ones.
                found.written_end = seg.start + written
                # Zeros right at the flushed offset: the end a clean stop leaves (nothing to
                # copy).
                at_flush = scan.error is None and found.end == durable
                hi = pos if at_flush else seg.nonzero_end(pos, written)
                if hi > pos:
                    found.damaged.append(
                        quarantine(commitlog, seg, pos, hi, reason, cut=True, copy=copy)
                    )
                for s in later:
                    what = f"after the cut at {found.end}"
                    found.damaged.append(
                        quarantine(commitlog, s, 0, _data_end(s), what, cut=True, copy=copy)
                    )
                if scan.error is not None or hi > pos or later:
                    found.reason = reason
                return found
            hi = seg.size if resume is None else resume
            damage = quarantine(
                commitlog, seg, pos, hi, reason, cut=False, copy=copy, trim=resume is None
            )
            found.damaged.append(damage)
            replayer.skip_damage(damage.offset, damage.size)
            if resume is None:
                break
            pos = resume
    return found


def _written_end(seg: Segment, pos: int) -> int:
    """Where the last range at or after ``pos`` that may hold data ends (relative); ``pos`` when
    the rest of the segment is a hole (never written)."""
    ranges = seg.data_ranges(pos, seg.size)
    return ranges[-1][1] if ranges else pos


def _data_end(seg: Segment) -> int:
    """Where the last non-zero byte of ``seg`` ends (relative)."""
    return seg.nonzero_end(0, seg.size)


def recover(
    commitlog: CommitLog,
    queues: ConsumeQueues,
    *,
    checkpoint: Checkpoint | None,
    clean: bool,
    given_up: Callable[[int, int], bool] | None = None,
) -> RecoveryResult:
    """Validate the CommitLog (from the checkpoint after a ``clean`` stop, else all of it),
    replay it into ``queues`` and cut it at the last valid record. Damage ``given_up`` says an
    operator gave up (the record of a skipped message) is logged at info, not as an error."""
    segments = commitlog.segments
    if not segments:
        queues.load(commitlog.write_pos, scrub=not clean)
        queues.truncate_physical(commitlog.write_pos)
        return RecoveryResult(commitlog.write_pos, commitlog.write_pos, False, 0, [])
    first, last = segments[0], segments[-1]
    trusted = first.start if checkpoint is None else checkpoint.dispatched_offset
    trusted = min(max(trusted, first.start), last.end)
    # Without a checkpoint nothing says where torn writes could start: only damage at the very
    # end is cut, damage followed by valid records is kept in place.
    durable = last.end if checkpoint is None else checkpoint.flushed_offset
    # After a clean stop the queues agree with the log: each is loaded when first used.
    queues.load(trusted, scrub=not clean, lazy=clean)
    if len(queues) == 0 and any(bytes(first.view[:8])):
        log.info("no consume queues on disk: rebuilding them from the commitlog")
        trusted = first.start

    if clean:
        start = commitlog.segment_index(trusted)
        if start < 0 or trusted >= last.start:
            start = len(segments) - 1
    else:
        start = 0  # after an unclean stop every segment is checked
    scanned_from = segments[start].start
    replayer = Replayer(queues)
    replayed = 0
    began = time.monotonic()

    def apply(seg: Segment, scan: Scan) -> None:
        nonlocal replayed
        replayer.apply(scan)
        replayed += scan.dispatched
        newest = commitlog.max_timestamps.get(seg.start, 0)
        commitlog.max_timestamps[seg.start] = max(newest, scan.newest)

    for seg in segments[start:]:
        commitlog.max_timestamps[seg.start] = 0
    found = walk(commitlog, replayer, start, dispatch_from=trusted, durable=durable, on_scan=apply)
    end = last.end if found.end is None else found.end
    reason = found.reason
    for damage in found.damaged:
        where = f"copied to {damage.copy}" if damage.copy is not None else "all zero"
        what = "cut from the log" if damage.cut else "kept in place, reads of it fail"
        skipped = not damage.cut and given_up is not None and given_up(damage.offset, damage.size)
        if skipped:
            what = "kept in place, the record of a message skipped by an operator"
        (log.info if skipped else log.error)(
            f"commitlog damaged: {damage.size} bytes at offset {damage.offset} unreadable "
            f"({damage.reason}): {what}; {where}",
            offset=damage.offset,
            size=damage.size,
            reason=damage.reason,
            cut=damage.cut,
        )

    # After a clean stop with a checkpoint at the end found, bytes past it are zero by
    # construction; otherwise anything may lie past the cut.
    # Otherwise the walk found where written bytes may end (nothing past it is read or zeroed).
    verified_clean = clean and reason is None and end == trusted
    dirty_end = end if verified_clean else found.written_end
    removed, touched = commitlog.truncate(end, dirty_end=dirty_end)
    if reason is None and removed:
        reason = "data after an unwritten (zero) gap"
    if reason is not None:
        log.warning(
            f"commitlog recovery truncated at offset {end}: {reason}", offset=end, reason=reason
        )
    queues.truncate_physical(end)
    commitlog.load_timestamps()
    log.info(
        "commitlog recovered",
        clean=clean,
        end=end,
        scanned_from=scanned_from,
        scanned_bytes=end - scanned_from,
        seconds=round(time.monotonic() - began, 3),
        replayed=replayed,
        queues=len(queues),
        queues_loaded=queues.loaded,
        damaged=len(found.damaged),
    )
    return RecoveryResult(end, scanned_from, reason is not None, replayed, touched, found.damaged)
