"""The output of the core: one Ready batch at a time, handed to the driver by ``ready()``.

The driver handles a Ready in this order, then calls ``advance(ready)``:

1. send ``messages`` (they may overlap with step 2: a leader's appends go out while it writes);
2. make ``snapshot``, ``entries``, ``hard_state`` and ``compaction`` durable, in that order,
   with one fsync (group commit: a Ready batches every proposal made since the last one);
3. send ``persisted_messages`` (votes granted and append acknowledgements promise durability);
4. if ``snapshot`` is set, restore the state machine from it; apply ``committed_entries`` in
   order (skip NOOP, decode CONF_CHANGE for the driver's own bookkeeping);
5. serve ``read_states`` (the state machine has now applied their index).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from protocol.raft_types import Entry, HardState, Message, NodeId, ReadState, Snapshot


class Role(enum.Enum):
    FOLLOWER = "follower"
    PRE_CANDIDATE = "pre-candidate"
    CANDIDATE = "candidate"
    LEADER = "leader"


@dataclass(frozen=True, slots=True, kw_only=True)
class SoftState:
    """Volatile state the driver may want for logs and metrics (never persisted)."""

    lead: NodeId | None
    role: Role


@dataclass(frozen=True, slots=True, kw_only=True)
class Ready:
    hard_state: HardState | None = None
    """Persist (atomically) when not None."""
    entries: tuple[Entry, ...] = ()
    """Append to the log; if ``entries[0].index`` is already stored, first truncate the stored
    log from that index (a conflicting suffix is being replaced)."""
    snapshot: Snapshot | None = None
    """A snapshot received from the leader: persist it and discard the whole log it replaces;
    then restore the state machine from it."""
    compaction: Snapshot | None = None
    """A snapshot the driver asked for with ``compact()``: persist it and drop log entries up to
    its index. The state machine already holds this state."""
    messages: tuple[Message, ...] = ()
    """May be sent at once, before or while the above is persisted."""
    persisted_messages: tuple[Message, ...] = ()
    """Send only after everything above is durable."""
    committed_entries: tuple[Entry, ...] = ()
    """Apply in order, after persisting."""
    read_states: tuple[ReadState, ...] = ()
    """Serve after applying ``committed_entries``."""
    soft_state: SoftState | None = None
    """Set when the leader or the role changed."""
    must_sync: bool = False
    """Whether persisting needs an fsync: entries, a snapshot, or a new term or vote. A
    commit-only hard state change may be written lazily."""

    def is_empty(self) -> bool:
        return not (
            self.hard_state is not None
            or self.entries
            or self.snapshot is not None
            or self.compaction is not None
            or self.messages
            or self.persisted_messages
            or self.committed_entries
            or self.read_states
            or self.soft_state is not None
        )
