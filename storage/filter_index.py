"""The per-queue property filter index: a digest of each record's properties beside its
ConsumeQueue entry, so SQL92 filters pass over records they cannot match unread.

:class:`FilterIndex` is called with every run of entries a ConsumeQueue appends (a put on the
master, the records a slave replicates, recovery's replay, a queue rebuilt from the CommitLog:
all append through :meth:`storage.consumequeue.ConsumeQueue.append`) and keeps, per queue,
:func:`protocol.property_index.digest_of` of each record's properties with the record's
CommitLog offset (:class:`QueueDigests`). A put and a replay hand the digests over with the
entries (a put from the properties it encodes, ``storage.queue_write.RecordSizer``; a replay
from the tails its scan decodes); otherwise it reads each new record's properties from its
tail (the body is not read). A reader (:func:`storage.queue_read.scan`) asks
:meth:`QueueDigests.may_match` before reading a record; an entry the index does not hold, or
whose CommitLog offset is not the entry's (a queue offset reused after a truncation), answers
"may match" and its record is read as without an index.

The index lives in memory and is derived from the records alone: a slave builds the same one
from the records it replays, so a new master after a failover decides as fast as the old one,
and nothing about it is replicated or persisted. It holds the newest :data:`PER_QUEUE` entries
of each queue (24 bytes each); after a restart it holds what was appended since (records
stored before are read, as without an index, until consumers pass them).
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final

from protocol.filter import record_properties
from protocol.message import RecordError
from protocol.property_index import ALL_BITS, PropertyNeed, digest_of

if TYPE_CHECKING:
    from storage.commitlog import CommitLog
    from storage.consumequeue import ConsumeQueue

__all__ = ["PER_QUEUE", "FilterIndex", "QueueDigests"]

PER_QUEUE: Final = 1 << 17
"""Entries kept per queue (3 MiB); past it the older half is dropped."""


class QueueDigests:
    """The digests of one queue's entries ``[base, base + len)``: the record's CommitLog offset
    and the two halves of its property digest."""

    __slots__ = ("base", "hi", "lo", "physical", "reads_saved")

    def __init__(self) -> None:
        self.base = 0
        self.physical = array("q")
        self.lo = array("Q")
        self.hi = array("Q")
        self.reads_saved = 0
        """Entries reads passed over on their digest (``storage.queue_read.scan`` counts)."""

    def __len__(self) -> int:
        return len(self.physical)

    def put(self, first: int, physicals: Sequence[int], digests: Sequence[tuple[int, int]]) -> None:
        """Hold the digests of entries from queue offset ``first`` on (replacing any held at or
        past it: after a truncation the queue offsets are reused)."""
        self.put_halves(first, physicals, [d[0] for d in digests], [d[1] for d in digests])

    def put_halves(
        self, first: int, physicals: Sequence[int], lo: Sequence[int], hi: Sequence[int]
    ) -> None:
        """:meth:`put` with the digests' halves apart (as a replica's scan gathers them)."""
        end = self.base + len(self.physical)
        if not self.physical or first < self.base or first > end:
            self.base = first
            del self.physical[:], self.lo[:], self.hi[:]
        elif first < end:
            cut = first - self.base
            del self.physical[cut:], self.lo[cut:], self.hi[cut:]
        self.physical.extend(physicals)
        self.lo.extend(lo)
        self.hi.extend(hi)
        if len(self.physical) > PER_QUEUE:
            drop = len(self.physical) - PER_QUEUE // 2
            del self.physical[:drop], self.lo[:drop], self.hi[:drop]
            self.base += drop

    def may_match(self, index: int, physical: int, need: PropertyNeed) -> bool:
        """False only when the entry at queue offset ``index`` (its record at CommitLog
        ``physical``) is held and its digest lacks what ``need`` asks."""
        return self.tester(need)(index, physical)

    def tester(self, need: PropertyNeed) -> Callable[[int, int], bool]:
        """:meth:`may_match` for one read of the queue (the held entries bound once: a read
        tests every entry it looks at, and the index does not change during it)."""
        base, phys, lo, hi = self.base, self.physical, self.lo, self.hi
        n = len(phys)
        masks = need.masks
        if len(masks) == 1:
            ((m0, m1),) = masks

            def one(index: int, physical: int) -> bool:
                i = index - base
                if 0 <= i < n and phys[i] == physical:
                    return lo[i] & m0 == m0 and hi[i] & m1 == m1
                return True

            return one

        def any_of(index: int, physical: int) -> bool:
            i = index - base
            if 0 <= i < n and phys[i] == physical:
                return need.may_match(lo[i], hi[i])
            return True

        return any_of


class FilterIndex:
    """Builds each queue's :class:`QueueDigests` from the records its entries point at."""

    __slots__ = ("_commitlog",)

    def __init__(self, commitlog: CommitLog) -> None:
        self._commitlog = commitlog

    def appended(self, queue: ConsumeQueue, first: int, physicals: Sequence[int]) -> None:
        """``queue`` wrote entries from ``first`` for the records at ``physicals``."""
        segment_at = self._commitlog.segment_at
        digests: list[tuple[int, int]] = []
        seg = None
        for physical in physicals:
            if seg is None or not seg.start <= physical < seg.end:
                seg = segment_at(physical)
            digest = (ALL_BITS, ALL_BITS)  # unreadable: may match anything, read it
            if seg is not None:
                try:
                    digest = digest_of(record_properties(seg.view, physical - seg.start))
                except (RecordError, IndexError, ValueError, struct.error):
                    pass
            digests.append(digest)
        held = queue.digests
        if held is None:
            held = queue.digests = QueueDigests()
        held.put(first, physicals, digests)
