"""The Raft log as the core sees it: durable entries (the storage view) plus an unstable tail.

``Unstable`` holds what the core has appended (or a snapshot it has received) that the driver has
not yet made durable. A Ready hands the unstable tail to the driver and marks it "in progress";
``advance()`` then calls :meth:`RaftLog.stable_to`, which drops it from the unstable part if it is
still the same entries (a conflicting append may have replaced them in the meantime; the
replacement goes out with the next Ready and overwrites the stale stored suffix).

Invariants: ``applied <= committed <= last_index()``; entries at or below ``committed`` are never
truncated.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from protocol.raft_types import Compacted, Entry, Snapshot, Unavailable, limit_size

if TYPE_CHECKING:
    from storage.raftlog.view import StorageView


class Unstable:
    __slots__ = ("entries", "in_progress", "offset", "snapshot", "snapshot_in_progress")

    def __init__(self, offset: int) -> None:
        self.snapshot: Snapshot | None = None
        self.snapshot_in_progress = False
        self.entries: list[Entry] = []
        self.offset = offset
        """Index of ``entries[0]`` (or where the next entry would go)."""
        self.in_progress = offset
        """Entries below this index have been handed to a Ready (being persisted)."""

    def maybe_first_index(self) -> int | None:
        return self.snapshot.index + 1 if self.snapshot is not None else None

    def maybe_last_index(self) -> int | None:
        if self.entries:
            return self.offset + len(self.entries) - 1
        if self.snapshot is not None:
            return self.snapshot.index
        return None

    def maybe_term(self, index: int) -> int | None:
        if index < self.offset:
            if self.snapshot is not None and self.snapshot.index == index:
                return self.snapshot.term
            return None
        last = self.maybe_last_index()
        if last is None or index > last:
            return None
        return self.entries[index - self.offset].term

    def next_entries(self) -> list[Entry]:
        return self.entries[self.in_progress - self.offset :]

    def next_snapshot(self) -> Snapshot | None:
        if self.snapshot is None or self.snapshot_in_progress:
            return None
        return self.snapshot

    def accept_in_progress(self) -> None:
        if self.entries:
            self.in_progress = self.entries[-1].index + 1
        if self.snapshot is not None:
            self.snapshot_in_progress = True

    def stable_to(self, index: int, term: int) -> None:
        found = self.maybe_term(index)
        if found is None or index < self.offset or found != term:
            # Already durable, or replaced by a conflicting append since the Ready went out.
            return
        del self.entries[: index + 1 - self.offset]
        self.offset = index + 1
        self.in_progress = max(self.in_progress, self.offset)

    def stable_snap_to(self, index: int) -> None:
        if self.snapshot is not None and self.snapshot.index == index:
            self.snapshot = None
            self.snapshot_in_progress = False

    def restore(self, snapshot: Snapshot) -> None:
        self.offset = snapshot.index + 1
        self.in_progress = self.offset
        self.entries = []
        self.snapshot = snapshot
        self.snapshot_in_progress = False

    def truncate_and_append(self, entries: list[Entry]) -> None:
        start = entries[0].index
        if start == self.offset + len(self.entries):
            self.entries.extend(entries)
        elif start <= self.offset:
            # Replaces everything unstable, and tells the driver to overwrite the stored suffix.
            self.offset = start
            self.in_progress = start
            self.entries = list(entries)
        else:
            del self.entries[start - self.offset :]
            self.entries.extend(entries)
            self.in_progress = min(self.in_progress, start)

    def slice(self, lo: int, hi: int) -> list[Entry]:
        return self.entries[lo - self.offset : hi - self.offset]


class RaftLog:
    __slots__ = ("applied", "committed", "storage", "unstable")

    def __init__(self, storage: StorageView) -> None:
        self.storage = storage
        first = storage.first_index()
        self.unstable = Unstable(storage.last_index() + 1)
        self.committed = first - 1
        self.applied = first - 1

    # --- indexes and terms ---------------------------------------------------------------

    def first_index(self) -> int:
        first = self.unstable.maybe_first_index()
        return first if first is not None else self.storage.first_index()

    def last_index(self) -> int:
        last = self.unstable.maybe_last_index()
        return last if last is not None else self.storage.last_index()

    def persisted_last_index(self) -> int:
        """The last index known to be durable (everything before the unstable tail)."""
        if self.unstable.snapshot is not None:
            return 0
        return self.unstable.offset - 1

    def term(self, index: int) -> int:
        found = self.unstable.maybe_term(index)
        if found is not None:
            return found
        if index < self.first_index() - 1:
            raise Compacted(f"index {index} is compacted")
        if index > self.last_index():
            raise Unavailable(f"index {index} is past the end of the log")
        return self.storage.term(index)

    def term_or_none(self, index: int) -> int | None:
        try:
            return self.term(index)
        except (Compacted, Unavailable):
            return None

    def last_term(self) -> int:
        return self.term(self.last_index())

    def match_term(self, index: int, term: int) -> bool:
        return self.term_or_none(index) == term

    def is_up_to_date(self, last_index: int, last_term: int) -> bool:
        """Raft's "at least as up-to-date" rule of section 5.4.1."""
        mine = self.last_term()
        return last_term > mine or (last_term == mine and last_index >= self.last_index())

    # --- appending -----------------------------------------------------------------------

    def find_conflict(self, entries: tuple[Entry, ...] | list[Entry]) -> int:
        """Index of the first entry that is new or conflicts with the log, or 0."""
        for entry in entries:
            if not self.match_term(entry.index, entry.term):
                return entry.index
        return 0

    def find_conflict_by_term(self, index: int, term: int) -> tuple[int, int]:
        """The largest index <= ``index`` whose term is <= ``term``, with that term (0 when it
        falls outside the known log). Both sides of the fast back-off use it."""
        while index > 0:
            found = self.term_or_none(index)
            if found is None:
                return index, 0
            if found <= term:
                return index, found
            index -= 1
        return 0, 0

    def maybe_append(
        self, prev_index: int, prev_term: int, commit: int, entries: tuple[Entry, ...]
    ) -> tuple[int | None, int]:
        """The follower's side of AppendEntries.

        Returns ``(last_new_index, conflict_index)``: ``last_new_index`` is None when the
        log-matching check fails; ``conflict_index`` is where the log was rewritten (0 if not).
        """
        if not self.match_term(prev_index, prev_term):
            return None, 0
        last_new = prev_index + len(entries)
        conflict = self.find_conflict(entries)
        if conflict:
            if conflict <= self.committed:
                raise AssertionError(
                    f"entry {conflict} conflicts with committed entry (committed {self.committed})"
                )
            self.append(list(entries[conflict - prev_index - 1 :]))
        self.commit_to(min(commit, last_new))
        return last_new, conflict

    def append(self, entries: list[Entry]) -> int:
        if entries:
            if entries[0].index - 1 < self.committed:
                raise AssertionError(
                    f"append at {entries[0].index} would overwrite committed {self.committed}"
                )
            self.unstable.truncate_and_append(entries)
        return self.last_index()

    # --- reading ranges ------------------------------------------------------------------

    def slice(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        """Entries ``[lo, hi)`` within ``max_bytes`` (at least one). Raises Compacted."""
        if lo >= hi:
            return []
        if lo < self.first_index():
            raise Compacted(f"index {lo} is compacted")
        if hi > self.last_index() + 1:
            raise Unavailable(f"slice [{lo}, {hi}) is past the end of the log")
        result: list[Entry] = []
        offset = self.unstable.offset
        if lo < offset:
            result = self.storage.entries(lo, min(hi, offset), max_bytes)
            if len(result) < min(hi, offset) - lo:
                return result  # stopped by max_bytes
        if hi > offset:
            result = result + self.unstable.slice(max(lo, offset), hi)
        return limit_size(result, max_bytes)

    def entries_from(self, index: int, max_bytes: int | None) -> list[Entry]:
        return self.slice(index, self.last_index() + 1, max_bytes)

    # --- commit and apply ----------------------------------------------------------------

    def commit_to(self, index: int) -> None:
        if index > self.committed:
            if index > self.last_index():
                raise AssertionError(f"commit {index} is past the last index {self.last_index()}")
            self.committed = index

    def maybe_commit(self, index: int, term: int) -> bool:
        """Commit ``index`` if it is newer and from ``term`` (only current-term entries are
        committed by counting replicas, section 5.4.2)."""
        if index > self.committed and self.term_or_none(index) == term:
            self.commit_to(index)
            return True
        return False

    def applied_to(self, index: int) -> None:
        if index > self.applied:
            self.applied = index

    def next_committed_entries(self, max_bytes: int | None) -> list[Entry]:
        lo = max(self.applied + 1, self.first_index())
        if lo > self.committed:
            return []
        return self.slice(lo, self.committed + 1, max_bytes)

    def has_next_committed_entries(self) -> bool:
        return max(self.applied + 1, self.first_index()) <= self.committed

    # --- persistence bookkeeping ---------------------------------------------------------

    def restore(self, snapshot: Snapshot) -> None:
        self.unstable.restore(snapshot)
        self.committed = snapshot.index

    def stable_to(self, index: int, term: int) -> None:
        self.unstable.stable_to(index, term)

    def stable_snap_to(self, index: int) -> None:
        self.unstable.stable_snap_to(index)
