"""Raft's data: log entries, hard state, membership, snapshots and the messages peers exchange.

They sit here, below everything, because three layers share them: the Raft core
(:mod:`controller.raft`), its durable storage (:mod:`storage.raftlog`) and the wire codec
(:mod:`protocol.raft`).

Everything here is a frozen, slotted, keyword-only dataclass: values, never mutated, cheap to
share between the core, the driver and the codec (:mod:`protocol.raft`). Node ids are strings
(the ``--id`` of a controller, e.g. ``"n0"``).

Message catalogue (every message carries ``src``, ``dst`` and the sender's ``term``):

=====================  ===========================  ==================================================
message                from -> to                    meaning
=====================  ===========================  ==================================================
VoteRequest            candidate -> voters           (pre-)vote for me; ``transfer`` marks a campaign
                                                     started by TimeoutNow (bypasses the leader lease)
VoteResponse           voter -> candidate            granted or not
AppendEntries          leader -> member              log-matching check at ``prev_log_*``, entries,
                                                     leader commit
AppendResponse         member -> leader              accepted up to ``index``, or rejected with a
                                                     conflict hint (``reject_hint``, ``hint_term``)
Heartbeat              leader -> member              keeps followers quiet; carries commit and the
                                                     read-index round ``read_seq``
HeartbeatResponse      member -> leader              echoes ``read_seq``
InstallSnapshot        leader -> member              one chunk of a snapshot, at byte ``offset``
InstallSnapshotAck     member -> leader              next byte offset wanted (chunk flow control);
                                                     the finished install is acked by AppendResponse
TimeoutNow             leader -> transferee          campaign now (leadership transfer)
ReadIndexRequest       follower -> leader            a forwarded read-index request
ReadIndexResponse      leader -> follower            the read index for ``ctx``
=====================  ===========================  ==================================================
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Final, TypeAlias

NodeId: TypeAlias = str

#: Bytes an entry costs beyond its data, used when sizing messages and batches.
ENTRY_OVERHEAD: Final = 32

#: The largest term, index or other counter a message may carry (the codec rejects larger
#: values). The core never adopts or persists a term it could not increment within it.
MAX_COUNTER: Final = (1 << 63) - 1


class EntryType(enum.IntEnum):
    NORMAL = 0
    """A proposal of the state machine: apply ``data``."""
    CONF_CHANGE = 1
    """A membership change (:class:`controller.raft.membership.ConfChange`)."""
    NOOP = 2
    """The empty entry every leader appends at the start of its term; skip it when applying."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    term: int
    index: int
    type: EntryType = EntryType.NORMAL
    data: bytes = b""

    # Entries and the messages every append and heartbeat make write their __init__ out: compiled,
    # a native constructor (object.__setattr__ with the field's name is a native store, and in
    # pure Python it passes the frozen dataclass's refusal); the one dataclasses writes is
    # interpreted (docs/compiled.md). The rarer classes keep the generated one.
    def __init__(
        self,
        *,
        term: int,
        index: int,
        type: EntryType = EntryType.NORMAL,
        data: bytes = b"",
    ) -> None:
        object.__setattr__(self, "term", term)
        object.__setattr__(self, "index", index)
        object.__setattr__(self, "type", type)
        object.__setattr__(self, "data", data)

    def size(self) -> int:
        return len(self.data) + ENTRY_OVERHEAD


