"""Durable storage for the Raft core.

- :class:`DiskStorage`: segmented log files with a CRC32 per entry, an atomic hard-state file,
  snapshot files, recovery that truncates a torn or corrupt tail.
- :class:`MemoryStorage`: its in-memory twin, for tests and the deterministic simulation.

Both implement :class:`StorageView` (:mod:`.view`), the read-only contract the Raft core reads
durable state through, plus one write call,
``save(hard_state=, entries=, snapshot=, compaction=, sync=)``, which takes a Ready's fields.
"""

from .disk import CorruptStorage, DiskStorage, RecoveryReport
from .files import CorruptFile
from .memory import MemoryStorage
from .view import StorageView

__all__ = [
    "CorruptFile",
    "CorruptStorage",
    "DiskStorage",
    "MemoryStorage",
    "RecoveryReport",
    "StorageView",
]
