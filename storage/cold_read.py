"""Cold reads: which CommitLog bytes a queue read would copy that are not in the page cache.

``MessageStore.get`` copies records out of the mapped CommitLog segments on the event loop; a
record whose pages are not in the page cache stops the loop on a disk read (a major page fault)
and every request behind it waits. Before such a read the broker asks :func:`cold_spans` which
of the bytes the read will copy are cold, loads those off the loop (``broker.cold_reads``: a
thread, at a bounded rate) and then reads as usual, from pages now in the cache.

How a range is told cold (:class:`Residency`): ``mincore(2)`` on the segment's mapping, through
ctypes (:class:`MincoreResidency`): it says for each page of the range whether the kernel holds
it, a few microseconds for a pull's range. Where ``mincore`` cannot be called (no libc that has
it), RocketMQ's rule (:class:`DistanceResidency`): a read more than ``accessMessageInMemoryMaxRatio``
(40%) of the machine's memory behind the CommitLog's write position is cold. The rule is a guess
that misses a dropped cache or a log smaller than that share of memory; ``mincore`` does not.

:func:`read_spans` picks the entries as ``storage.queue_read.scan`` does (the same count, bytes
and visibility limits, the same tag hashes passed over) from the ConsumeQueue alone: it reads no
record, so a bad entry is left to the read itself to find and answer.
"""

from __future__ import annotations

import ctypes
import mmap
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

from protocol.message import MIN_RECORD_SIZE
from storage.commitlog import CommitLog
from storage.consumequeue import ENTRY, ConsumeQueue
from storage.segment import Segment

__all__ = [
    "MEMORY_RATIO",
    "READ_AHEAD",
    "ColdSpan",
    "DistanceResidency",
    "MincoreResidency",
    "Residency",
    "cold_spans",
    "read_spans",
    "residency_for",
]

MEMORY_RATIO: Final = 0.4
"""RocketMQ's ``accessMessageInMemoryMaxRatio``: the share of memory the newest CommitLog bytes
are taken to stay cached in (the fallback rule)."""

READ_AHEAD: Final = 1 << 20
"""A cold read loads at least this much from where it starts (a group reading old messages
reads on from there; loaded once, its next pulls find the bytes cached). The kernel's own
readahead is off for these reads (``broker.cold_reads``)."""

_PAGE: Final = mmap.PAGESIZE


@dataclass(frozen=True, slots=True)
class ColdSpan:
    """CommitLog bytes to load: ``size`` bytes at ``position`` in the segment file ``path``."""

    path: Path
    position: int
    size: int


class Residency(Protocol):
    """Whether bytes ``[lo, hi)`` (CommitLog offsets) of ``seg`` are in the page cache, and
    how far from ``lo`` none is."""

    def resident(self, seg: Segment, lo: int, hi: int) -> bool: ...

    def cold_until(self, seg: Segment, lo: int, hi: int) -> int:
        """Where the first cached page in ``[lo, hi)`` starts (``lo`` when its own page is
        cached), or ``hi`` when none is."""
        ...


class DistanceResidency:
    """RocketMQ's rule: bytes more than ``memory_bytes * ratio`` behind the write position are
    cold. Pure: the write position is asked of ``write_pos``."""

    def __init__(
        self, write_pos: Callable[[], int], memory_bytes: int, ratio: float = MEMORY_RATIO
    ) -> None:
        self._write_pos = write_pos
        self.limit = int(memory_bytes * ratio)

    def resident(self, seg: Segment, lo: int, hi: int) -> bool:
        return self._write_pos() - lo <= self.limit

    def cold_until(self, seg: Segment, lo: int, hi: int) -> int:
        return max(lo, min(hi, self._write_pos() - self.limit))