@dataclass(frozen=True, slots=True, kw_only=True)
class HardState:
    """What must be durable before a vote or an append acknowledgement leaves the node.

    ``commit`` is advisory (a restarted node re-learns it); ``term`` and ``vote`` are not.
    """

    term: int = 0
    vote: NodeId | None = None
    commit: int = 0

    def __init__(
        self,
        *,
        term: int = 0,
        vote: NodeId | None = None,
        commit: int = 0,
    ) -> None:
        object.__setattr__(self, "term", term)
        object.__setattr__(self, "vote", vote)
        object.__setattr__(self, "commit", commit)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfState:
    """The members of the group: voters count for elections and commits, learners only replicate.

    Both tuples are kept sorted so iteration (and hence message order) is deterministic.
    """

    voters: tuple[NodeId, ...] = ()
    learners: tuple[NodeId, ...] = ()

    def __post_init__(self) -> None:
        voters = tuple(sorted(set(self.voters)))
        learners = tuple(sorted(set(self.learners)))
        if set(voters) & set(learners):
            raise ValueError("a node cannot be both voter and learner")
        object.__setattr__(self, "voters", voters)
        object.__setattr__(self, "learners", learners)

    def members(self) -> tuple[NodeId, ...]:
        return tuple(sorted(self.voters + self.learners))

    def is_voter(self, node_id: NodeId) -> bool:
        return node_id in self.voters

    def is_learner(self, node_id: NodeId) -> bool:
        return node_id in self.learners

    def is_member(self, node_id: NodeId) -> bool:
        return node_id in self.voters or node_id in self.learners


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotMeta:
    """Where a snapshot sits in the log: it replaces every entry up to and including ``index``."""

    index: int = 0
    term: int = 0
    conf_state: ConfState = field(default_factory=ConfState)


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    meta: SnapshotMeta = field(default_factory=SnapshotMeta)
    data: bytes = b""

    @property
    def index(self) -> int:
        return self.meta.index

    @property
    def term(self) -> int:
        return self.meta.term


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadState:
    """A linearizable read may be served for ``ctx`` once the state machine has applied ``index``.

    :meth:`RaftNode.ready` only hands these out once the Ready's committed entries reach ``index``.
    """

    index: int
    ctx: bytes

    def __init__(
        self,
        *,
        index: int,
        ctx: bytes,
    ) -> None:
        object.__setattr__(self, "index", index)
        object.__setattr__(self, "ctx", ctx)


# --- messages ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageBase:
    src: NodeId
    dst: NodeId
    term: int


@dataclass(frozen=True, slots=True, kw_only=True)
class VoteRequest(MessageBase):
    last_log_index: int
    last_log_term: int
    pre_vote: bool = False
    transfer: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class VoteResponse(MessageBase):
    granted: bool
    pre_vote: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class AppendEntries(MessageBase):
    prev_log_index: int
    prev_log_term: int
    commit: int
    entries: tuple[Entry, ...] = ()

    def __init__(
        self,
        *,
        src: NodeId,
        dst: NodeId,
        term: int,
        prev_log_index: int,
        prev_log_term: int,
        commit: int,
        entries: tuple[Entry, ...] = (),
    ) -> None:
        object.__setattr__(self, "src", src)
        object.__setattr__(self, "dst", dst)
        object.__setattr__(self, "term", term)
        object.__setattr__(self, "prev_log_index", prev_log_index)
        object.__setattr__(self, "prev_log_term", prev_log_term)
        object.__setattr__(self, "commit", commit)
        object.__setattr__(self, "entries", entries)


@dataclass(frozen=True, slots=True, kw_only=True)
class AppendResponse(MessageBase):
    """``index``: the last index now matching the leader (accepted), or the rejected
    ``prev_log_index``. On reject, ``reject_hint``/``hint_term`` point at the follower's last
    entry with a term no greater than the leader's ``prev_log_term`` (fast back-off)."""

    index: int
    reject: bool = False
    reject_hint: int = 0
    hint_term: int = 0

    def __init__(
        self,
        *,
        src: NodeId,
        dst: NodeId,
        term: int,
        index: int,
        reject: bool = False,
        reject_hint: int = 0,
        hint_term: int = 0,
    ) -> None:
        object.__setattr__(self, "src", src)
        object.__setattr__(self, "dst", dst)
        object.__setattr__(self, "term", term)
        object.__setattr__(self, "index", index)
        object.__setattr__(self, "reject", reject)
        object.__setattr__(self, "reject_hint", reject_hint)
        object.__setattr__(self, "hint_term", hint_term)


