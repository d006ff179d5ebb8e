"""One ConsumeQueue: the index of one (topic, queue id) into the CommitLog.

Entries are 20 bytes, big-endian: CommitLog offset int64 · record size int32 · tag hash int64.
Entry ``i`` (the queue offset) lives in segment file ``<20-digit byte offset>`` where the byte
offset is ``(i - i % entries_per_segment) * 20``. Segments are created at their full length and
zero-filled; an entry whose size is zero was never written, so the queue's max offset is found
by binary search. Written entries always form one run ``[min_offset, max_offset)`` with zeros
after it.

A segment is sparse: :meth:`ConsumeQueue.reserve` gives it blocks (``posix_fallocate``) a chunk
of ``allocate_bytes`` (64 KiB by default, 3,276 entries) at a time, before any entry is written
into the chunk, so a queue of one message uses 64 KiB of disk, not the segment's 6 MB, and a
full disk fails there (:class:`storage.errors.DiskFullError`, nothing written) instead of at a
write through the mapping into a hole, which kills the process (SIGBUS). The hole past the
allocated chunks reads as zeros (never-written entries) through the mapping and the file, as
the unwritten extents of a fully allocated file did.
"""

from __future__ import annotations

import errno
import resource
import struct
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

import structlog

from storage.errors import DiskFullError, StoreError
from storage.filter_index import QueueDigests
from storage.segment import Segment, list_segment_files
from storage.tracker import FileTracker

_NO_SPACE: Final = frozenset({errno.ENOSPC, errno.EDQUOT})
ENTRY: Final = struct.Struct(">qiq")
ENTRY_SIZE: Final = ENTRY.size
_HOLE_WINDOW: Final = 4096
"""Entries looked at past an unwritten one, to tell a damaged entry from the queue's end."""
MAPPED_SEGMENTS: Final = 4096
"""ConsumeQueue segments a store keeps mapped at most (:class:`SegmentMaps`), fewer where this
process may open fewer descriptors or the kernel gives fewer memory maps (:func:`mapped_limit`)."""

ALLOCATE_BYTES: Final = 64 * 1024
"""The chunk a ConsumeQueue segment is given blocks in, by default (:meth:`ConsumeQueue.reserve`;
the broker's ``consumequeue_allocate_bytes``): a multiple of the page size."""

OPEN_SEGMENTS: Final = 2048
"""ConsumeQueue segment files a store keeps open past the mapped ones at most, by default
(:class:`SegmentFiles`; the broker's ``consumequeue_open_files``), fewer where this process may
open fewer descriptors (:func:`open_limit`)."""

log = structlog.get_logger(__name__)


