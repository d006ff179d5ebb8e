"""A pre-allocated, memory-mapped segment file: the unit of CommitLog and ConsumeQueue storage.

A segment is named by its 20-digit zero-padded start offset so ``ls`` sorts segments in order.
It is created at ``<name>.tmp`` at its full length, allocated with ``posix_fallocate``, fsynced
and renamed, so a segment file under its final name always has its full size. A CommitLog
segment is allocated in full at its creation (a full disk fails there, never while writing
through the mapping). A ConsumeQueue segment is created sparse (``allocate``: only its first
chunk has blocks) and :meth:`Segment.allocate` gives it blocks ahead of the writes, a chunk at a
time: a store of many small queues uses disk for what they hold, not 6 MB a queue, and a full
disk still fails at a ``posix_fallocate`` (:class:`DiskFullError` naming the file), never at a
write through the mapping into a hole (SIGBUS, which no Python code can catch). Holes read as
zeros, as the unwritten extents of a fully allocated file do, through the mapping and the file
alike. A queue's first ConsumeQueue segment is not fsynced when it
is created (``sync`` off: about 5 ms a file on the event loop, for every new queue on every
replica): the flush that makes its first entries durable fsyncs it and its directory, and until
then it holds nothing the store's checkpoint trusts, so such a file a power loss left short is
dropped at the open and rebuilt from the CommitLog.

:meth:`Segment.fsync` opens the file by path and calls ``os.fsync`` (which releases the GIL and
writes back pages dirtied through the mapping too), so a worker thread can flush a segment while
the event-loop thread writes to it, retires or closes it: it never touches the mapping itself.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
from collections.abc import Callable
from pathlib import Path
from typing import Final

from storage.errors import DiskFullError, StoreError

NAME_DIGITS: Final = 20
_CHUNK: Final = 1 << 20
_ZEROS: Final = bytes(_CHUNK)
_NO_SPACE: Final = frozenset({errno.ENOSPC, errno.EDQUOT})


def segment_name(start: int) -> str:
    return f"{start:0{NAME_DIGITS}d}"


def parse_segment_name(name: str) -> int | None:
    """The start offset a segment file name stands for, or None if it is not a segment name."""
    if len(name) == NAME_DIGITS and name.isdigit():
        return int(name)
    return None


def list_segment_files(directory: Path) -> list[tuple[int, Path]]:
    """(start, path) of the segment files in ``directory``, ascending; stray temp files removed."""
    found: list[tuple[int, Path]] = []
    if not directory.is_dir():
        return found
    for path in directory.iterdir():
        if path.name.endswith(".tmp") and parse_segment_name(path.name[:-4]) is not None:
            # A segment whose allocation never finished: it never held data.
            path.unlink(missing_ok=True)
            continue
        start = parse_segment_name(path.name)
        if start is not None:
            found.append((start, path))
    found.sort()
    return found


# MADV_POPULATE_WRITE (Linux 5.14+); Python 3.11's mmap module does not name it.
_MADV_POPULATE_WRITE: int | None = getattr(
    mmap, "MADV_POPULATE_WRITE", 23 if hasattr(mmap.mmap, "madvise") else None
)


class Segment:
    """One mapped file. ``view`` is a writable memoryview over the whole file.

    A mapping holds a file descriptor (Python's mmap keeps a duplicate of the one it was given)
    and one of the kernel's memory maps (``vm.max_map_count``, 65,530 by default) for as long as
    it lives. Stores of many small files (the ConsumeQueues, a file or more per queue) open
    their segments unmapped (:meth:`open_unmapped`) and keep only the ones in use mapped
    (:meth:`map`, :meth:`unmap`: ``storage.consumequeue.SegmentMaps``); a write to or a read of
    one not mapped goes through the file (:meth:`write`, :meth:`read`), with the descriptor
    :meth:`hold` opened when it holds one (``storage.consumequeue.SegmentFiles`` keeps the
    lately used ones open), else with one opened and closed for it."""

    __slots__ = (
        "_mm",
        "alloc_hi",
        "alloc_lo",
        "closed",
        "fd",
        "mapped",
        "path",
        "referenced",
        "size",
        "start",
        "view",
    )

    def __init__(self, path: Path, start: int, fd: int, size: int) -> None:
        """Map ``fd`` (the mapping keeps its own duplicate; the caller closes ``fd``); with
        ``fd`` -1, leave it unmapped until :meth:`map`."""
        self.path = path
        self.start = start
        self.size = size
        self.closed = False
        self.referenced = False
        """Used since the last look of :class:`storage.consumequeue.SegmentMaps`."""
        self.mapped = False
        self.view = memoryview(b"")
        self.fd = -1
        """The descriptor :meth:`write` and :meth:`read` use while held (:meth:`hold`); -1
        when none is: they open one for the call."""
        self.alloc_lo = 0
        self.alloc_hi = 0
        """[alloc_lo, alloc_hi) (relative) is known to have its blocks (:meth:`allocate`);
        nothing is known of a segment opened (the next :meth:`allocate` asks the file system
        again, which costs nothing for blocks it has)."""
        if fd >= 0:
            self._map(fd)

    def _map(self, fd: int) -> None:
        self._mm = mmap.mmap(fd, self.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.view = memoryview(self._mm)
        self.mapped = True

    @classmethod
    def open_unmapped(cls, path: Path, start: int, size: int | None = None) -> Segment:
        """The segment at ``path``, not mapped (no descriptor held) until :meth:`map`
        (``size``: the file's, when the caller has just read it)."""
        if size is None:
            size = path.stat().st_size
        if size == 0:
            raise StoreError(f"segment {path} is empty")
        return cls(path, start, -1, size)

    def map(self) -> None:
        """Map the file again (a no-op while mapped or once closed)."""
        if self.mapped or self.closed:
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        try:
            self._map(fd)
        finally:
            os.close(fd)

    def unmap(self) -> bool:
        """Drop the mapping and its descriptor until :meth:`map` (the pages written through it
        stay in the page cache and are written back as any others; :meth:`fsync` goes by the
        path). False, still mapped, when a reader holds a slice of ``view``."""
        if not self.mapped:
            return True
        try:
            self.view.release()
        except BufferError:
            return False
        self._mm.close()
        self.view = memoryview(b"")
        self.mapped = False
        return True

    def hold(self) -> None:
        """Open the file for :meth:`write` and :meth:`read` until :meth:`release` (a no-op
        while held). Raises :class:`StoreError` when it cannot be opened or is closed."""
        if self.fd >= 0:
            return
        if self.closed:
            raise StoreError(f"segment {self.path} is closed")
        try:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        except OSError as exc:
            raise StoreError(f"cannot open {self.path}: {exc}") from exc

    def release(self) -> None:
        """Close the descriptor :meth:`hold` opened (a no-op when none is held). What was
        written through it stays in the page cache: :meth:`fsync` (by path) makes it durable,
        as it does the writes of a descriptor opened for one write."""
        fd = self.fd
        if fd >= 0:
            self.fd = -1
            os.close(fd)

    def write(self, rel: int, data: bytes | bytearray) -> None:
        """Write ``data`` at ``rel`` (relative) through the file (``pwrite``: with the descriptor
        :meth:`hold` opened, else one opened for the write), not through a mapping: a segment
        not mapped stays unmapped (mapping it for the write cost an ``mmap``, a page fault, and
        the ``munmap`` of another segment to make room). The bytes land in the page cache a
        mapping of the file reads, and :meth:`fsync` (by path) makes them durable as it does
        what was written through the mapping, whether the descriptor is still held or not.
        Raises :class:`StoreError` (:class:`DiskFullError` for a full disk) when the write fails
        or falls short."""
        if rel < 0 or rel + len(data) > self.size:
            raise StoreError(f"write of {len(data)} bytes at {rel} outside segment {self.path}")
        try:
            fd = self.fd if self.fd >= 0 else os.open(self.path, os.O_WRONLY | os.O_CLOEXEC)
            try:
                written = os.pwrite(fd, data, rel)
            finally:
                if fd != self.fd:  # opened for this write
                    os.close(fd)
        except OSError as exc:
            if exc.errno in _NO_SPACE:
                raise DiskFullError(f"no space to write {self.path}") from exc
            raise StoreError(f"cannot write {self.path}: {exc}") from exc
        if written != len(data):
            raise StoreError(f"short write to {self.path}: {written} of {len(data)} bytes at {rel}")

    def read(self, rel: int, size: int) -> bytes:
        """``size`` bytes at ``rel`` (relative) read through the file (``pread``: with the
        descriptor :meth:`hold` opened, else one opened for the read), not through a mapping:
        a segment not mapped stays unmapped (mapping it for the read cost an ``mmap``, a page
        fault, and the ``munmap`` of another segment to make room). It reads the page cache a
        mapping of the file reads, so it sees what was written either way. Raises
        :class:`StoreError` when the read fails or the file is shorter than the segment."""
        if rel < 0 or size < 0 or rel + size > self.size:
            raise StoreError(f"read of {size} bytes at {rel} outside segment {self.path}")
        try:
            fd = self.fd if self.fd >= 0 else os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                data = os.pread(fd, size, rel)
            finally:
                if fd != self.fd:  # opened for this read
                    os.close(fd)
        except OSError as exc:
            raise StoreError(f"cannot read {self.path}: {exc}") from exc
        if len(data) != size:
            raise StoreError(f"short read of {self.path}: {len(data)} of {size} bytes at {rel}")
        return data

    def __repr__(self) -> str:
        return f"Segment({self.path.name}, size={self.size})"

    @property
    def end(self) -> int:
        return self.start + self.size

    @classmethod
    def create(
        cls,
        directory: Path,
        start: int,
        size: int,
        *,
        sync: bool = True,
        mapped: bool = True,
        allocate: int | None = None,
    ) -> Segment:
        """Allocate a zero-filled segment; raises :class:`DiskFullError` leaving no file behind.

        ``allocate``: the bytes at its start given blocks now (the rest a hole, the file at its
        full length all the same: ``ftruncate``), for a writer that calls :meth:`allocate`
        before each write; None (the default) allocates all of it.

        With ``sync`` off the allocation is not fsynced here: the caller's next flush fsyncs the
        file (and its directory) before anything trusts what it holds. After a power loss such a
        file may lie under its final name short or empty (``ConsumeQueue._allocated`` drops it
        after an unclean stop while it is its queue's only file and holds no trusted entry: the
        replay rebuilds what it held). With ``mapped`` off it is returned unmapped (no
        descriptor held), as :meth:`open_unmapped` returns one."""
        path = directory / segment_name(start)
        if path.exists():
            raise StoreError(f"segment {path} already exists")
        tmp = path.with_name(path.name + ".tmp")
        try:
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise _allocation_error(path, size, exc) from exc
        allocated = size if allocate is None else max(0, min(size, allocate))
        try:
            if allocated < size:
                os.ftruncate(fd, size)
            if allocated:
                os.posix_fallocate(fd, 0, allocated)
            if sync:
                os.fsync(fd)
            segment = cls(path, start, fd if mapped else -1, size)
            segment.alloc_hi = allocated
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise _allocation_error(path, size, exc) from exc
        finally:
            os.close(fd)
        try:
            os.rename(tmp, path)
        except OSError as exc:
            segment.close()
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise _allocation_error(path, size, exc) from exc
        return segment

    def allocate(self, lo: int, hi: int, chunk: int) -> bool:
        """Make sure bytes [lo, hi) (relative) have their blocks before anything is written
        there: ``posix_fallocate`` of [lo, hi) widened to whole ``chunk``s (rounded up to a
        multiple of the page size: a write through the mapping dirties whole pages, and a page
        with a hole in it may fault on a full disk), unless :meth:`allocate` or
        :meth:`create` already covered it. True when it asked the file system. Raises
        :class:`DiskFullError` (naming the file and the range) when the disk is full,
        :class:`StoreError` for any other failure: in both cases before anything was written,
        where a write through the mapping into a hole would have killed the process (SIGBUS)."""
        if hi <= lo or (self.alloc_lo <= lo and hi <= self.alloc_hi):
            return False
        chunk = max(1, -(-chunk // mmap.PAGESIZE)) * mmap.PAGESIZE
        # From the end of what is known to be allocated when [lo, hi) starts inside it.
        a = self.alloc_hi if self.alloc_lo <= lo < self.alloc_hi else lo - lo % chunk
        b = min(self.size, -(-hi // chunk) * chunk)
        try:
            fd = self.fd if self.fd >= 0 else os.open(self.path, os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.posix_fallocate(fd, a, b - a)
            finally:
                if fd != self.fd:  # opened for this call
                    os.close(fd)
        except OSError as exc:
            if exc.errno in _NO_SPACE:
                raise DiskFullError(
                    f"no space to allocate {b - a} bytes at {a} of {self.path}"
                ) from exc
            raise StoreError(f"cannot allocate {b - a} bytes at {a} of {self.path}: {exc}") from exc
        if self.alloc_lo < self.alloc_hi and a <= self.alloc_hi and b >= self.alloc_lo:
            self.alloc_lo, self.alloc_hi = min(a, self.alloc_lo), max(b, self.alloc_hi)
        else:
            self.alloc_lo, self.alloc_hi = a, b
        return True

    @classmethod
    def open(cls, path: Path, start: int) -> Segment:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        try:
            size = os.fstat(fd).st_size
            if size == 0:
                raise StoreError(f"segment {path} is empty")
            return cls(path, start, fd, size)
        finally:
            os.close(fd)

    def fsync(self) -> None:
        """Make every write to this segment durable; a no-op once the file is deleted."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def zero(self, lo: int, hi: int) -> bool:
        """Zero bytes [lo, hi) (relative); only pages holding data are written. True if any did."""
        view = self.view
        changed = False
        for start, stop in self.data_ranges(lo, self.nonzero_end(lo, hi)):  # holes are zeros
            for a in range(start, stop, _CHUNK):
                b = min(a + _CHUNK, stop)
                if bytes(view[a:b]) != _ZEROS[: b - a]:
                    view[a:b] = _ZEROS[: b - a]
                    changed = True
        return changed

    def data_ranges(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """The ranges of [lo, hi) (relative) that may hold data, in order: the file system's
        ``SEEK_DATA``/``SEEK_HOLE`` answer, whose holes read as zeros by definition. A
        pre-allocated segment's never-written tail is such a hole (an unwritten extent: ext4, XFS,
        btrfs, tmpfs); what was written through the mapping (even zeros, even not yet written
        back) is data. Where the file system cannot tell, all of [lo, hi)."""
        if hi <= lo:
            return []
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return [(lo, hi)]
        try:
            return _data_ranges(fd, lo, hi)
        finally:
            os.close(fd)

    def nonzero_end(self, lo: int, hi: int) -> int:
        """Where the last non-zero byte of [lo, hi) (relative) ends; ``lo`` if there is none.
        Reads only :meth:`data_ranges`, from the end back to the first non-zero chunk, through
        the file (``pread``: no page faults on the mapping, no copies of it)."""
        if hi <= lo:
            return lo
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            fd = -1
        full = bytearray(_CHUNK)
        try:
            ranges = _data_ranges(fd, lo, hi) if fd >= 0 else [(lo, hi)]
            for start, stop in reversed(ranges):
                b = stop
                while b > start:
                    a = max(start, b - _CHUNK)
                    chunk = full if b - a == _CHUNK else bytearray(b - a)
                    if fd < 0 or _pread_into(fd, chunk, a) != b - a:
                        chunk[:] = self.view[a:b]  # the file is gone, short or failing
                    if chunk != (_ZEROS if chunk is full else _ZEROS[: b - a]):  # memcmp
                        return a + len(chunk.rstrip(b"\0"))
                    b = a
        finally:
            if fd >= 0:
                os.close(fd)
        return lo

    def populate(self, lo: int, hi: int) -> bool:
        """Pre-fault pages [lo, hi) (relative) writable, so the writer does not take the page
        faults itself (RocketMQ's warm mapped file). False when the kernel cannot."""
        if _MADV_POPULATE_WRITE is None or self.closed or not self.mapped:
            return False
        lo -= lo % mmap.PAGESIZE
        hi = min(hi, self.size)
        if hi <= lo:
            return True
        try:
            self._mm.madvise(_MADV_POPULATE_WRITE, lo, hi - lo)
        except (OSError, ValueError):
            return False
        return True

    def close(self, later: Callable[[Callable[[], None]], object] | None = None) -> None:
        """Unmap. A reader still holding a slice of ``view`` keeps the mapping alive until it lets
        go of it (the mapping then goes with the last reference). ``later``: hand the unmapping
        to it (a worker thread's submit): unmapping a deleted file frees its page cache, 1.1 s
        for a 1 GiB CommitLog segment here, and releases the GIL while it does."""
        if self.closed:
            return
        self.closed = True
        self.release()
        if not self.mapped:
            return
        with contextlib.suppress(BufferError):
            self.view.release()
        if later is None:
            self._unmap_now()
        else:
            later(self._unmap_now)

    def _unmap_now(self) -> None:
        with contextlib.suppress(BufferError):
            self._mm.close()

    def unlink(self) -> None:
        self.path.unlink(missing_ok=True)

    def rfind(self, sub: bytes, lo: int, hi: int) -> int:
        """Position of the last ``sub`` lying entirely inside [lo, hi), or -1."""
        return self._mm.rfind(sub, lo, hi)


def _pread_into(fd: int, buf: bytearray, pos: int) -> int:
    try:
        return os.preadv(fd, [buf], pos)
    except OSError:
        return -1


def _data_ranges(fd: int, lo: int, hi: int) -> list[tuple[int, int]]:
    ranges: list[tuple[int, int]] = []
    pos = lo
    try:
        while pos < hi:
            try:
                data = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno != errno.ENXIO:  # ENXIO: nothing but a hole from pos on
                    ranges.append((pos, hi))  # SEEK_DATA not supported: all of it
                break
            if data >= hi:
                break
            hole = min(os.lseek(fd, data, os.SEEK_HOLE), hi)
            ranges.append((data, hole))
            pos = hole
    except OSError:
        return [(lo, hi)]
    return ranges


def _allocation_error(path: Path, size: int, exc: OSError) -> StoreError:
    if exc.errno in _NO_SPACE:
        return DiskFullError(f"no space to allocate {path} ({size} bytes)")
    return StoreError(f"cannot allocate {path}: {exc}")
