"""What the next flush must make durable, shared by the writer and the flusher threads.

Writers (the event-loop thread) record the ConsumeQueue segments and the directories they
touched; the flusher (one worker thread) takes them with :meth:`FileTracker.take`.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from storage.segment import Segment

_UNMAPPER = ThreadPoolExecutor(1, thread_name_prefix="unmap")
"""Unmaps deleted segments, one after another, off the caller's thread."""


class FileTracker:
    __slots__ = ("_dirs", "_files", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._files: set[Segment] = set()
        self._dirs: set[Path] = set()

    def mark(self, segment: Segment) -> None:
        """``segment`` has writes the next flush must fsync."""
        with self._lock:
            self._files.add(segment)

    def mark_dir(self, directory: Path) -> None:
        """``directory`` gained or lost an entry the next flush must make durable."""
        with self._lock:
            self._dirs.add(directory)

    def take(self) -> tuple[list[Segment], list[Path]]:
        """Everything marked so far (deepest directories first), clearing the marks."""
        with self._lock:
            files, self._files = self._files, set()
            dirs, self._dirs = self._dirs, set()
        return list(files), sorted(dirs, key=lambda p: len(p.parts), reverse=True)

    def retire(self, segment: Segment) -> None:
        """Delete ``segment``: its file now, its mapping once no reader holds a view of it, in
        a worker thread (the kernel frees the deleted file's page cache as it is unmapped: a
        second a GiB, which held the event loop of a broker deleting expired segments)."""
        segment.unlink()
        segment.close(later=_UNMAPPER.submit)
        with self._lock:
            self._files.discard(segment)
            self._dirs.add(segment.path.parent)