class MincoreResidency:
    """``mincore(2)`` on the segment's mapping: every page of the range in the page cache.
    Each segment's mapping address is found once (a ctypes view, released at once so the
    segment can still close) and kept while the segment is open."""

    def __init__(self, mincore: Callable[[int, int, ctypes.Array[ctypes.c_char]], int]) -> None:
        self._mincore = mincore
        self._addresses: dict[Segment, int] = {}
        self._vec = bytearray(1 << 12)
        self._cvec = (ctypes.c_char * len(self._vec)).from_buffer(self._vec)

    @classmethod
    def load(cls) -> MincoreResidency | None:
        """The probe, or None where libc has no ``mincore`` (or it fails on a mapping)."""
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fn = libc.mincore
        except (OSError, AttributeError):
            return None
        fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        fn.restype = ctypes.c_int
        probe = cls(fn)
        anon = mmap.mmap(-1, _PAGE)
        try:
            view = memoryview(anon)
            cell = ctypes.c_char.from_buffer(view)
            address = ctypes.addressof(cell)
            del cell
            view.release()
            if fn(address, _PAGE, probe._cvec) != 0:
                return None
        finally:
            anon.close()
        return probe

    def _address(self, seg: Segment) -> int:
        address = self._addresses.get(seg)
        if address is None:
            cell = ctypes.c_char.from_buffer(seg.view)
            address = ctypes.addressof(cell)
            del cell  # releases the buffer export: the mapping can close
            if len(self._addresses) >= 256:  # forget segments closed since (retention)
                self._addresses = {s: a for s, a in self._addresses.items() if not s.closed}
            self._addresses[seg] = address
        return address

    def _probe(self, seg: Segment, lo: int, hi: int) -> tuple[int, int] | None:
        """mincore of the pages of ``[lo, hi)`` into the vector: (the first page's offset in
        the segment, the number of pages); None when the segment is gone."""
        if seg.closed:
            return None  # the read itself answers for a segment gone
        rel = lo - seg.start
        first = rel - rel % _PAGE
        length = hi - seg.start - first
        pages = (length + _PAGE - 1) // _PAGE
        if pages > len(self._vec):
            self._vec = bytearray(pages)
            self._cvec = (ctypes.c_char * pages).from_buffer(self._vec)
        if self._mincore(self._address(seg) + first, length, self._cvec) != 0:
            # ENOMEM: not mapped (closed meanwhile), nothing to load; anything else: the read
            # goes on as it would without this probe, on the loop.
            return None
        return first, pages

    def resident(self, seg: Segment, lo: int, hi: int) -> bool:
        probed = None if hi <= lo else self._probe(seg, lo, hi)
        return probed is None or self._vec.find(0, 0, probed[1]) < 0

    def cold_until(self, seg: Segment, lo: int, hi: int) -> int:
        probed = None if hi <= lo else self._probe(seg, lo, hi)
        if probed is None:
            return hi
        first, pages = probed
        cached = self._vec.find(1, 0, pages)  # the kernel sets bit 0 of a cached page's byte
        if cached < 0:
            return hi
        return max(lo, min(hi, seg.start + first + cached * _PAGE))


def residency_for(write_pos: Callable[[], int]) -> Residency:
    """``mincore`` where it can be called, else RocketMQ's distance rule."""
    probe = MincoreResidency.load()
    if probe is not None:
        return probe
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return DistanceResidency(write_pos, memory)


def read_spans(
    queue: ConsumeQueue,
    commitlog: CommitLog,
    offset: int,
    max_count: int,
    max_bytes: int,
    max_physical_offset: int | None,
    tag_hashes: object,
    entries_to_scan: int,
) -> list[tuple[Segment, int, int]]:
    """The CommitLog ranges ``(segment, lo, hi)`` that ``queue_read.scan`` with these arguments
    would copy (adjacent records in one range), found from the ConsumeQueue's entries alone; an
    entry pointing outside the CommitLog ends them (the scan reports it). ``tag_hashes`` as the
    scan's: a frozenset of tag hashes passes over the entries whose hash is not in it; any other
    filter passes over none here (the ranges may then hold records the scan passes over, within
    the same ``max_count`` and ``max_bytes``)."""
    if not isinstance(tag_hashes, frozenset):
        tag_hashes = None
    cl_min = commitlog.min_offset
    cl_max = commitlog.write_pos
    visible = cl_max if max_physical_offset is None else min(cl_max, max_physical_offset)
    wanted = max(1, min(max_count, max_bytes // MIN_RECORD_SIZE + 1))
    entries = wanted if tag_hashes is None else max(wanted, entries_to_scan)
    hashes: frozenset[int] | None = tag_hashes
    spans: list[tuple[Segment, int, int]] = []
    count = total = 0
    for physical, size, tags in ENTRY.iter_unpack(queue.read(offset, entries)):
        end = physical + size
        if hashes is not None:
            if count == wanted or end > visible:
                break
            if tags not in hashes:
                continue
        if size < MIN_RECORD_SIZE or physical < cl_min or end > visible:
            break
        if count and total + size > max_bytes:
            break
        if spans and spans[-1][2] == physical and end <= spans[-1][0].end:
            seg, lo, _ = spans[-1]
            spans[-1] = (seg, lo, end)
        else:
            seg_at = commitlog.segment_at(physical)
            if seg_at is None or end > seg_at.end:
                break
            spans.append((seg_at, physical, end))
        count += 1
        total += size
    return spans


def cold_spans(
    spans: list[tuple[Segment, int, int]],
    residency: Residency,
    write_pos: int,
    ahead: int = READ_AHEAD,
) -> list[ColdSpan]:
    """Those of ``spans`` not wholly in the page cache, as file ranges to load: each from its
    start for up to ``ahead`` bytes, within its segment, below ``write_pos`` and up to the
    first page past the span that is cached already (a span within the one before it so
    extended is in it)."""
    out: list[ColdSpan] = []
    for seg, lo, hi in spans:
        last = out[-1] if out else None
        if last is not None and last.path == seg.path:
            last_end = seg.start + last.position + last.size
            if lo < last_end:
                if hi > last_end:
                    out[-1] = ColdSpan(seg.path, last.position, hi - seg.start - last.position)
                continue
        if not residency.resident(seg, lo, hi):
            end = max(hi, residency.cold_until(seg, hi, min(lo + ahead, seg.end, write_pos)))
            out.append(ColdSpan(seg.path, lo - seg.start, end - lo))
    return out
