"""Reading a queue: the answers of ``MessageStore.get`` and the two steps that find them.

1. :func:`bounds`: where the requested queue offset stands against the queue (no messages ever,
   below its min offset, at or past its max offset); answered from the ConsumeQueue alone.
2. :func:`scan`: the ConsumeQueue entries from that offset, each verified against its CommitLog
   record (entry size and position, CRC, the queue id, queue offset and topic the record names)
   and copied out with physically adjacent records in one slice. With tag hashes, entries whose
   hash cannot match are passed over unread, and so, with a SQL92 filter's property need, are
   entries whose property digest cannot match (``storage.filter_index``);
   :attr:`Scanned.next_offset` is then past every entry looked at, which is what a filtered consumer commits (nothing served is not "nothing
   done"). The scan stops at the first entry it cannot serve and says why
   (:class:`Problem`); what to answer then is ``storage.corruption``'s decision.

Both are plain functions of the queue and the CommitLog: no clock, no locks, no logging.
"""

from __future__ import annotations

import enum
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from protocol.message import DISPATCH_HEAD, HEAD_SIZE, MESSAGE_MAGIC, MIN_RECORD_SIZE
from protocol.property_index import PropertyNeed
from storage.commitlog import CommitLog
from storage.consumequeue import ENTRY, ConsumeQueue
from storage.segment import Segment

_U16: Final = struct.Struct(">H")


class GetStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    """Nothing (visible) at the offset yet: it is the queue's max offset, or past what may be
    served (``max_physical_offset``)."""
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    """Below the queue's min offset (deleted by retention); ``next_offset`` is the min."""
    OFFSET_OVERFLOW = "OFFSET_OVERFLOW"
    """Past the queue's max offset; ``next_offset`` is the max."""
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"
    """The queue never held a message."""
    CORRUPT = "CORRUPT"
    """The record at the offset cannot be read (it fails its CRC, or its bytes were lost):
    ``corrupt_offset`` names its CommitLog offset; ``next_offset`` is the offset asked for."""


@dataclass(slots=True)
class GetResult:
    status: GetStatus
    next_offset: int
    """Queue offset to ask for next."""
    min_offset: int
    max_offset: int
    body: bytes
    """Records back to back, exactly as stored (``protocol.message.iter_records`` decodes it)."""
    count: int
    corrupt_offset: int = -1
    """CORRUPT: the CommitLog offset of the record that cannot be read."""
    reason: str = ""
    """CORRUPT: why."""
    corrupt_size: int = 0
    """CORRUPT: the record's size as its ConsumeQueue entry says (what a repair fetches from a
    replica, ``StoreRepair.repair``)."""


class Problem(enum.Enum):
    """Why a scan stopped at an entry it could not serve."""

    CRC = "crc"
    """The record the entry points at fails its CRC."""
    ENTRY = "entry"
    """The entry points at no record of this queue (outside the CommitLog, a size or position
    that does not match, another queue's or topic's record)."""


@dataclass(slots=True)
class Scanned:
    """What :func:`scan` read: ``count`` records in ``body``; ``next_offset`` is past every entry
    taken or passed over (the offset asked for when none was); ``problem`` is set when the scan
    stopped at an entry it could not serve."""

    body: bytes
    count: int
    next_offset: int
    problem: Problem | None


def bounds(queue: ConsumeQueue | None, offset: int) -> GetResult | None:
    """The answer when ``offset`` holds no entry to read (the queue is empty or unknown, the
    offset is below its min or at or past its max); None when there is an entry there."""
    if queue is None or queue.max_offset == 0:
        return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, 0, 0, b"", 0)
    lo, hi = queue.min_offset, queue.max_offset
    if offset < lo:
        return GetResult(GetStatus.OFFSET_TOO_SMALL, lo, lo, hi, b"", 0)
    if offset == hi:
        return GetResult(GetStatus.NO_MATCHED_MESSAGE, offset, lo, hi, b"", 0)
    if offset > hi:
        return GetResult(GetStatus.OFFSET_OVERFLOW, hi, lo, hi, b"", 0)
    return None


def topic_field(topic: str) -> bytes:
    """How a record of ``topic`` starts its tail after the body: the topic's length, then it."""
    raw = topic.encode()
    return _U16.pack(len(raw)) + raw


