"""The narrow, read-only view of durable storage that the Raft core needs: the contract between
:class:`controller.raft.RaftNode` and the storages beside this module.

The driver owns the storage and writes to it from each Ready (see :class:`RaftNode`); the core
only reads what is already durable through this protocol. Implementations:
:class:`storage.raftlog.MemoryStorage` (tests, simulation) and
:class:`storage.raftlog.DiskStorage` (segmented files).

Indexes: the log holds entries ``first_index() .. last_index()``; the snapshot covers everything
up to ``first_index() - 1``, whose term ``term(first_index() - 1)`` also answers. An empty log
with no snapshot has ``first_index() == 1`` and ``last_index() == 0``.
"""

from __future__ import annotations

from typing import Protocol

from protocol.raft_types import Entry, HardState, Snapshot, SnapshotMeta


class StorageView(Protocol):
    def hard_state(self) -> HardState:
        """The last durable hard state (all zero for a new node)."""
        ...

    def snapshot(self) -> Snapshot:
        """The latest durable snapshot (index 0 and empty data when there is none)."""
        ...

    def snapshot_meta(self) -> SnapshotMeta:
        """``snapshot().meta`` without touching the data."""
        ...

    def first_index(self) -> int: ...

    def last_index(self) -> int: ...

    def term(self, index: int) -> int:
        """Term of entry ``index`` for ``first_index() - 1 <= index <= last_index()``.

        Raises :class:`~protocol.raft_types.Compacted` below that range and
        :class:`~protocol.raft_types.Unavailable` above it."""
        ...

    def entries(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        """Entries ``[lo, hi)``, stopping before ``max_bytes`` is exceeded but always returning
        at least one entry when the range is not empty. Raises like :meth:`term`."""
        ...
