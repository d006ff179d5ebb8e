"""RaftConfig: the knobs of one Raft node. Times are in ticks (the driver's tick is 100 ms)."""

from __future__ import annotations

from dataclasses import dataclass

from protocol.raft_types import NodeId


@dataclass(frozen=True, slots=True, kw_only=True)
class RaftConfig:
    node_id: NodeId

    heartbeat_ticks: int = 1
    """A leader sends heartbeats every this many ticks."""
    election_ticks_min: int = 3
    """Lower bound of the randomised election timeout. Also the check-quorum interval, the
    leader-lease length during which (pre-)votes are ignored, and the leadership transfer
    timeout unless ``transfer_timeout_ticks`` says otherwise."""
    election_ticks_max: int = 6
    """Upper bound (inclusive) of the randomised election timeout."""

    pre_vote: bool = True
    check_quorum: bool = True
    leader_lease: bool = False
    """Keep a leader lease (:meth:`RaftNode.lease_remaining`): the leader holds it for
    ``lease_ticks`` after the send of the latest heartbeat round that a quorum of voters
    acknowledged. It is safe because it is strictly shorter than the time a follower needs to
    elect someone else: a follower that acknowledged a heartbeat ignores (pre-)votes for
    ``election_ticks_min`` ticks after receiving it, and with this set a (re)started node also
    grants no vote during its first ``election_ticks_min`` ticks (it may have acknowledged a
    heartbeat just before it went down). A leader that sent TimeoutNow holds no lease until the
    transfer's votes can no longer be in flight. Needs ``check_quorum``; the same value on every
    node."""

    max_msg_bytes: int = 1 << 20
    """Upper bound of the entries carried by one AppendEntries (at least one entry is sent)."""
    max_inflight: int = 64
    """Appends in flight per follower in the replicate state (the pipelining window)."""
    max_apply_bytes: int = 16 << 20
    """Upper bound of committed entries handed out by one Ready."""
    max_uncommitted_bytes: int | None = 64 << 20
    """A leader refuses proposals (ProposalDropped) while this many bytes of its proposals await
    commit, so a slow or cut-off quorum cannot make it buffer without bound. None: no limit."""
    snapshot_chunk_bytes: int = 1 << 20
    """Size of one InstallSnapshot chunk."""
    max_snapshot_bytes: int = 1 << 30
    """A follower drops a snapshot transfer that grows past this."""

    transfer_timeout_ticks: int | None = None
    """A leadership transfer not done after this many ticks is abandoned (default: the
    minimum election timeout)."""
    preferred_leader: NodeId | None = None
    """When set, a leader hands leadership to this voter once it is active and caught up.
    Set the same value on every node."""
    preferred_leader_backoff_ticks: int = 50
    """Ticks to wait after a transfer to the preferred leader before trying it again."""

    auto_promote_learners: bool = True
    """The leader promotes a learner to voter once it has caught up with the commit index."""

    def __post_init__(self) -> None:
        if not self.node_id:
            raise ValueError("node_id must not be empty")
        if self.heartbeat_ticks < 1:
            raise ValueError("heartbeat_ticks must be >= 1")
        if self.election_ticks_min <= self.heartbeat_ticks:
            raise ValueError("election_ticks_min must be greater than heartbeat_ticks")
        if self.election_ticks_max < self.election_ticks_min:
            raise ValueError("election_ticks_max must be >= election_ticks_min")
        for name in ("max_msg_bytes", "max_inflight", "max_apply_bytes", "snapshot_chunk_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.max_uncommitted_bytes is not None and self.max_uncommitted_bytes < 1:
            raise ValueError("max_uncommitted_bytes must be >= 1")
        if self.transfer_timeout_ticks is not None and self.transfer_timeout_ticks < 1:
            raise ValueError("transfer_timeout_ticks must be >= 1")
        if self.leader_lease and not self.check_quorum:
            raise ValueError("leader_lease needs check_quorum")

    @property
    def transfer_timeout(self) -> int:
        if self.transfer_timeout_ticks is not None:
            return self.transfer_timeout_ticks
        return self.election_ticks_min

    @property
    def lease_ticks(self) -> int:
        """Length of the leader lease: one tick less than the minimum election timeout, so it
        ends before any follower that acknowledged the heartbeat may vote for another node
        (that follower waits at least ``election_ticks_min`` whole ticks after receiving it).
        Heartbeats every ``heartbeat_ticks`` renew it before it ends as long as a round trip
        takes less than ``lease_ticks - heartbeat_ticks`` ticks."""
        return self.election_ticks_min - 1
