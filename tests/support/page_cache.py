"""Evicting files' pages from the page cache, for tests and benches of cold reads."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["evict"]


def evict(path: Path) -> None:
    """Drop ``path``'s pages from the page cache (POSIX_FADV_DONTNEED, after an fsync so none is
    dirty): they leave for real, except those a process maps into its page tables."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
