"""Bringing the CommitLog and ConsumeQueues back into agreement when the store opens.

After a clean stop (no abort marker, a checkpoint) only the last CommitLog segment is validated.
After an unclean stop records are validated from the start of the segment holding the
checkpoint's dispatched offset. Validation stops at the first invalid record (bad size, magic,
CRC, physical offset, or a queue offset that does not continue its queue): the CommitLog is cut
there, ConsumeQueue entries pointing at or past the cut are dropped, and entries past the
dispatched offset are rebuilt by replaying records through the :class:`Replayer`.
The caller makes the result durable before serving.
"""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from protocol.message import peek_prefix
from storage.checkpoint import Checkpoint
from storage.commitlog import CommitLog
from storage.dispatch import Replayer
from storage.queues import ConsumeQueues
from storage.segment import Segment

_APPLY_CHUNK_BYTES = 4 << 20

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class RecoveryResult:
    end: int
    """The CommitLog write position: every record below it is valid and dispatched."""
    scanned_from: int
    """Records from here on were read from the page cache and must be fsynced."""
    truncated: bool
    replayed: int
    """Records whose ConsumeQueue entries were rebuilt."""
    touched: list[Segment]
    """Segments recovery zeroed (to fsync)."""


def recover(
    commitlog: CommitLog,
    queues: ConsumeQueues,
    *,
    checkpoint: Checkpoint | None,
    clean: bool,
) -> RecoveryResult:
    segments = commitlog.segments
    if not segments:
        queues.load(commitlog.write_pos, scrub=not clean)
        queues.truncate_physical(commitlog.write_pos)
        return RecoveryResult(commitlog.write_pos, commitlog.write_pos, False, 0, [])
    first, last = segments[0], segments[-1]
    trusted = first.start if checkpoint is None else checkpoint.dispatched_offset
    trusted = min(max(trusted, first.start), last.end)
    queues.load(trusted, scrub=not clean)
    if len(queues) == 0 and peek_prefix(first.view, 0) != (0, 0):
        log.info("no consume queues on disk: rebuilding them from the commitlog")
        trusted = first.start

    start = commitlog.segment_index(trusted)
    if start < 0 or (clean and trusted >= last.start):
        start = len(segments) - 1
    scanned_from = segments[start].start
    replayer = Replayer(queues)
    end: int | None = None
    reason: str | None = None
    replayed = 0
    for seg in segments[start:]:
        newest = pos = 0
        while True:
            scan = replayer.scan(
                seg.view,
                base=seg.start,
                start=pos,
                limit=seg.size,
                segment_end=seg.size,
                zeros_end_data=True,
                dispatch_from=trusted - seg.start,
                max_bytes=_APPLY_CHUNK_BYTES,
            )
            replayer.apply(scan)
            replayed += scan.dispatched
            newest = max(newest, scan.newest)
            pos = scan.end
            if not scan.more:
                break
        commitlog.max_timestamps[seg.start] = newest
        if scan.error is not None:
            end, reason = scan.error.offset, scan.error.reason
        elif not scan.complete:
            end = seg.start + scan.end
        if end is not None:
            break
    if end is None:
        end = last.end

    # After a clean stop with a checkpoint at the end found, bytes past it are zero by
    # construction; otherwise anything may lie past the cut.
    verified_clean = clean and reason is None and end == trusted
    removed, touched = commitlog.truncate(end, dirty_end=end if verified_clean else None)
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
        replayed=replayed,
        queues=len(queues),
    )
    return RecoveryResult(end, scanned_from, reason is not None, replayed, touched)
