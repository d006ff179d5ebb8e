"""Raft as a pure state machine: no asyncio, no clock, no sockets, no files.

The driver feeds :class:`RaftNode` with ``tick()``, ``step(message)`` and requests, and carries
out each :class:`Ready` it returns (persist, send, apply) before ``advance()``. See
:mod:`controller.raft.core` for the driver loop and :mod:`controller.raft.ready` for the order
in which a Ready must be handled.

Modules: ``config``, ``log`` (unstable/stable log), ``progress``
(per-member replication state), ``membership`` (configuration changes), ``readonly``
(read-index), ``leader`` (the leader's half), ``core`` (the node), ``handler`` (carrying out a
Ready: shared by the asyncio driver and the simulation). What the core reads
from durable storage is :class:`storage.raftlog.view.StorageView`, the storages' contract
(imported for type checking only: importing the core loads no storage code).
The data types (entries, hard and conf state, snapshots, the peer messages) live in
:mod:`protocol.raft_types`, below both this core and its storage; they are re-exported here.
"""

from protocol.raft_types import (
    MAX_COUNTER,
    MESSAGE_TYPES,
    AppendEntries,
    AppendResponse,
    ConfState,
    Entry,
    EntryType,
    HardState,
    Heartbeat,
    HeartbeatResponse,
    InstallSnapshot,
    InstallSnapshotAck,
    Message,
    MessageBase,
    NodeId,
    ReadIndexRequest,
    ReadIndexResponse,
    ReadState,
    Snapshot,
    SnapshotMeta,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)

from .config import RaftConfig
from .core import RaftNode, Status, bootstrap
from .errors import (
    Compacted,
    ConfChangeRejected,
    NotLeader,
    ProposalDropped,
    RaftError,
    ReadyNotAdvanced,
    StorageError,
    TransferRejected,
    Unavailable,
)
from .handler import DurableLog, ReadyHandler
from .leader import ProgressStatus
from .membership import ConfChange, ConfChangeType, decode_conf_change, encode_conf_change
from .progress import ProgressState
from .ready import Ready, Role, SoftState

__all__ = [
    "MAX_COUNTER",
    "MESSAGE_TYPES",
    "AppendEntries",
    "AppendResponse",
    "Compacted",
    "ConfChange",
    "ConfChangeRejected",
    "ConfChangeType",
    "ConfState",
    "DurableLog",
    "Entry",
    "EntryType",
    "HardState",
    "Heartbeat",
    "HeartbeatResponse",
    "InstallSnapshot",
    "InstallSnapshotAck",
    "Message",
    "MessageBase",
    "NodeId",
    "NotLeader",
    "ProgressState",
    "ProgressStatus",
    "ProposalDropped",
    "RaftConfig",
    "RaftError",
    "RaftNode",
    "ReadIndexRequest",
    "ReadIndexResponse",
    "ReadState",
    "Ready",
    "ReadyHandler",
    "ReadyNotAdvanced",
    "Role",
    "Snapshot",
    "SnapshotMeta",
    "SoftState",
    "Status",
    "StorageError",
    "TimeoutNow",
    "TransferRejected",
    "Unavailable",
    "VoteRequest",
    "VoteResponse",
    "bootstrap",
    "decode_conf_change",
    "encode_conf_change",
]
