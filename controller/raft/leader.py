"""The leader's half of the node: replication, commit, heartbeats, read-index, transfer.

A :class:`Leader` exists only while its node leads, for one term; stepping down drops it with
everything it tracked (progress, pending reads, a transfer in flight). It reaches its node only
through :class:`LeaderNode`, the part of :class:`~controller.raft.core.RaftNode` it may read
and call.

Replication (section 5.3) with etcd's flow control: appends to a member in REPLICATE are
pipelined up to ``max_inflight`` and each carries at most ``max_msg_bytes`` of entries; new
proposals are batched until the next ``ready()`` so that one append carries all of them. A
rejected append carries the follower's conflict hint, so the leader skips a whole term per
round trip instead of one index. A member whose next entry is compacted gets the snapshot.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from protocol.raft_types import (
    AppendEntries,
    AppendResponse,
    ConfState,
    Heartbeat,
    HeartbeatResponse,
    InstallSnapshot,
    InstallSnapshotAck,
    Message,
    NodeId,
    ReadIndexRequest,
    ReadIndexResponse,
    ReadState,
    TimeoutNow,
)

from .errors import Compacted, ConfChangeRejected, ProposalDropped, RaftError, TransferRejected
from .membership import ConfChange, ConfChangeType, apply_conf_change, majority, quorum_index
from .progress import Progress, ProgressState
from .readonly import ReadOnly
from .ready import Role

if TYPE_CHECKING:
    from storage.raftlog.view import StorageView

    from .config import RaftConfig
    from .log import RaftLog


class LeaderNode(Protocol):
    """The node as its leader half sees it: everything :class:`Leader` reads or calls on it.
    :class:`~controller.raft.core.RaftNode` implements it; nothing else of the node is touched
    from here."""

    @property
    def id(self) -> NodeId: ...

    @property
    def config(self) -> RaftConfig: ...

    @property
    def term(self) -> int: ...

    @property
    def role(self) -> Role: ...

    @property
    def log(self) -> RaftLog: ...

    @property
    def storage(self) -> StorageView: ...

    @property
    def now(self) -> int:
        """Ticks since the node started."""
        ...

    @property
    def conf_state(self) -> ConfState:
        """The configuration in use (the latest in the log, committed or not)."""
        ...

    @property
    def last_conf_change_index(self) -> int: ...

    def send(self, m: Message) -> None:
        """Queue a message for the next Ready."""
        ...

    def add_read_state(self, rs: ReadState) -> None:
        """Hand a read index for the node's own request to the driver (once applied)."""
        ...

    def count_election_tick(self) -> bool:
        """Count one tick; True (and start over) once ``election_ticks_min`` ticks passed."""
        ...

    def step_down(self) -> None:
        """Become a follower in the current term (quorum lost, or removed)."""
        ...

    def propose_conf_change(self, cc: ConfChange) -> int: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class ProgressStatus:
    node_id: NodeId
    state: ProgressState
    match: int
    next: int
    recent_active: bool
    learner: bool
    lost_log: int | None = None
    """Where the member said its log ends, below ``match``: it lost entries it had
    acknowledged (None: it did not)."""