def mapped_limit() -> int:
    """:data:`MAPPED_SEGMENTS`, or a quarter of the descriptors this process may open
    (``RLIMIT_NOFILE``) or of the kernel's memory maps (``vm.max_map_count``) when less: the
    rest is for connections, the CommitLog and the indexes."""
    limit = MAPPED_SEGMENTS
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY:
        limit = min(limit, soft // 4)
    try:
        limit = min(limit, int(Path("/proc/sys/vm/max_map_count").read_text()) // 4)
    except (OSError, ValueError):
        pass
    return max(16, limit)


def open_limit(wanted: int) -> int:
    """``wanted``, or an eighth of the descriptors this process may open (``RLIMIT_NOFILE``)
    when less: with :func:`mapped_limit`'s quarter, the ConsumeQueues hold at most three eighths
    of them, the rest left for connections, the CommitLog and the indexes. 0 (off) stays 0."""
    if wanted <= 0:
        return 0
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY:
        wanted = min(wanted, soft // 8)
    return max(1, wanted)


class SegmentFiles:
    """Keeps at most ``limit`` ConsumeQueue segment files open for the reads and writes that go
    through the file (those past the mapped limit, :class:`SegmentMaps`). Without it each such
    read or write opened the file by path, read or wrote and closed it: three system calls and a
    path lookup an entry read or batch written, where a queue whose file is kept open costs one
    ``pread`` or ``pwrite``.

    Which files stay open: a file not open is opened and kept, closing the least lately used
    one when the cache is full, only if it was used more often than that one (uses counted per
    segment, consecutive uses of one segment once, every count halved each ``max(8 * limit,
    counted)`` uses so that what was busy long ago gives way); otherwise it is opened as the one
    spare, closing the spare before it, and the files kept open stay. Plain least lately used
    kept nothing for puts or reads over more files than the limit in turn (the bench's puts over
    10,000 queues, a consumer over all of a broker's queues): each access closed the file a
    later one wanted, so every access cost an open, the write or read and a close; now the
    ``limit`` files stay open through such passes and their accesses cost one call, the others
    what they cost before.

    Durability is as it was: the bytes written through a held descriptor are in the page cache
    as the old one-write descriptor's were, the segment is marked for a flush
    (:class:`storage.tracker.FileTracker`) as before, and the flusher fsyncs it by path, which
    writes back the file's dirty pages whichever descriptor wrote them; closing a descriptor
    (evicted here) writes back and discards nothing. A segment deleted or closed leaves the
    cache first (:meth:`drop`, :meth:`ConsumeQueue.close`), so no descriptor keeps a deleted
    file's blocks. Loop thread only."""

    __slots__ = ("_age_at", "_last", "_open", "_spare", "_ticks", "_uses", "limit")

    def __init__(self, limit: int = OPEN_SEGMENTS) -> None:
        self.limit = open_limit(limit)
        self._open: OrderedDict[int, Segment] = OrderedDict()
        self._spare: Segment | None = None
        """The last file used that was not admitted, open until another takes its place."""
        self._uses: dict[int, int] = {}
        """Uses of each segment counted (kept open or not), by ``id``; halved every
        ``_age_at`` counted uses."""
        self._last = 0
        """``id`` of the segment used last: its consecutive uses count once."""
        self._ticks = 0
        self._age_at = 8 * max(1, self.limit)

    def __len__(self) -> int:
        """Files kept open (the spare not counted)."""
        return len(self._open)

    def hold(self, seg: Segment) -> Segment:
        """``seg`` with its file open (:meth:`Segment.hold`): kept, or admitted (the least
        lately used other one closed when the cache is full and ``seg`` was used more often),
        or else as the spare; ``seg`` as it is when the limit is 0."""
        if self.limit <= 0:
            return seg
        key = id(seg)
        uses = self._uses
        count = uses.get(key, 0)
        if key != self._last:
            self._last = key
            count += 1
            uses[key] = count
            self._ticks += 1
            if self._ticks >= self._age_at:
                self._age()
        opened = self._open
        if key in opened and seg.fd >= 0:
            opened.move_to_end(key)
            return seg
        if len(opened) >= self.limit:
            if uses.get(next(iter(opened)), 0) >= count:
                return self._as_spare(seg)  # not admitted: the files kept open stay
            while len(opened) >= self.limit:
                _, old = opened.popitem(last=False)
                old.release()
        if self._spare is seg:
            self._spare = None
        seg.hold()
        opened[key] = seg
        return seg

    def _as_spare(self, seg: Segment) -> Segment:
        spare = self._spare
        if spare is not seg:
            if spare is not None:
                spare.release()
            self._spare = None
            seg.hold()
            self._spare = seg
        return seg

    def _age(self) -> None:
        """Halve every count (forgetting those at 1), so that what was busy long ago gives way
        to what is busy now; the next aging after as many counted uses as segments still
        counted (at least ``8 * limit``): O(1) a use."""
        self._uses = {key: n >> 1 for key, n in self._uses.items() if n > 1}
        self._ticks = 0
        self._age_at = max(8 * max(1, self.limit), len(self._uses))

    def drop(self, seg: Segment) -> None:
        """``seg`` is being deleted or closed: its descriptor is closed now."""
        key = id(seg)
        self._uses.pop(key, None)
        if self._last == key:
            self._last = 0
        if self._spare is seg:
            self._spare = None
            seg.release()
        if self._open.pop(key, None) is not None:
            seg.release()

    def close(self) -> None:
        """Close every descriptor held (a store's close)."""
        self._uses.clear()
        self._last = 0
        spare, self._spare = self._spare, None
        if spare is not None:
            spare.release()
        while self._open:
            _, seg = self._open.popitem(last=False)
            seg.release()


class SegmentMaps:
    """Keeps at most ``limit`` ConsumeQueue segments mapped, the ones used lately.

    A mapped segment holds a file descriptor and one of the kernel's memory maps; a store with
    a segment per queue held every one mapped, so 20,000 queues with messages took 20,000
    descriptors (past a ``LimitNOFILE`` of 1,024 or 20,000 the next queue's first put failed)
    and ``vm.max_map_count`` (65,530) bounded the queues. Segments open unmapped; one is mapped
    when an entry of it is read or written, and past the limit the least lately used is
    unmapped (second chance: a segment used since the last look is kept once more). A write or
    a read maps a segment only while there is room (:meth:`room`): past the limit it goes
    through the file (:meth:`storage.segment.Segment.write`, :meth:`~storage.segment.Segment.read`)
    and unmaps nothing, so puts and reads over more queues than the limit, in turn, do not map
    and unmap a segment each. Only a queue's load (its first use after a start) still maps its
    first segment and may unmap another. A segment deleted or closed leaves the count
    (:meth:`drop`). Loop thread only (the flusher fsyncs by path)."""

    __slots__ = ("_mapped", "limit")

    def __init__(self, limit: int | None = None) -> None:
        self.limit = max(1, mapped_limit() if limit is None else limit)
        self._mapped: OrderedDict[int, Segment] = OrderedDict()

    def __len__(self) -> int:
        return len(self._mapped)

    def room(self) -> bool:
        """Fewer than ``limit`` segments mapped: one more can be, unmapping none."""
        return len(self._mapped) < self.limit

    def use(self, seg: Segment) -> Segment:
        """``seg``, mapped."""
        if not seg.mapped and not seg.closed:
            self._make_room()
            seg.map()
            self._mapped[id(seg)] = seg
        seg.referenced = True
        return seg

    def drop(self, seg: Segment) -> None:
        """``seg`` is closed or being deleted: it no longer counts against the limit (reads
        and writes no longer unmap others to make room, so nothing else would take it out)."""
        self._mapped.pop(id(seg), None)

    def add(self, seg: Segment) -> Segment:
        """A segment just created (mapped)."""
        self._make_room()
        self._mapped[id(seg)] = seg
        seg.referenced = True
        return seg

    def _make_room(self) -> None:
        mapped = self._mapped
        looks = 2 * len(mapped) + 1  # a reader may hold every one: then go past the limit
        while len(mapped) >= self.limit and looks > 0:
            looks -= 1
            key, seg = mapped.popitem(last=False)
            if seg.closed or not seg.mapped:
                continue
            if seg.referenced:
                seg.referenced = False
                mapped[key] = seg
            elif not seg.unmap():
                mapped[key] = seg


class ConsumeQueue:
    __slots__ = (
        "_files",
        "_first_index",
        "_maps",
        "_tracker",
        "allocate_bytes",
        "appended",
        "digests",
        "directory",
        "holes",
        "max_offset",
        "min_offset",
        "per_segment",
        "queue_id",
        "segment_bytes",
        "segments",
        "topic",
    )

    def __init__(
        self,
        directory: Path,
        topic: str,
        queue_id: int,
        entries_per_segment: int,
        tracker: FileTracker,
        maps: SegmentMaps | None = None,
        files: SegmentFiles | None = None,
        allocate_bytes: int = ALLOCATE_BYTES,
    ) -> None:
        self.directory = directory
        self.topic = topic
        self.queue_id = queue_id
        self.per_segment = entries_per_segment
        self.segment_bytes = entries_per_segment * ENTRY_SIZE
        self._tracker = tracker
        self._maps = SegmentMaps() if maps is None else maps
        self._files = SegmentFiles() if files is None else files
        self.allocate_bytes = allocate_bytes
        """Blocks are given to segments in chunks of this many bytes (:meth:`reserve`)."""
        self.segments: list[Segment] = []
        self._first_index = 0  # queue offset of segments[0]'s first entry
        self.min_offset = 0
        self.max_offset = 0
        self.holes: list[int] = []
        """Unwritten entries :meth:`load` found inside the queue (damage to rebuild)."""
        self.appended: Callable[[ConsumeQueue, int, Sequence[int]], None] | None = None
        """Called after :meth:`append` with the first queue offset written and the records'
        CommitLog offsets (the property filter index, ``storage.filter_index``)."""
        self.digests: QueueDigests | None = None
        """The property digests of the entries, when the filter index is on."""

    def __repr__(self) -> str:
        return f"ConsumeQueue({self.topic}:{self.queue_id} [{self.min_offset}, {self.max_offset}))"

    @property
    def key(self) -> tuple[str, int]:
        return self.topic, self.queue_id

    @property
    def is_empty(self) -> bool:
        return self.min_offset == self.max_offset

    # -- loading ---------------------------------------------------------------------------

    def load(self, trusted_physical: int, *, scrub: bool) -> None:
        """Open the segment files; keep only entries for records below ``trusted_physical``.

        Entries at or past it may be torn (written but not flushed before a crash): they are
        dropped here and rebuilt by replaying the CommitLog. ``scrub`` (after an unclean stop)
        zeroes everything past the kept entries, where stray entries may have survived a crash.
        """
        files: list[tuple[int, Path, int | None]] = [
            (start, path, None) for start, path in list_segment_files(self.directory)
        ]
        if scrub:
            files = self._allocated(files, trusted_physical)
        segments = [Segment.open_unmapped(path, start, size) for start, path, size in files]
        if not segments:
            return
        size = segments[-1].size
        if size % ENTRY_SIZE:
            raise StoreError(f"consume queue segment {segments[-1].path} has a bad size {size}")
        keep = 0
        for i, seg in enumerate(segments):
            if seg.size != size or seg.start % size:
                raise StoreError(f"consume queue segment {seg.path} has a bad size or name")
            if i and seg.start != segments[i - 1].end:
                keep = i
        if keep:
            log.warning(
                f"consume queue {self.topic}:{self.queue_id}: segments not contiguous, "
                f"dropping {keep} older ones",
                topic=self.topic,
                queue_id=self.queue_id,
            )
            for seg in segments[:keep]:
                self._retire(seg)
        self.segments = segments[keep:]
        self.segment_bytes = size
        self.per_segment = size // ENTRY_SIZE
        self._first_index = self.segments[0].start // ENTRY_SIZE
        first = self._maps.use(self.segments[0])
        self.min_offset = self._first_index + _first_written(first, self.per_segment)
        hi_end = self._first_index + len(self.segments) * self.per_segment
        # Entries past the last segment's data (SEEK_DATA: its hole, or the unwritten extents
        # of a file allocated in full) are zeros: the searches below stop there, so they read
        # no page of the hole (on tmpfs a read of a hole through a mapping takes a page).
        last = self.segments[-1]
        ranges = last.data_ranges(0, last.size)
        data_end = ranges[-1][1] if ranges else 0
        hi_end_data = hi_end - self.per_segment + min(self.per_segment, -(-data_end // ENTRY_SIZE))
        hi_end_data = max(hi_end_data, self.min_offset)
        lo = self._run_end(self.min_offset, hi_end_data, trusted_physical)
        # An unwritten (zero) entry followed by trusted entries is not the end: it is a damaged
        # entry inside the queue. Ending the queue there would hide the messages after it and
        # give their queue offsets to new messages.
        self.holes = []
        while lo < hi_end_data and self.entry(lo)[1] == 0:
            after = self._next_written(lo + 1, min(hi_end_data, lo + 1 + _HOLE_WINDOW))
            if after is None or self.entry(after)[0] >= trusted_physical:
                break  # the end, or torn entries past the checkpoint
            self.holes.append(lo)
            lo = self._run_end(after, hi_end_data, trusted_physical)
        self.max_offset = hi_end
        if scrub or (lo < hi_end_data and self.entry(lo)[1] != 0):
            self.truncate_to(lo)
        else:
            self.max_offset = lo

    def _allocated(
        self, files: list[tuple[int, Path, int | None]], trusted_physical: int
    ) -> list[tuple[int, Path, int | None]]:
        """After an unclean stop: a queue whose only segment file a power loss left without its
        full size (empty, shorter than the others would be, or not whole entries) and holding
        no entry the checkpoint trusts loses that file, which the replay writes again. A queue's
        first segment is created without an fsync and made durable by the flush that makes its
        first entries durable, before the checkpoint trusts them: a file whose allocation did
        not reach the disk holds only entries past the checkpoint. Anything else is left for
        the checks after this one, which refuse it: a later segment (created with an fsync) or
        a file with a trusted entry cut short is damage to flushed data, not an allocation."""
        if len(files) != 1:
            return files
        _start, path, _ = files[0]
        size = path.stat().st_size
        if size == self.segment_bytes and size:
            return files
        raw = path.read_bytes()
        for at in range(0, len(raw) - len(raw) % ENTRY_SIZE, ENTRY_SIZE):
            physical, length, _ = ENTRY.unpack_from(raw, at)
            if length and physical < trusted_physical:
                return files  # flushed entries: damage, refused below
        log.warning(
            f"consume queue {self.topic}:{self.queue_id}: segment {path.name} is {size} "
            f"bytes, not {self.segment_bytes}, and holds no entry the checkpoint trusts: "
            "created since the last flush, its allocation was not durable; dropping it "
            "(the replay of the commitlog writes its entries again)",
            topic=self.topic,
            queue_id=self.queue_id,
        )
        path.unlink(missing_ok=True)
        self._tracker.mark_dir(self.directory)
        return []

    def _run_end(self, lo: int, hi: int, trusted_physical: int) -> int:
        """The first index in ``[lo, hi)`` that is unwritten or points at or past
        ``trusted_physical``, found by binary search (written entries form one run)."""
        while lo < hi:
            mid = (lo + hi) // 2
            physical, size, _ = self.entry(mid)
            if size == 0 or physical >= trusted_physical:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def _next_written(self, lo: int, hi: int) -> int | None:
        """The first index in ``[lo, hi)`` whose entry is not all zero, or None."""
        index = lo
        while index < hi:
            seg = self._held(index)
            if seg is None:
                return None
            rel = index % self.per_segment
            take = min(hi - index, self.per_segment - rel)
            raw = self._bytes(seg, rel * ENTRY_SIZE, take * ENTRY_SIZE)
            zeros = len(raw) - len(raw.lstrip(b"\0"))
            if zeros < len(raw):
                return index + zeros // ENTRY_SIZE
            index += take
        return None

    def _retire(self, seg: Segment) -> None:
        """Delete ``seg`` (its descriptor and file now, its mapping once no reader holds a view
        of it)."""
        self._files.drop(seg)
        self._maps.drop(seg)
        self._tracker.retire(seg)

    # -- reading ---------------------------------------------------------------------------

    def _held(self, index: int) -> Segment | None:
        """The segment of entry ``index``, mapped or not; None outside the segments."""
        n = index // self.per_segment - self._first_index // self.per_segment
        if 0 <= n < len(self.segments):
            return self.segments[n]
        return None

    def _bytes(self, seg: Segment, pos: int, size: int) -> bytes:
        """``size`` bytes of ``seg`` at ``pos``: through its mapping when it is mapped or there
        is room to map it; past the limit through the file (``pread``), mapping nothing and
        unmapping no other queue's segment (:class:`SegmentMaps`), with the file kept open
        (:class:`SegmentFiles`)."""
        maps = self._maps
        if seg.mapped or maps.room():
            return bytes(maps.use(seg).view[pos : pos + size])
        return self._files.hold(seg).read(pos, size)

    def entry(self, index: int) -> tuple[int, int, int]:
        """(CommitLog offset, size, tag hash) of entry ``index``; zeros if never written."""
        seg = self._held(index)
        if seg is None:
            return 0, 0, 0
        pos = (index % self.per_segment) * ENTRY_SIZE
        maps = self._maps
        if seg.mapped or maps.room():
            physical, size, tags = ENTRY.unpack_from(maps.use(seg).view, pos)
        else:
            physical, size, tags = ENTRY.unpack(self._files.hold(seg).read(pos, ENTRY_SIZE))
        return int(physical), int(size), int(tags)

    def read(self, index: int, count: int) -> bytes:
        """Raw entries ``[index, index + count)``, clipped to ``max_offset``."""
        end = min(index + count, self.max_offset)
        parts: list[bytes] = []
        while index < end:
            seg = self._held(index)
            if seg is None:
                break
            rel = index % self.per_segment
            take = min(end - index, self.per_segment - rel)
            parts.append(self._bytes(seg, rel * ENTRY_SIZE, take * ENTRY_SIZE))
            index += take
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def first_at_or_after(self, physical: int) -> int:
        """The first queue offset in ``[min, max)`` whose record starts at or after ``physical``
        (``max_offset`` if none)."""
        lo, hi = self.min_offset, self.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            if self.entry(mid)[0] >= physical:
                hi = mid
            else:
                lo = mid + 1
        return lo

    # -- writing ---------------------------------------------------------------------------

    def reserve(self, first: int, count: int) -> None:
        """Create the segments entries ``[first, first + count)`` need and give the bytes of
        those entries their blocks (:meth:`storage.segment.Segment.allocate`, whole chunks of
        ``allocate_bytes``); may raise DiskFullError, having written no entry and removed the
        segments it created.

        ``first`` is ``max_offset``, or any later offset while the queue is empty (a replica
        that starts mid-queue, a queue rebuilt from a CommitLog whose start was deleted).
        """
        if first != self.max_offset and not (self.is_empty and first > self.max_offset):
            raise StoreError(
                f"consume queue {self.topic}:{self.queue_id} cannot write offset {first}, "
                f"next is {self.max_offset}"
            )
        first_seg = first - first % self.per_segment
        if self.segments and (
            first_seg < self._first_index
            or first_seg > self._first_index + len(self.segments) * self.per_segment
        ):
            # An empty queue jumping past its segments: they hold nothing live.
            for seg in self.segments:
                self._retire(seg)
            self.segments = []
        if not self.segments:
            self._first_index = first_seg
        last_needed = first + count - 1
        created = len(self.segments)
        while self._first_index + len(self.segments) * self.per_segment <= last_needed:
            start_index = self._first_index + len(self.segments) * self.per_segment
            new_dir = not self.directory.exists()
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
            except OSError as exc:  # a full disk, which has no block for the directory
                error = DiskFullError if exc.errno in _NO_SPACE else StoreError
                raise error(f"cannot create {self.directory}: {exc}") from exc
            if new_dir:
                self._tracker.mark_dir(self.directory.parent)
                self._tracker.mark_dir(self.directory.parent.parent)
            # A queue's first segment is not fsynced here (a few ms on the event loop per new
            # queue): the flush that syncs its entries fsyncs the file (the next flush its
            # directory) before the checkpoint trusts any entry in it, and the open after an
            # unclean stop drops it while it holds no trusted entry (_allocated). A later
            # segment is fsynced at once, so a short one is always damage the open refuses.
            # Created mapped while there is room; past the limit unmapped, and written
            # through the file (append), rather than unmapping another queue's segment.
            mapped = self._maps.room()
            # Sparse: the blocks its entries need are allocated below.
            seg = Segment.create(
                self.directory,
                start_index * ENTRY_SIZE,
                self.segment_bytes,
                sync=bool(self.segments),
                mapped=mapped,
                allocate=0,
            )
            self.segments.append(self._maps.add(seg) if mapped else seg)
            self._tracker.mark(seg, 0, 0)  # the file: its entries are marked as written
            self._tracker.mark_dir(self.directory)
        # Blocks before any entry is written (the appends write through the mapping): a full
        # disk fails here, not with a SIGBUS at the write. A system call once a chunk.
        index, end, per, chunk = first, first + count, self.per_segment, self.allocate_bytes
        try:
            while index < end:
                held = self._held(index)
                if held is None:  # not reached: the loop above created them
                    raise StoreError(f"consume queue {self.topic}:{self.queue_id}: no segment")
                rel = index % per
                take = min(end - index, per - rel)
                held.allocate(rel * ENTRY_SIZE, (rel + take) * ENTRY_SIZE, chunk)
                index += take
        except StoreError:
            # The segments made for these entries go as they came: a failed reserve leaves
            # the queue's files as they were (a new queue's none, then forgotten).
            for made in self.segments[created:]:
                self._retire(made)
            del self.segments[created:]
            raise

    def append(
        self,
        first: int,
        physical_offsets: Sequence[int],
        sizes: Sequence[int],
        tag_hashes: Sequence[int],
        digests: tuple[Sequence[int], Sequence[int]] | None = None,
    ) -> None:
        """Write entries from queue offset ``first`` (space already reserved). ``digests``:
        the entries' property digests (low and high halves) when the caller has them (a
        replica's scan), so the filter index does not read the records again."""
        if self.is_empty and first > self.max_offset:
            self.min_offset = self.max_offset = first
        index = written = self.max_offset
        n = len(physical_offsets)
        pack = ENTRY.pack_into
        per = self.per_segment
        i = 0
        maps = self._maps
        while i < n:
            seg = self._held(index)
            if seg is None:
                raise StoreError(f"consume queue {self.topic}:{self.queue_id}: no segment reserved")
            rel = index % per
            take = min(n - i, per - rel)
            pos = rel * ENTRY_SIZE
            if seg.mapped or maps.room():
                view = maps.use(seg).view
                for j in range(i, i + take):
                    pack(view, pos, physical_offsets[j], sizes[j], tag_hashes[j])
                    pos += ENTRY_SIZE
            else:
                # Not mapped and no room: through the file, the mapped segments left as they
                # are (SegmentMaps), with the file kept open (SegmentFiles). The same bytes in
                # the same page cache, marked for the flush below as a mapped write is.
                raw = bytearray(take * ENTRY_SIZE)
                at = 0
                for j in range(i, i + take):
                    pack(raw, at, physical_offsets[j], sizes[j], tag_hashes[j])
                    at += ENTRY_SIZE
                self._files.hold(seg).write(pos, raw)
            self._tracker.mark(seg, rel * ENTRY_SIZE, (rel + take) * ENTRY_SIZE)
            i += take
            index += take
        self.max_offset = index
        if self.appended is not None:
            if digests is None:
                self.appended(self, written, physical_offsets)
            else:
                held = self.digests
                if held is None:
                    held = self.digests = QueueDigests()
                held.put_halves(written, physical_offsets, digests[0], digests[1])

    # -- cutting ---------------------------------------------------------------------------

    def truncate_to(self, index: int) -> bool:
        """Drop entries from queue offset ``index`` on; True if anything on disk changed."""
        if index >= self.max_offset:
            return False
        index = max(index, self._first_index)
        changed = False
        keep: list[Segment] = []
        for seg in self.segments:
            seg_first = seg.start // ENTRY_SIZE
            if seg_first > index or (seg_first == index and keep):
                changed = True
                self._retire(seg)
                continue
            keep.append(seg)
            rel = index - seg_first
            if rel < self.per_segment and self._maps.use(seg).zero(rel * ENTRY_SIZE, seg.size):
                changed = True
                self._tracker.mark(seg, rel * ENTRY_SIZE)
        self.segments = keep
        self.max_offset = index
        self.min_offset = min(self.min_offset, index)
        return changed

    def truncate_physical(self, physical: int) -> bool:
        """Drop entries whose record starts at or after CommitLog offset ``physical``."""
        return self.truncate_to(self.first_at_or_after(physical))

    def delete_below(self, physical: int) -> int:
        """Retention: delete segments whose entries all point below CommitLog offset
        ``physical`` (never the last one) and move ``min_offset`` past such entries."""
        deleted = 0
        while len(self.segments) > 1:
            seg = self.segments[0]
            last_physical, last_size, _ = self.entry(seg.end // ENTRY_SIZE - 1)
            if last_size == 0 or last_physical >= physical:
                break
            self._retire(seg)
            self.segments.pop(0)
            self._first_index += self.per_segment
            deleted += 1
        self.min_offset = max(self.min_offset, self._first_index)
        self.min_offset = min(self.first_at_or_after(physical), self.max_offset)
        return deleted

    def close(self) -> None:
        for seg in self.segments:
            self._files.drop(seg)
            self._maps.drop(seg)
            seg.close()
        self.segments = []


def _first_written(segment: Segment, per_segment: int) -> int:
    """Index (within ``segment``) of its first written entry; 0 if it has none."""
    if ENTRY.unpack_from(segment.view, 0)[1]:
        return 0
    # Only the ranges that may hold data are read: the holes read as zeros.
    for lo, hi in segment.data_ranges(0, segment.size):
        raw = bytes(segment.view[lo:hi])
        zeros = len(raw) - len(raw.lstrip(b"\0"))
        if zeros < len(raw):
            return min((lo + zeros) // ENTRY_SIZE, per_segment - 1)
    return 0
