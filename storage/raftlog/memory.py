"""MemoryStorage: the in-memory twin of :class:`storage.raftlog.DiskStorage`.

It is both the core's read-only :class:`~storage.raftlog.view.StorageView` and the write side the
driver calls with each Ready. Tests and the simulation use it as a node's *durable* state: the
simulator only calls :meth:`save` once a Ready's simulated fsync completes, so a crash keeps
exactly what was persisted before it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from protocol.raft_types import (
    Compacted,
    Entry,
    HardState,
    Snapshot,
    SnapshotMeta,
    Unavailable,
    limit_size,
)


class MemoryStorage:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._hard_state = HardState()
        self._snapshot = Snapshot()
        self._entries: list[Entry] = []  # entries after the snapshot, contiguous

    # --- StorageView ---------------------------------------------------------------------------

    def hard_state(self) -> HardState:
        return self._hard_state

    def snapshot(self) -> Snapshot:
        return self._snapshot

    def snapshot_meta(self) -> SnapshotMeta:
        return self._snapshot.meta

    def first_index(self) -> int:
        return self._snapshot.index + 1

    def last_index(self) -> int:
        with self._lock:
            return self._snapshot.index + len(self._entries)

    def term(self, index: int) -> int:
        with self._lock:
            base = self._snapshot.index
            if index < base:
                raise Compacted(f"index {index} is compacted (snapshot at {base})")
            if index == base:
                return self._snapshot.term
            if index > base + len(self._entries):
                raise Unavailable(f"index {index} is past the last index")
            return self._entries[index - base - 1].term

    def entries(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        with self._lock:
            base = self._snapshot.index
            if lo <= base:
                raise Compacted(f"index {lo} is compacted (snapshot at {base})")
            if hi > base + len(self._entries) + 1:
                raise Unavailable(f"index {hi - 1} is past the last index")
            return limit_size(self._entries[lo - base - 1 : hi - base - 1], max_bytes)

    # --- writes ----------------------------------------------------------------------------------

    def save(
        self,
        *,
        hard_state: HardState | None = None,
        entries: Sequence[Entry] = (),
        snapshot: Snapshot | None = None,
        compaction: Snapshot | None = None,
        sync: bool = True,
    ) -> None:
        """Persist one Ready's worth, in the order the core requires."""
        if snapshot is not None:
            self.apply_snapshot(snapshot)
        if entries:
            self.append(entries)
        if hard_state is not None:
            self.set_hard_state(hard_state)
        if compaction is not None:
            self.compact(compaction)

    def set_hard_state(self, hs: HardState) -> None:
        self._hard_state = hs

    def append(self, entries: Sequence[Entry]) -> None:
        """Append ``entries``, first dropping any stored suffix from ``entries[0].index``."""
        if not entries:
            return
        with self._lock:
            base = self._snapshot.index
            first = entries[0].index
            last = base + len(self._entries)
            if first > last + 1:
                raise ValueError(f"gap: appending {first} after last index {last}")
            skip = max(0, base + 1 - first)  # entries already covered by the snapshot
            if skip >= len(entries):
                return
            first += skip
            del self._entries[first - base - 1 :]
            self._entries.extend(entries[skip:])

    def apply_snapshot(self, snapshot: Snapshot) -> None:
        """Replace the whole log by ``snapshot`` (received from the leader)."""
        with self._lock:
            if snapshot.index <= self._snapshot.index:
                raise ValueError(
                    f"snapshot {snapshot.index} is not newer than {self._snapshot.index}"
                )
            self._snapshot = snapshot
            self._entries = []

    def compact(self, snapshot: Snapshot) -> None:
        """Record a local snapshot and drop the entries it covers. Older snapshots are ignored."""
        with self._lock:
            base = self._snapshot.index
            if snapshot.index <= base:
                return
            if snapshot.index > base + len(self._entries):
                raise ValueError(f"compaction at {snapshot.index} is past the last index")
            del self._entries[: snapshot.index - base]
            self._snapshot = snapshot