class Leader:
    def __init__(self, node: LeaderNode) -> None:
        self.node = node
        self.progress: dict[NodeId, Progress] = {}
        self.readonly = ReadOnly()
        self.reads_before_commit: list[tuple[NodeId, bytes]] = []
        self.transferee: NodeId | None = None
        self.transfer_elapsed = 0
        self.heartbeat_elapsed = 0
        self.preferred_backoff = 0
        self.removal_index = 0
        """Index of the uncommitted entry that removes this node (0: none)."""
        self.committed_in_term = False
        self.uncommitted_bytes = 0
        self._uncommitted: deque[tuple[int, int]] = deque()
        """(index, size) of this term's proposals that are not committed yet."""
        self._need_bcast = False
        self._commit_moved = False
        self._need_heartbeat = False
        self._round_ticks: dict[int, int] = {}
        """Heartbeat round (the ``read_seq`` it carried) -> the tick it was sent at, for the
        rounds recent enough to still count for the lease."""
        self._acked_tick: dict[NodeId, int] = {}
        """Per member: the tick of the latest heartbeat round it acknowledged."""
        self._no_lease_until = 0
        """After a TimeoutNow, no lease before this tick (the transferee's campaign may win
        votes that ignore the followers' leases)."""
        self.lost_log_changes = 0
        """Counts the changes of the members' ``Progress.lost_log`` (the driver reports them
        when it moves)."""
        self.conf_changed()

    # --- membership --------------------------------------------------------------------------

    def conf_changed(self) -> None:
        """Make the progress map follow the configuration in use."""
        node = self.node
        cs = node.conf_state
        members = cs.members()
        last = node.log.last_index()
        for member in members:
            if member not in self.progress:
                pr = Progress(next_index=last + 1, max_inflight=node.config.max_inflight)
                if member == node.id:
                    pr.match = node.log.persisted_last_index()
                    pr.become_replicate()
                    pr.recent_active = True
                self.progress[member] = pr
        for member in [m for m in self.progress if m not in members]:
            if self.progress.pop(member).lost_log:
                self.lost_log_changes += 1  # no longer a member to report
        self.progress = dict(sorted(self.progress.items()))
        if self.transferee is not None and not cs.is_voter(self.transferee):
            self.abort_transfer()
        if not cs.is_voter(node.id):
            self.removal_index = node.last_conf_change_index
        else:
            self.removal_index = 0

    def check_conf_change(self, cc: ConfChange) -> None:
        node = self.node
        if self.transferee is not None:
            raise ProposalDropped("leadership transfer in progress")
        if not self.committed_in_term:
            raise ProposalDropped("the leader has not committed an entry in its term yet")
        if node.last_conf_change_index > node.log.committed:
            raise ProposalDropped("the previous membership change is not committed yet")
        apply_conf_change(node.conf_state, cc)
        if cc.type is ConfChangeType.PROMOTE:
            pr = self.progress.get(cc.node_id)
            if pr is None or pr.match < node.log.committed:
                raise ConfChangeRejected(f"learner {cc.node_id} has not caught up yet")

    def _maybe_auto_promote(self, node_id: NodeId, pr: Progress) -> None:
        node = self.node
        if not node.config.auto_promote_learners or not node.conf_state.is_learner(node_id):
            return
        if pr.match < node.log.committed:
            return
        try:
            node.propose_conf_change(ConfChange.promote(node_id))
        except RaftError:
            pass  # not now (e.g. another change pending); retried on the next acknowledgement

    # --- inputs ------------------------------------------------------------------------------

    def step(self, m: Message) -> None:
        if isinstance(m, AppendResponse):
            self._on_append_response(m)
        elif isinstance(m, HeartbeatResponse):
            self._on_heartbeat_response(m)
        elif isinstance(m, InstallSnapshotAck):
            self._on_snapshot_ack(m)
        elif isinstance(m, ReadIndexRequest):
            pr = self.progress.get(m.src)
            if pr is not None:
                pr.recent_active = True
            self.read_index(m.src, m.ctx)

    def tick(self) -> None:
        node = self.node
        cfg = node.config
        quorum_check_due = node.count_election_tick()
        self.heartbeat_elapsed += 1
        if self.preferred_backoff > 0:
            self.preferred_backoff -= 1
        if self.transferee is not None:
            self.transfer_elapsed += 1
            if self.transfer_elapsed >= cfg.transfer_timeout:
                self.abort_transfer()
        self._forget_old_rounds()
        if quorum_check_due:
            if cfg.check_quorum and not self._quorum_active():
                node.step_down()
                return
            self.restart_quorum_window()
        if self.heartbeat_elapsed >= cfg.heartbeat_ticks:
            self.heartbeat_elapsed = 0
            self._bcast_heartbeat()
            self._maybe_transfer_to_preferred()

    def restart_quorum_window(self) -> None:
        """The next quorum check counts only the followers heard from after now: called at each
        check, and after the node stood still (:meth:`RaftNode.tick_after_stall`)."""
        me = self.node.id
        for member, pr in self.progress.items():
            pr.recent_active = member == me

    def after_stall(self, stalled: int) -> None:
        """The node stood still for ``stalled`` ticks (:meth:`RaftNode.tick_after_stall`). A
        TimeoutNow made before the stall may leave only now: the driver sends a Ready's
        messages once it runs again. So when the window without a lease that the TimeoutNow
        opened was still open as the stall began, it runs again from now, for as long as the
        transfer's votes can then be in flight."""
        node = self.node
        if self._no_lease_until > node.now - stalled:
            cfg = node.config
            self._no_lease_until = max(
                self._no_lease_until, node.now + cfg.transfer_timeout + cfg.election_ticks_max
            )

    def on_persisted(self, index: int) -> None:
        """The leader's own log is durable up to ``index``: it counts towards the quorum."""
        pr = self.progress.get(self.node.id)
        if pr is not None and pr.maybe_update(index):
            self._maybe_commit()

    def entries_appended(self) -> None:
        self._need_bcast = True

    def admit_proposal(self, size: int) -> None:
        """Flow control: refuse a proposal while ``max_uncommitted_bytes`` of this term's
        proposals await commit (a proposal always fits when nothing is pending)."""
        limit = self.node.config.max_uncommitted_bytes
        if limit is not None and self.uncommitted_bytes and self.uncommitted_bytes + size > limit:
            raise ProposalDropped("too much proposed data awaits commit; retry later")
        self._uncommitted.append((self.node.log.last_index() + 1, size))
        self.uncommitted_bytes += size

    def report_unreachable(self, node_id: NodeId) -> None:
        pr = self.progress.get(node_id)
        if pr is not None and pr.state is ProgressState.REPLICATE:
            pr.become_probe()

    # --- batching: the sends scheduled since the last Ready ----------------------------------

    def has_pending_sends(self) -> bool:
        return self._need_bcast or self._commit_moved or self._need_heartbeat

    def flush(self) -> None:
        if self._need_bcast or self._commit_moved:
            self._bcast_append(send_if_empty=self._commit_moved)
        if self._need_heartbeat:
            self._bcast_heartbeat()
        self._need_bcast = self._commit_moved = self._need_heartbeat = False

    # --- replication -------------------------------------------------------------------------

    def _bcast_append(self, *, send_if_empty: bool) -> None:
        for member in self.progress:
            if member != self.node.id:
                self._send_append(member, send_if_empty=send_if_empty)

    def _send_append(self, to: NodeId, *, send_if_empty: bool = True) -> bool:
        pr = self.progress[to]
        if pr.is_paused():
            return False
        node = self.node
        log = node.log
        prev = pr.next - 1
        prev_term = log.term_or_none(prev)
        if prev_term is None:
            self._send_snapshot(to, pr)
            return True
        try:
            entries = log.slice(pr.next, log.last_index() + 1, node.config.max_msg_bytes)
        except Compacted:
            self._send_snapshot(to, pr)
            return True
        if not entries and not send_if_empty:
            return False
        node.send(
            AppendEntries(
                src=node.id,
                dst=to,
                term=node.term,
                prev_log_index=prev,
                prev_log_term=prev_term,
                commit=log.committed,
                entries=tuple(entries),
            )
        )
        pr.sent_entries(len(entries), sum(e.size() for e in entries))
        return True

    def _send_snapshot(self, to: NodeId, pr: Progress) -> None:
        node = self.node
        snapshot = node.storage.snapshot()
        if snapshot.index == 0:
            return
        if pr.state is not ProgressState.SNAPSHOT or pr.pending_snapshot != snapshot.index:
            pr.become_snapshot(snapshot.index)
        offset = min(pr.snapshot_offset, len(snapshot.data))
        chunk = snapshot.data[offset : offset + node.config.snapshot_chunk_bytes]
        node.send(
            InstallSnapshot(
                src=node.id,
                dst=to,
                term=node.term,
                meta=snapshot.meta,
                offset=offset,
                data=chunk,
                done=offset + len(chunk) >= len(snapshot.data),
            )
        )

    def _on_append_response(self, m: AppendResponse) -> None:
        node = self.node
        pr = self.progress.get(m.src)
        if pr is None:
            return
        pr.recent_active = True
        if m.reject:
            if m.reject_hint < pr.match <= m.index and not pr.lost_log:
                # A member that kept its log holds every entry up to ``match``, which it
                # acknowledged: its hint cannot fall below it (the terms up to ``match`` are
                # the leader's, no newer than ``m.index``'s). It lost its data directory and
                # came back under its old id. Raft assumes a member keeps what it
                # acknowledged, so it is not brought up to date as if new (the entries it
                # counted for may now be on a minority): it is reported, for the operator
                # to remove it and add it back under a new id.
                pr.lost_log = m.reject_hint + 1
                self.lost_log_changes += 1
            next_probe = m.reject_hint
            if m.hint_term > 0:
                next_probe, _ = node.log.find_conflict_by_term(m.reject_hint, m.hint_term)
            if pr.maybe_decrease_to(m.index, next_probe):
                if pr.state is ProgressState.REPLICATE:
                    pr.become_probe()
                if pr.lost_log:
                    # Probing again at once would be rejected again at once, a storm of
                    # messages between the two: once per heartbeat answer instead.
                    pr.probe_sent = True
                    return
                self._send_append(m.src)
            return
        if pr.lost_log and m.index >= pr.match:
            pr.lost_log = 0  # it holds what it acknowledged after all (restored from a backup)
            self.lost_log_changes += 1
        was_paused = pr.is_paused()
        if not (
            pr.maybe_update(m.index) or (pr.match == m.index and pr.state is ProgressState.PROBE)
        ):
            return
        if pr.state is ProgressState.PROBE:
            pr.become_replicate()
        elif pr.state is ProgressState.SNAPSHOT:
            if pr.match + 1 >= node.log.first_index():
                pr.become_probe()
                pr.become_replicate()
        else:
            pr.inflights.free_le(m.index)
        if self._maybe_commit():
            self._commit_moved = True
        elif was_paused:
            self._send_append(m.src, send_if_empty=False)
        if node.role is not Role.LEADER:
            return  # the commit removed us and we stepped down
        while self._send_append(m.src, send_if_empty=False):
            pass
        if m.src == self.transferee and pr.match == node.log.last_index():
            self._send_timeout_now(m.src)
        self._maybe_auto_promote(m.src, pr)

    def _maybe_commit(self) -> bool:
        node = self.node
        voters = node.conf_state.voters
        index = quorum_index([self.progress[v].match for v in voters if v in self.progress])
        if not node.log.maybe_commit(index, node.term):
            return False
        self._on_commit()
        return True

    def _on_commit(self) -> None:
        node = self.node
        pending = self._uncommitted
        while pending and pending[0][0] <= node.log.committed:
            self.uncommitted_bytes -= pending.popleft()[1]
        if not self.committed_in_term:
            self.committed_in_term = True
            waiting, self.reads_before_commit = self.reads_before_commit, []
            for origin, ctx in waiting:
                self.read_index(origin, ctx)
        if self.removal_index and node.log.committed >= self.removal_index:
            # Our removal is committed: hand over to the most caught-up voter and step down.
            best = max(
                (v for v in node.conf_state.voters if v in self.progress),
                key=lambda v: self.progress[v].match,
                default=None,
            )
            if best is not None and self.progress[best].match == node.log.last_index():
                self._send_timeout_now(best)
            node.step_down()

    def _quorum_active(self) -> bool:
        voters = self.node.conf_state.voters
        active = sum(1 for v in voters if v in self.progress and self.progress[v].recent_active)
        return active >= majority(len(voters))

    # --- heartbeats and snapshots in flight --------------------------------------------------

    def _bcast_heartbeat(self) -> None:
        node = self.node
        # Every round has its own sequence number (an echo names the round and so the tick it
        # left at); a read registered earlier is still confirmed by any later round.
        seq = self.readonly.new_round()
        self._round_ticks[seq] = node.now
        for member, pr in self.progress.items():
            if member == node.id:
                continue
            node.send(
                Heartbeat(
                    src=node.id,
                    dst=member,
                    term=node.term,
                    commit=min(pr.match, node.log.committed),
                    read_seq=seq,
                )
            )
            if pr.state is ProgressState.SNAPSHOT:
                # One chunk is in flight at a time; resend it only when a whole heartbeat
                # interval passed without progress (it or its ack was lost), so a retransmit
                # never starts a second stream of chunks.
                if not pr.snapshot_progressed:
                    self._send_snapshot(member, pr)
                pr.snapshot_progressed = False

    def _on_heartbeat_response(self, m: HeartbeatResponse) -> None:
        pr = self.progress.get(m.src)
        if pr is None:
            return
        pr.recent_active = True
        sent = self._round_ticks.get(m.read_seq)
        if sent is not None and sent > self._acked_tick.get(m.src, -1):
            self._acked_tick[m.src] = sent
        pr.probe_sent = False
        if pr.state is not ProgressState.SNAPSHOT:
            if pr.state is ProgressState.REPLICATE and pr.inflights.full():
                pr.inflights.free_first()
            if pr.match < self.node.log.last_index():
                self._send_append(m.src)
        if m.read_seq > pr.read_seq:
            pr.read_seq = m.read_seq
            self._release_reads()

    def _on_snapshot_ack(self, m: InstallSnapshotAck) -> None:
        pr = self.progress.get(m.src)
        if pr is None:
            return
        pr.recent_active = True
        if pr.state is not ProgressState.SNAPSHOT or m.snapshot_index != pr.pending_snapshot:
            return
        if m.offset == pr.snapshot_offset:
            return  # a duplicate: the chunk at this offset is already on its way
        # Forward: the next chunk. Backward: the member lost its partial copy; start there.
        pr.snapshot_offset = m.offset
        pr.snapshot_progressed = True
        self._send_snapshot(m.src, pr)

    # --- read-index --------------------------------------------------------------------------

    def read_index(self, origin: NodeId, ctx: bytes) -> None:
        node = self.node
        if not self.committed_in_term:
            self.reads_before_commit.append((origin, ctx))
            return
        if node.conf_state.voters == (node.id,):
            self._deliver_read(origin, ctx, node.log.committed)
            return
        self.readonly.add(origin, ctx, node.log.committed)
        self._need_heartbeat = True

    def _release_reads(self) -> None:
        node = self.node
        acked = {member: pr.read_seq for member, pr in self.progress.items()}
        acked[node.id] = self.readonly.last_seq
        for read in self.readonly.release(acked, node.conf_state.voters):
            self._deliver_read(read.origin, read.ctx, read.index)

    def _deliver_read(self, origin: NodeId, ctx: bytes, index: int) -> None:
        node = self.node
        if origin == node.id:
            node.add_read_state(ReadState(index=index, ctx=ctx))
        else:
            node.send(
                ReadIndexResponse(src=node.id, dst=origin, term=node.term, ctx=ctx, index=index)
            )

    # --- leadership transfer -----------------------------------------------------------------

    def transfer(self, target: NodeId) -> None:
        node = self.node
        if target == node.id:
            self.abort_transfer()
            return
        if not node.conf_state.is_voter(target) or target not in self.progress:
            raise TransferRejected(f"{target} is not a voter")
        if self.transferee == target:
            return
        self.transferee = target
        self.transfer_elapsed = 0
        if self.progress[target].match == node.log.last_index():
            self._send_timeout_now(target)
        else:
            self._send_append(target)

    def abort_transfer(self) -> None:
        self.transferee = None
        self.transfer_elapsed = 0

    def _send_timeout_now(self, to: NodeId) -> None:
        node = self.node
        cfg = node.config
        node.send(TimeoutNow(src=node.id, dst=to, term=node.term))
        self._no_lease_until = node.now + cfg.transfer_timeout + cfg.election_ticks_max

    def _maybe_transfer_to_preferred(self) -> None:
        node = self.node
        preferred = node.config.preferred_leader
        if (
            preferred is None
            or preferred == node.id
            or self.transferee is not None
            or self.preferred_backoff > 0
            or not self.committed_in_term
            or not node.conf_state.is_voter(preferred)
        ):
            return
        pr = self.progress.get(preferred)
        if pr is None or not pr.recent_active or pr.match != node.log.last_index():
            return
        self.preferred_backoff = node.config.preferred_leader_backoff_ticks
        self.transfer(preferred)

    # --- the leader lease --------------------------------------------------------------------

    def lease_remaining(self) -> int:
        """Ticks left of the lease: ``lease_ticks`` after the send tick of the latest round a
        quorum of voters acknowledged (this node counts as acknowledging now); 0 during a
        leadership transfer and for a while after a TimeoutNow."""
        node = self.node
        now = node.now
        if self.transferee is not None or now < self._no_lease_until:
            return 0
        lease = node.config.lease_ticks
        never = now - lease
        anchors = [
            now if v == node.id else self._acked_tick.get(v, never) for v in node.conf_state.voters
        ]
        return max(0, quorum_index(anchors) + lease - now)

    def _forget_old_rounds(self) -> None:
        horizon = self.node.now - self.node.config.lease_ticks
        rounds = self._round_ticks
        while rounds:
            first = next(iter(rounds))
            if rounds[first] > horizon:
                break
            del rounds[first]

    # --- inspection --------------------------------------------------------------------------

    def progress_status(self) -> tuple[ProgressStatus, ...]:
        cs = self.node.conf_state
        return tuple(
            ProgressStatus(
                node_id=member,
                state=pr.state,
                match=pr.match,
                next=pr.next,
                recent_active=pr.recent_active,
                learner=cs.is_learner(member),
                lost_log=pr.lost_log - 1 if pr.lost_log else None,
            )
            for member, pr in self.progress.items()
        )
