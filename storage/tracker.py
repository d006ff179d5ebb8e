"""What the next flush must make durable, shared by the writer and the flusher threads.

Writers (the event-loop thread) record the ConsumeQueue segments, the bytes of each they wrote,
and the directories they touched; the flusher (one worker thread) takes them with
:meth:`FileTracker.take`: every segment written, or only those with at least a number of pages of
new writes (the others stay marked for a later flush, :mod:`storage.store_files`).
"""

from __future__ import annotations

import mmap
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from storage.segment import Segment

_UNMAPPER = ThreadPoolExecutor(1, thread_name_prefix="unmap")
"""Unmaps deleted segments, one after another, off the caller's thread."""

PAGE = mmap.PAGESIZE


class FileTracker:
    __slots__ = ("_dirs", "_files", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._files: dict[Segment, list[int]] = {}
        """Each marked segment's written bytes since it was last taken: ``[lo, hi)``, relative
        (``lo == hi``: the file itself, no entry: a queue's first segment just created)."""
        self._dirs: set[Path] = set()

    def mark(self, segment: Segment, lo: int = 0, hi: int | None = None) -> None:
        """``segment`` has writes in bytes ``[lo, hi)`` (None: to its end) that a flush must make
        durable."""
        end = segment.size if hi is None else hi
        with self._lock:
            span = self._files.get(segment)
            if span is None:
                self._files[segment] = [lo, end]
                return
            if lo < span[0]:
                span[0] = lo
            if end > span[1]:
                span[1] = end

    def mark_dir(self, directory: Path) -> None:
        """``directory`` gained or lost an entry the next flush must make durable."""
        with self._lock:
            self._dirs.add(directory)

    def take(self, least_pages: int = 0) -> tuple[list[Segment], list[Path]]:
        """The segments marked so far whose writes span at least ``least_pages`` page
        boundaries (RocketMQ's count: the last written byte's page less the first's; 0: every
        marked segment), and every marked directory (deepest first), clearing their marks; the
        other segments stay marked."""
        with self._lock:
            if least_pages <= 0:
                taken, self._files = list(self._files), {}
            else:
                taken = [
                    seg
                    for seg, (lo, hi) in self._files.items()
                    if hi // PAGE - lo // PAGE >= least_pages
                ]
                for seg in taken:
                    del self._files[seg]
            dirs, self._dirs = self._dirs, set()
        return taken, sorted(dirs, key=lambda p: len(p.parts), reverse=True)

    def holds_writes(self) -> bool:
        """Is any segment still marked with written bytes (not only created)?"""
        with self._lock:
            return any(hi > lo for lo, hi in self._files.values())

    def retire(self, segment: Segment) -> None:
        """Delete ``segment``: its file now, its mapping once no reader holds a view of it, in
        a worker thread (the kernel frees the deleted file's page cache as it is unmapped: a
        second a GiB, which held the event loop of a broker deleting expired segments)."""
        segment.unlink()
        segment.close(later=_UNMAPPER.submit)
        with self._lock:
            self._files.pop(segment, None)
            self._dirs.add(segment.path.parent)
