"""The CommitLog as bytes, for replication: what a master sends and what a slave appends.

A master sends whole records (and blank tails) that never cross a segment end
(:func:`whole_records`); a slave appends them as they are, after checking where they go
(:func:`append_end`), written through the file (:func:`write_file`); a truncation cuts only at
a record boundary (:func:`is_record_boundary`). Validating the records themselves is the replay
scan's (``storage.dispatch``), the same code recovery uses.
"""

from __future__ import annotations

import errno
import os
import struct
from typing import Final

from protocol.message import BLANK_MAGIC, MESSAGE_MAGIC, peek_prefix
from storage.commitlog import CommitLog
from storage.errors import DiskFullError, StoreError
from storage.segment import Segment

_U32: Final = struct.Struct(">I")


def whole_records(commitlog: CommitLog, offset: int, max_bytes: int) -> memoryview:
    """Whole records (and blank tails) from CommitLog ``offset``, up to ``max_bytes`` (at
    least one record), never crossing a segment end; empty at the write position. The view
    aliases the mapped segment."""
    if offset == commitlog.write_pos:
        return memoryview(b"")
    if not commitlog.min_offset <= offset < commitlog.write_pos:
        raise StoreError(
            f"offset {offset} outside the commitlog [{commitlog.min_offset}, {commitlog.write_pos})"
        )
    seg = commitlog.segment_at(offset)
    if seg is None:
        raise StoreError(f"no commitlog segment holds offset {offset}")
    view = seg.view
    start = offset - seg.start
    limit = min(seg.end, commitlog.write_pos) - seg.start
    pos = start
    unpack = _U32.unpack_from
    while pos < limit:
        (size,) = unpack(view, pos)
        if size < 8 or pos + size > limit:
            if pos == start:
                raise StoreError(f"offset {offset} is not at a record")
            break
        if pos > start and pos + size - start > max_bytes:
            break
        pos += size
    return view[start:pos]


def append_end(commitlog: CommitLog, offset: int, size: int) -> int:
    """The end of the segment ``size`` bytes appended at ``offset`` go into; raises
    :class:`StoreError` unless ``offset`` is the write position and they fit in that segment."""
    if offset != commitlog.write_pos:
        raise StoreError(f"append at {offset} but the commitlog ends at {commitlog.write_pos}")
    last = commitlog.segments[-1] if commitlog.segments else None
    seg_end = (
        last.end if last is not None and offset < last.end else offset + commitlog.segment_bytes
    )
    if offset + size > seg_end:
        raise StoreError(f"appended data crosses the segment end at {seg_end}")
    return seg_end


def is_record_boundary(commitlog: CommitLog, offset: int) -> bool:
    """Whether a record (or a blank tail) starts at ``offset``, or it is the write position."""
    seg = commitlog.segment_at(offset)
    if offset < commitlog.write_pos and seg is not None:
        return peek_prefix(seg.view, offset - seg.start)[1] in (MESSAGE_MAGIC, BLANK_MAGIC)
    return True


def write_file(seg: Segment, rel: int, data: bytes) -> None:
    """Write ``data`` at ``rel`` in ``seg`` through the file rather than the mapping (the same
    page cache, so the mapping sees it at once; ``Segment.fsync`` makes it durable): a page
    written whole by ``pwrite`` is neither faulted in nor zeroed first, which makes a replica's
    1 MiB appends to fresh pages far cheaper. On an I/O error nothing is left past the write
    position."""
    try:
        fd = os.open(seg.path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            done = 0
            while done < len(data):
                done += os.pwrite(fd, memoryview(data)[done:], rel + done)
        finally:
            os.close(fd)
    except OSError as exc:
        seg.zero(rel, rel + len(data))
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskFullError(f"no space to write {seg.path}: {exc}") from exc
        raise StoreError(f"cannot write {seg.path}: {exc}") from exc