def record_problem(
    seg: Segment, physical: int, size: int, queue_id: int, queue_offset: int, field: bytes
) -> Problem | None:
    """Whether the record at CommitLog ``physical`` in ``seg`` is the one a ConsumeQueue entry
    (``size``, ``queue_id``, ``queue_offset``, the topic's :func:`topic_field`) points at, intact.
    """
    view = seg.view
    rel = physical - seg.start
    rsize, magic, crc, rqueue, roffset, rphysical, _ts, blen = DISPATCH_HEAD.unpack_from(view, rel)
    if rsize != size or magic != MESSAGE_MAGIC or rphysical != physical:
        return Problem.ENTRY
    if zlib.crc32(view[rel + 12 : rel + size]) != crc:
        return Problem.CRC
    at = rel + HEAD_SIZE + blen
    end = at + len(field)
    if rqueue != queue_id or roffset != queue_offset or end > rel + size or view[at:end] != field:
        return Problem.ENTRY
    return None


def scan(
    queue: ConsumeQueue,
    commitlog: CommitLog,
    offset: int,
    max_count: int,
    max_bytes: int,
    max_physical_offset: int | None,
    tag_hashes: frozenset[int] | PropertyNeed | None,
    entries_to_scan: int,
) -> Scanned:
    """Up to ``max_count`` records (at least one if any is available, even past ``max_bytes``)
    from queue ``offset``, only those ending at or before ``max_physical_offset``. With
    ``tag_hashes``, up to ``entries_to_scan`` entries (at least ``max_count``) are looked at and
    those whose hash is not in it passed over without reading their record; never one past what
    may be served (a new master may reuse that queue offset for another message). With a SQL92
    filter's :class:`~protocol.property_index.PropertyNeed` instead, entries are looked at the
    same way and those whose property digest (``storage.filter_index``) says they cannot match
    are passed over unread; entries without a digest are read."""
    queue_id = queue.queue_id
    cl_min = commitlog.min_offset
    cl_max = commitlog.write_pos
    visible = cl_max if max_physical_offset is None else min(cl_max, max_physical_offset)
    field = topic_field(queue.topic)
    parts: list[bytes] = []
    count = total = 0
    seg: Segment | None = None
    run_start = run_end = 0
    problem: Problem | None = None
    # No record is smaller than MIN_RECORD_SIZE: never read more entries than can be served.
    wanted = max(1, min(max_count, max_bytes // MIN_RECORD_SIZE + 1))
    entries = wanted if tag_hashes is None else max(wanted, entries_to_scan)
    may_match: Callable[[int, int], bool] | None = None
    digests = queue.digests
    saved = 0
    if isinstance(tag_hashes, PropertyNeed):
        if tag_hashes.decides and digests is not None:
            may_match = digests.tester(tag_hashes)
        hashes = None
    else:
        hashes = tag_hashes
    index = offset - 1  # the queue offset of the entry looked at
    for physical, size, tags in ENTRY.iter_unpack(queue.read(offset, entries)):
        index += 1
        end = physical + size
        if tag_hashes is not None:
            if count == wanted or end > visible:
                break
            if hashes is not None:
                if tags not in hashes:
                    continue
            elif may_match is not None and not may_match(index, physical):
                saved += 1
                continue
        if size < MIN_RECORD_SIZE or physical < cl_min or end > cl_max:
            problem = Problem.ENTRY
            break
        if end > visible or (count and total + size > max_bytes):
            break
        rseg = seg
        if rseg is None or physical < rseg.start or end > rseg.end:
            rseg = commitlog.segment_at(physical)
            if rseg is None or end > rseg.end:
                problem = Problem.ENTRY
                break
        problem = record_problem(rseg, physical, size, queue_id, index, field)
        if problem is not None:
            break
        if rseg is not seg or physical != run_end:
            if count and seg is not None:
                parts.append(bytes(seg.view[run_start - seg.start : run_end - seg.start]))
            seg = rseg
            run_start = physical
        run_end = end
        count += 1
        total += size
    else:
        index += 1  # every entry looked at was taken or passed over
    if count and seg is not None:
        parts.append(bytes(seg.view[run_start - seg.start : run_end - seg.start]))
    if saved and digests is not None:
        digests.reads_saved += saved
    body = parts[0] if len(parts) == 1 else b"".join(parts)
    return Scanned(body, count, index, problem)
