"""Errors the Raft core raises to its caller (the driver). None of them leaves the node broken.

``RaftError`` and the storage lookup errors (``StorageError``, ``Compacted``, ``Unavailable``) are
defined in :mod:`protocol.raft_types`, which the storages share, and re-exported here.
"""

from __future__ import annotations

from protocol.raft_types import Compacted, NodeId, RaftError, StorageError, Unavailable


class NotLeader(RaftError):
    """This node cannot take the request; ``leader_id`` is the leader it knows of, if any."""

    def __init__(self, leader_id: NodeId | None) -> None:
        super().__init__(f"not the leader (leader: {leader_id or 'unknown'})")
        self.leader_id = leader_id


class ProposalDropped(RaftError):
    """The leader refused the proposal for now (e.g. a leadership transfer is in progress, a
    membership change is still uncommitted, or the leader has not committed in its term yet).
    Retrying later, possibly at another leader, is the right response."""


class ConfChangeRejected(RaftError):
    """The membership change is invalid against the current configuration (adding a member
    twice, promoting a non-learner, removing the last voter, promoting a lagging learner)."""


class TransferRejected(RaftError):
    """The leadership transfer target is not a voter of the group."""


class ReadyNotAdvanced(RaftError):
    """``ready()`` was called while the previous Ready had not been passed to ``advance()``."""


__all__ = [
    "Compacted",
    "ConfChangeRejected",
    "NotLeader",
    "ProposalDropped",
    "RaftError",
    "ReadyNotAdvanced",
    "StorageError",
    "TransferRejected",
    "Unavailable",
]
