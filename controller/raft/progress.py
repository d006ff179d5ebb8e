"""What a leader knows about each member's log, and how it paces replication to it.

A member is in one of three states (etcd raft's tracker):

- PROBE: the leader does not know where the member's log matches; it sends one append at a
  time and waits for the answer (or the next heartbeat response) before sending again.
- REPLICATE: the logs match up to ``match``; the leader streams appends optimistically,
  advancing ``next`` as it sends, with at most ``max_inflight`` appends unacknowledged (the
  pipelining window, DLedger's asynchronous push).
- SNAPSHOT: the member needs entries the leader has compacted; the leader sends the snapshot in
  chunks, one in flight, and resumes probing once the member acknowledges the install.
"""

from __future__ import annotations

import enum
from collections import deque


class ProgressState(enum.Enum):
    PROBE = "probe"
    REPLICATE = "replicate"
    SNAPSHOT = "snapshot"


class Inflights:
    """The appends sent to one member and not yet acknowledged, by their last index."""

    __slots__ = ("_bytes", "_queue", "capacity")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._queue: deque[tuple[int, int]] = deque()
        self._bytes = 0

    def add(self, last_index: int, size: int) -> None:
        self._queue.append((last_index, size))
        self._bytes += size

    def free_le(self, index: int) -> None:
        """Forget every append whose last index is <= ``index`` (acknowledged)."""
        queue = self._queue
        while queue and queue[0][0] <= index:
            self._bytes -= queue.popleft()[1]

    def free_first(self) -> None:
        """Forget the oldest append (it was probably lost): lets one more append go out."""
        if self._queue:
            self._bytes -= self._queue.popleft()[1]

    def full(self) -> bool:
        return len(self._queue) >= self.capacity

    def count(self) -> int:
        return len(self._queue)

    def reset(self) -> None:
        self._queue.clear()
        self._bytes = 0


class Progress:
    __slots__ = (
        "inflights",
        "lost_log",
        "match",
        "next",
        "pending_snapshot",
        "probe_sent",
        "read_seq",
        "recent_active",
        "snapshot_offset",
        "snapshot_progressed",
        "state",
    )

    def __init__(self, *, next_index: int, max_inflight: int, match: int = 0) -> None:
        self.match = match
        self.next = next_index
        self.state = ProgressState.PROBE
        self.probe_sent = False
        self.pending_snapshot = 0
        self.snapshot_offset = 0
        """Bytes of the pending snapshot the member has acknowledged."""
        self.snapshot_progressed = False
        """An acknowledgement moved ``snapshot_offset`` since the last heartbeat."""
        self.recent_active = False
        self.read_seq = 0
        """Highest read-index round this member has acknowledged."""
        self.inflights = Inflights(max_inflight)
        self.lost_log = 0
        """The end of the member's log it reported below ``match`` (+1, so 0 means no such
        report): it no longer holds entries it acknowledged, i.e. it lost its data directory
        and came back under its old id. Cleared when it acknowledges ``match`` again."""

    def __repr__(self) -> str:
        return (
            f"Progress({self.state.value} match={self.match} next={self.next} "
            f"inflight={self.inflights.count()} snap={self.pending_snapshot})"
        )

    def become_probe(self) -> None:
        if self.state is ProgressState.SNAPSHOT:
            self.next = max(self.match + 1, self.pending_snapshot + 1)
        else:
            self.next = self.match + 1
        self._reset(ProgressState.PROBE)

    def become_replicate(self) -> None:
        self.next = self.match + 1
        self._reset(ProgressState.REPLICATE)

    def become_snapshot(self, snapshot_index: int) -> None:
        self._reset(ProgressState.SNAPSHOT)
        self.pending_snapshot = snapshot_index
        self.snapshot_offset = 0
        self.snapshot_progressed = True

    def _reset(self, state: ProgressState) -> None:
        self.state = state
        self.probe_sent = False
        self.pending_snapshot = 0
        self.inflights.reset()

    def maybe_update(self, index: int) -> bool:
        """An acknowledgement up to ``index``; returns whether ``match`` moved."""
        updated = index > self.match
        if updated:
            self.match = index
            self.probe_sent = False
        self.next = max(self.next, index + 1)
        return updated

    def maybe_decrease_to(self, rejected: int, match_hint: int) -> bool:
        """A rejection of the append after ``rejected``; returns False when it is stale."""
        if self.state is ProgressState.REPLICATE:
            if rejected <= self.match:
                return False
            self.next = self.match + 1
            return True
        if self.next - 1 != rejected:
            return False
        self.next = max(min(rejected, match_hint + 1), self.match + 1)
        self.probe_sent = False
        return True

    def sent_entries(self, count: int, size: int) -> None:
        """Book an append of ``count`` entries starting at ``next``."""
        if self.state is ProgressState.REPLICATE:
            if count:
                self.next += count
                self.inflights.add(self.next - 1, size)
        elif self.state is ProgressState.PROBE:
            self.probe_sent = True

    def is_paused(self) -> bool:
        if self.state is ProgressState.PROBE:
            return self.probe_sent
        if self.state is ProgressState.REPLICATE:
            return self.inflights.full()
        return True