@dataclass(frozen=True, slots=True, kw_only=True)
class Heartbeat(MessageBase):
    commit: int
    read_seq: int = 0

    def __init__(
        self,
        *,
        src: NodeId,
        dst: NodeId,
        term: int,
        commit: int,
        read_seq: int = 0,
    ) -> None:
        object.__setattr__(self, "src", src)
        object.__setattr__(self, "dst", dst)
        object.__setattr__(self, "term", term)
        object.__setattr__(self, "commit", commit)
        object.__setattr__(self, "read_seq", read_seq)


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatResponse(MessageBase):
    read_seq: int = 0

    def __init__(
        self,
        *,
        src: NodeId,
        dst: NodeId,
        term: int,
        read_seq: int = 0,
    ) -> None:
        object.__setattr__(self, "src", src)
        object.__setattr__(self, "dst", dst)
        object.__setattr__(self, "term", term)
        object.__setattr__(self, "read_seq", read_seq)


@dataclass(frozen=True, slots=True, kw_only=True)
class InstallSnapshot(MessageBase):
    meta: SnapshotMeta
    offset: int
    data: bytes
    done: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class InstallSnapshotAck(MessageBase):
    snapshot_index: int
    offset: int


@dataclass(frozen=True, slots=True, kw_only=True)
class TimeoutNow(MessageBase):
    pass


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadIndexRequest(MessageBase):
    ctx: bytes

    def __init__(
        self,
        *,
        src: NodeId,
        dst: NodeId,
        term: int,
        ctx: bytes,
    ) -> None:
        object.__setattr__(self, "src", src)
        object.__setattr__(self, "dst", dst)
        object.__setattr__(self, "term", term)
        object.__setattr__(self, "ctx", ctx)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadIndexResponse(MessageBase):
    ctx: bytes
    index: int

    def __init__(
        self,
        *,
        src: NodeId,
        dst: NodeId,
        term: int,
        ctx: bytes,
        index: int,
    ) -> None:
        object.__setattr__(self, "src", src)
        object.__setattr__(self, "dst", dst)
        object.__setattr__(self, "term", term)
        object.__setattr__(self, "ctx", ctx)
        object.__setattr__(self, "index", index)


Message: TypeAlias = (
    VoteRequest
    | VoteResponse
    | AppendEntries
    | AppendResponse
    | Heartbeat
    | HeartbeatResponse
    | InstallSnapshot
    | InstallSnapshotAck
    | TimeoutNow
    | ReadIndexRequest
    | ReadIndexResponse
)

#: Every concrete message class, in codec tag order (do not reorder: the index is on the wire).
MESSAGE_TYPES: Final[tuple[type[MessageBase], ...]] = (
    VoteRequest,
    VoteResponse,
    AppendEntries,
    AppendResponse,
    Heartbeat,
    HeartbeatResponse,
    InstallSnapshot,
    InstallSnapshotAck,
    TimeoutNow,
    ReadIndexRequest,
    ReadIndexResponse,
)


def limit_size(entries: list[Entry], max_bytes: int | None) -> list[Entry]:
    """The longest prefix within ``max_bytes``; never fewer than one entry."""
    if max_bytes is None or not entries:
        return entries
    total = 0
    for i, entry in enumerate(entries):
        total += entry.size()
        if total > max_bytes and i > 0:
            return entries[:i]
    return entries


# --- errors shared by the core and its storage ------------------------------------------------


class RaftError(Exception):
    """Base class of every error the core raises on purpose (see :mod:`controller.raft.errors`)."""


class StorageError(RaftError):
    """Base of the storage view's lookup errors."""


class Compacted(StorageError):
    """The requested index has been compacted into a snapshot."""


class Unavailable(StorageError):
    """The requested index is past the end of the log."""
