"""RaftNode: Raft as a pure state machine (etcd raft style). No clock, no sockets, no files.

Inputs: ``tick()`` (time), ``step(message)`` (a peer spoke), ``propose()``,
``propose_conf_change()``, ``transfer_leadership()``, ``read_index()``, ``compact()``.
Output: ``ready()`` returns a :class:`~controller.raft.ready.Ready` batch, which the driver
persists, sends and applies before calling ``advance(ready)``. At most one Ready is outstanding.

A driver loop, in the spirit of etcd's ``doc.go``::

    node = RaftNode(RaftConfig(node_id="n0"), storage, random.Random(seed))
    while True:
        await wake.wait(); wake.clear()           # set by the tick timer, the transport, requests
        for msg in inbox.drain():
            node.step(msg)
        for _ in range(due_ticks()):
            node.tick()
        while (rd := node.ready()) is not None:
            transport.send_all(rd.messages)       # may overlap with the fsync below
            await to_thread(storage.save, hard_state=rd.hard_state, entries=rd.entries,
                            snapshot=rd.snapshot, compaction=rd.compaction, sync=rd.must_sync)
            transport.send_all(rd.persisted_messages)
            if rd.snapshot is not None:
                state_machine.restore(rd.snapshot.data)
            for entry in rd.committed_entries:
                state_machine.apply(entry)        # resolves the proposal's future by index
            for rs in rd.read_states:
                serve_read(rs.ctx, rs.index)
            node.advance(rd)
            if state_machine.applied - last_snapshot_index >= snapshot_every:
                node.compact(state_machine.applied, state_machine.snapshot())

The role handlers follow etcd's split: :meth:`step` does the term bookkeeping shared by every
role, then the role's own handler runs; the leader's half lives in :mod:`.leader`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

from protocol.raft_types import (
    MAX_COUNTER,
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
from .errors import ConfChangeRejected, NotLeader, ProposalDropped, ReadyNotAdvanced
from .leader import Leader, ProgressStatus
from .log import RaftLog
from .membership import (
    ConfChange,
    ConfChangeType,
    ConfigHistory,
    apply_conf_change,
    decode_conf_change,
    encode_conf_change,
    majority,
)
from .ready import Ready, Role, SoftState

if TYPE_CHECKING:
    from storage.raftlog.view import StorageView


@dataclass(frozen=True, slots=True, kw_only=True)
class Status:
    """A consistent picture of the node for metrics, logs and ``getControllerMetaData``."""

    node_id: NodeId
    role: Role
    term: int
    vote: NodeId | None
    lead: NodeId | None
    commit: int
    applied: int
    first_index: int
    last_index: int
    conf_state: ConfState
    transferee: NodeId | None
    progress: tuple[ProgressStatus, ...]
    """Per member, on the leader only."""


def bootstrap(voters: list[NodeId] | tuple[NodeId, ...]) -> tuple[HardState, Entry]:
    """The first durable state of every founding member of a new group.

    Write it (``storage.save(hard_state=hs, entries=[entry])``) to an empty storage on each
    founding node, with the same ``voters`` everywhere. A node that joins later starts with an
    empty storage and no bootstrap: it waits to be added and receives entry 1 from the leader.
    """
    cc = ConfChange.bootstrap(tuple(voters))
    if not cc.node_ids:
        raise ValueError("bootstrap needs at least one voter")
    entry = Entry(term=1, index=1, type=EntryType.CONF_CHANGE, data=encode_conf_change(cc))
    return HardState(term=1, vote=None, commit=1), entry


class RaftNode:
    def __init__(self, config: RaftConfig, storage: StorageView, rng: random.Random) -> None:
        self.config = config
        self.id: NodeId = config.node_id
        self.storage = storage
        self._rng = rng
        self.log = RaftLog(storage)

        hs = storage.hard_state()
        if hs.term >= MAX_COUNTER:
            raise ValueError(f"hard state term {hs.term} cannot be incremented (limit 2^63-1)")
        meta = storage.snapshot_meta()
        self._conf = ConfigHistory(meta.index, meta.conf_state)
        first, last = self.log.first_index(), self.log.last_index()
        if last >= first:
            for entry in storage.entries(first, last + 1):
                if entry.type is EntryType.CONF_CHANGE:
                    self._record_conf_entry(entry)
        # A lost log tail (a damaged disk) can leave commit past the log; never go beyond it.
        self.log.commit_to(min(max(hs.commit, meta.index), last))

        self.term = hs.term
        self.vote: NodeId | None = hs.vote
        self.lead: NodeId | None = None
        self.role = Role.FOLLOWER
        self._durable_hs = hs
        self._now = 0
        """Ticks since this node started: the core's clock (the leader lease is kept in it)."""
        self._election_elapsed = 0
        self._randomized_timeout = config.election_ticks_max
        self._votes: dict[NodeId, bool] = {}
        self._campaign_transfer = False
        """Whether the campaign under way was started by a TimeoutNow (its requests say so)."""
        self._stepped_back_in = -1
        """The term in which this node last stepped back from its pre-campaign for a peer's
        (see :meth:`_steps_back_for`): at most once per term."""
        self._leader: Leader | None = None
        self._msgs: list[Message] = []
        self._pending_reads: list[ReadState] = []
        self._compaction: Snapshot | None = None
        self._outstanding: Ready | None = None
        self._prev_soft = SoftState(lead=None, role=Role.FOLLOWER)
        # The snapshot being received: (sender, sender's term, meta) and the bytes so far.
        self._snap_key: tuple[NodeId, int, SnapshotMeta] | None = None
        self._snap_buf = bytearray()
        self._become_follower(self.term, None)

    # --- public inputs ---------------------------------------------------------------------

    def tick(self) -> None:
        """One unit of time passed (the driver's tick, 100 ms by default)."""
        self._now += 1
        if self._leader is not None:
            self._leader.tick()
            return
        self._election_elapsed += 1
        if self._promotable() and self._election_elapsed >= self._randomized_timeout:
            self._election_elapsed = 0
            self._hup(transfer=False)
        elif self.role is Role.PRE_CANDIDATE or self.role is Role.CANDIDATE:
            # Ask again every tick those that have not answered: a request lost, or ignored by
            # a voter that still heard the old leader less than election_ticks_min ticks ago
            # (its lease), would otherwise cost a whole election timeout (issue 34).
            self._request_votes(pre=self.role is Role.PRE_CANDIDATE, unanswered_only=True)

    def tick_after_stall(self, stalled: int) -> None:
        """``stalled`` ticks passed in which this node could neither hear nor speak (its process
        or its machine stood still: the driver's tick came that late), then one ordinary tick.

        The stall counts as time for what must hold in real time: a leader's lease
        (:meth:`lease_remaining`) shrinks by it. It does not count as silence of the others:
        their messages could not be read either. So a follower's election clock does not run
        during it (a whole-machine stall of a few hundred ms starts no election; as a follower
        also grants no vote while that clock is below ``election_ticks_min``, this only waits
        longer), and a leader starts its check-quorum window over, with every follower to be
        heard from again within it. A dead leader is still replaced: by a follower that did not
        stall, or one election timeout later. A leader whose TimeoutNow may still have been
        unsent when the stall began holds no lease for the whole window after it
        (:meth:`Leader.after_stall`)."""
        if stalled > 0:
            self._now += stalled
            if self._leader is not None:
                self._election_elapsed = 0
                self._leader.restart_quorum_window()
                self._leader.after_stall(stalled)
        self.tick()

    def step(self, m: Message) -> bool:
        """Feed one message from a peer. Returns False when the message was dropped unseen:
        it is for another node, comes from a node this node does not listen to (see
        :meth:`listens_to`), carries a term this node could not increment, or is a TimeoutNow
        of another term (a real one always carries its leader's term)."""
        if m.dst != self.id or m.term >= MAX_COUNTER or not self.listens_to(m):
            return False
        if isinstance(m, TimeoutNow) and m.term != self.term:
            return False
        self._step(m)
        return True

    def listens_to(self, m: Message) -> bool:
        """Messages from members are heard: the configuration in use or the committed one (a
        change may be pending), or the leader this node follows. From a node outside them,
        only a leader's message or a vote request at this node's term or later, and only
        while no leader's lease holds this node: a node whose log lags behind a membership
        change must still hear the new leader and vote for a new member, but a stranger must
        not bump the term of a healthy group, nor ask it for anything else. A node without a
        configuration (it is joining) hears anyone."""
        current = self._conf.current
        if not current.voters and not current.learners:
            return True
        src = m.src
        if current.is_member(src) or src == self.lead:
            return True
        if self._conf.at(self.log.committed).is_member(src):
            return True
        return (
            isinstance(m, AppendEntries | Heartbeat | InstallSnapshot | VoteRequest)
            and m.term >= self.term
            and not self._in_lease()
        )

    def _step(self, m: Message) -> None:
        if m.term > self.term:
            if isinstance(m, VoteRequest):
                if not m.transfer and self._in_lease():
                    # A live leader was heard from recently: a removed, rejoining or partitioned
                    # node must not disrupt the group (check-quorum lease).
                    return
                if not m.pre_vote:
                    self._become_follower(m.term, None)
            elif isinstance(m, VoteResponse) and m.pre_vote and m.granted:
                pass  # a granted pre-vote carries the term we would campaign at
            elif isinstance(m, AppendEntries | Heartbeat | InstallSnapshot):
                self._become_follower(m.term, m.src)
            elif self.role is Role.FOLLOWER and self._in_lease():
                # An answer to something this node sent before (a pre-vote it has given up, an
                # append of a term it led): a follower that acknowledged its leader less than
                # election_ticks_min ticks ago votes for nobody else until then (the leader's
                # lease counts on it). Taking the new term would clear its leader and its vote,
                # and it could then grant that term's candidate within the lease. It learns the
                # term from that term's leader, or from the next answer once the lease is over.
                return
            else:
                self._become_follower(m.term, None)
        elif m.term < self.term:
            if isinstance(m, AppendEntries | Heartbeat | InstallSnapshot):
                # A stale leader (or a node whose term we passed while partitioned): tell it our
                # term so it steps down, since check-quorum may stop us from adopting its term.
                # (A rejection of index 0, so a leader of our term that gets it late ignores it.)
                if self.config.check_quorum or self.config.pre_vote:
                    self.send(
                        AppendResponse(src=self.id, dst=m.src, term=self.term, index=0, reject=True)
                    )
            elif isinstance(m, VoteRequest) and m.pre_vote:
                self.send(
                    VoteResponse(
                        src=self.id, dst=m.src, term=self.term, granted=False, pre_vote=True
                    )
                )
            return

        if isinstance(m, VoteRequest):
            self._handle_vote_request(m)
        elif self._leader is not None:
            self._leader.step(m)
        elif self.role is Role.FOLLOWER:
            self._step_follower(m)
        else:
            self._step_candidate(m)

    def propose(self, data: bytes) -> int:
        """Append ``data`` to the log; returns its index. The entry is committed when it shows up
        in a Ready's ``committed_entries`` with this index *and* this node's term (a new leader
        may overwrite an uncommitted index). Raises NotLeader, or ProposalDropped during a
        leadership transfer or when ``max_uncommitted_bytes`` of proposals await commit."""
        leader = self._require_leader()
        if leader.transferee is not None:
            raise ProposalDropped("leadership transfer in progress")
        leader.admit_proposal(len(data))
        return self._append_local(EntryType.NORMAL, data)

    def propose_conf_change(self, cc: ConfChange) -> int:
        """Propose one membership change (add learner, promote, remove); returns its index.
        Raises NotLeader, ProposalDropped (try again later) or ConfChangeRejected (invalid)."""
        leader = self._require_leader()
        if cc.type is ConfChangeType.BOOTSTRAP:
            raise ConfChangeRejected("bootstrap is only valid as entry 1")
        leader.check_conf_change(cc)
        return self._append_local(EntryType.CONF_CHANGE, encode_conf_change(cc))

    def transfer_leadership(self, target: NodeId) -> None:
        """Hand leadership to ``target`` once its log has caught up; abandoned after the transfer
        timeout. Proposals are refused meanwhile. Raises NotLeader or TransferRejected."""
        self._require_leader().transfer(target)

    def read_index(self, ctx: bytes) -> None:
        """Ask for a linearizable read. A ReadState with the same ``ctx`` appears in a later
        Ready once the read is safe to serve; if the leader changes first it never appears and
        the caller must time out and retry. ``ctx`` should be unique per request. A follower
        forwards the request to the leader. Raises NotLeader when no leader is known."""
        if self._leader is not None:
            self._leader.read_index(self.id, ctx)
        elif self.lead is not None:
            self.send(ReadIndexRequest(src=self.id, dst=self.lead, term=self.term, ctx=ctx))
        else:
            raise NotLeader(None)

    def compact(self, index: int, data: bytes) -> bool:
        """The state machine's snapshot ``data`` taken at applied ``index``. The next Ready
        carries it as ``compaction``: persisting it drops the log up to ``index``.

        Returns False (and does nothing) when a snapshot at or past ``index`` is already durable
        or on its way (e.g. one just arrived from the leader). Raises ValueError when ``index``
        is past the applied index."""
        if index > self.log.applied:
            raise ValueError(f"index {index} is past the applied index {self.log.applied}")
        floor = max(self.storage.snapshot_meta().index, self.log.first_index() - 1)
        if self._compaction is not None:
            floor = max(floor, self._compaction.index)
        if index <= floor:
            return False
        meta = SnapshotMeta(index=index, term=self.log.term(index), conf_state=self._conf.at(index))
        self._compaction = Snapshot(meta=meta, data=data)
        return True

    def campaign(self) -> None:
        """Start an election now (as if the election timeout had passed)."""
        self._hup(transfer=False)

    def lease_remaining(self) -> int:
        """Ticks for which this node may still act as the leader without asking a quorum
        (0: it holds no lease). Only with ``leader_lease``. The driver converts it to time
        from the moment its latest tick fell due: no other node can become leader before
        that lease ends (see :attr:`RaftConfig.lease_ticks`)."""
        if self._leader is None or not self.config.leader_lease:
            return 0
        return self._leader.lease_remaining()

    def report_unreachable(self, node_id: NodeId) -> None:
        """The transport failed to deliver to ``node_id``: stop streaming to it and probe."""
        if self._leader is not None:
            self._leader.report_unreachable(node_id)

    def report_refused(self, node_id: NodeId) -> None:
        """The transport's connection to ``node_id`` was refused: nothing listens at its address,
        its process is gone (not merely slow or cut off: those time out, and are only
        :meth:`report_unreachable`). A follower whose leader that is stops deferring to it:
        it grants the other voters' (pre-)votes from now on (a dead process holds no lease) and
        campaigns ``election_ticks_min - 1`` ticks before its drawn timeout would end, still
        random over the same spread (issue 34: a failover waited the whole 3 to 6 ticks of
        silence). Two followers that both saw it and campaign at once (their ticks late) settle
        it in their pre-votes: one steps back for the other (:meth:`_steps_back_for`).
        Were the leader alive after all (restarted in between), its next message makes this
        node its follower again."""
        if node_id == self.lead and self.role is Role.FOLLOWER and self._promotable():
            self.lead = None
            early = self._randomized_timeout - self.config.election_ticks_min + 1
            self._randomized_timeout = min(
                self._randomized_timeout, self._election_elapsed + max(early, 1)
            )

    # --- outputs -----------------------------------------------------------------------------

    def has_ready(self) -> bool:
        if self._outstanding is not None:
            return False
        log = self.log
        return bool(
            self._msgs
            or log.unstable.next_entries()
            or log.unstable.next_snapshot() is not None
            or log.has_next_committed_entries()
            or self._compaction is not None
            or any(rs.index <= log.committed for rs in self._pending_reads)
            or self._hard_state() != self._durable_hs
            or self._soft_state() != self._prev_soft
            or (self._leader is not None and self._leader.has_pending_sends())
        )

    def ready(self) -> Ready | None:
        """The next batch of work, or None when there is nothing to do."""
        if self._outstanding is not None:
            raise ReadyNotAdvanced("advance() the previous Ready before asking for another")
        if self._leader is not None:
            self._leader.flush()
        log = self.log
        snapshot = log.unstable.next_snapshot()
        entries = tuple(log.unstable.next_entries())
        committed = tuple(log.next_committed_entries(self.config.max_apply_bytes))
        if committed:
            applied_after = committed[-1].index
        else:
            applied_after = max(log.applied, snapshot.index if snapshot is not None else 0)
        reads = tuple(rs for rs in self._pending_reads if rs.index <= applied_after)
        hs = self._hard_state()
        hard_state = hs if hs != self._durable_hs else None
        soft = self._soft_state()
        compaction = self._compaction if snapshot is None else None

        now: list[Message] = []
        after: list[Message] = []
        if (hs.term, hs.vote) != (self._durable_hs.term, self._durable_hs.vote):
            after = self._msgs  # nothing leaves a node whose term and vote are not yet durable
        else:
            for m in self._msgs:
                (after if isinstance(m, VoteResponse | AppendResponse) else now).append(m)

        rd = Ready(
            hard_state=hard_state,
            entries=entries,
            snapshot=snapshot,
            compaction=compaction,
            messages=tuple(now),
            persisted_messages=tuple(after),
            committed_entries=committed,
            read_states=reads,
            soft_state=soft if soft != self._prev_soft else None,
            must_sync=bool(entries)
            or snapshot is not None
            or compaction is not None
            or (hs.term, hs.vote) != (self._durable_hs.term, self._durable_hs.vote),
        )
        if rd.is_empty():
            return None
        log.unstable.accept_in_progress()
        self._msgs = []
        self._compaction = None
        if reads:
            self._pending_reads = [rs for rs in self._pending_reads if rs.index > applied_after]
        self._prev_soft = soft
        self._outstanding = rd
        return rd

    def advance(self, rd: Ready) -> None:
        """The driver has persisted, sent and applied ``rd``."""
        if rd is not self._outstanding:
            raise ValueError("advance() takes the Ready returned by the last ready()")
        self._outstanding = None
        log = self.log
        if rd.hard_state is not None:
            self._durable_hs = rd.hard_state
        if rd.snapshot is not None:
            log.stable_snap_to(rd.snapshot.index)
            log.applied_to(rd.snapshot.index)
        if rd.entries:
            last = rd.entries[-1]
            log.stable_to(last.index, last.term)
        if rd.committed_entries:
            log.applied_to(rd.committed_entries[-1].index)
        if rd.compaction is not None:
            self._conf.compact_to(rd.compaction.index)
        if self._leader is not None:
            self._leader.on_persisted(log.persisted_last_index())
        elif (
            self.role is Role.CANDIDATE
            and (self._durable_hs.term, self._durable_hs.vote) == (self.term, self.id)
            and self.id not in self._votes
        ):
            # Our own vote counts only once it is durable.
            self._record_vote(self.id, True)

    # --- what the leader half uses (controller.raft.leader.LeaderNode) -----------------------

    @property
    def now(self) -> int:
        """Ticks since this node started: the core's clock (the leader lease is kept in it)."""
        return self._now

    @property
    def last_conf_change_index(self) -> int:
        """Index of the latest membership change in the log, committed or not (0: none)."""
        return self._conf.last_change_index

    def count_election_tick(self) -> bool:
        """The leader's tick of the election clock: True, and the count starts over, once
        ``election_ticks_min`` ticks have passed (time for the check-quorum test)."""
        self._election_elapsed += 1
        if self._election_elapsed < self.config.election_ticks_min:
            return False
        self._election_elapsed = 0
        return True

    def add_read_state(self, rs: ReadState) -> None:
        """A read index for this node's own request: handed out once applied (see ready())."""
        self._pending_reads.append(rs)

    # --- inspection --------------------------------------------------------------------------

    @property
    def conf_state(self) -> ConfState:
        """The configuration in use: the latest in the log, committed or not."""
        return self._conf.current

    @property
    def commit_index(self) -> int:
        return self.log.committed

    @property
    def applied_index(self) -> int:
        return self.log.applied

    @property
    def lost_log_changes(self) -> int:
        """On the leader, how often a member's lost-log report (``ProgressStatus.lost_log``)
        changed this term; 0 elsewhere. Cheap enough to read after every Ready."""
        return self._leader.lost_log_changes if self._leader is not None else 0

    @property
    def transferee(self) -> NodeId | None:
        return self._leader.transferee if self._leader is not None else None

    def status(self) -> Status:
        return Status(
            node_id=self.id,
            role=self.role,
            term=self.term,
            vote=self.vote,
            lead=self.lead,
            commit=self.log.committed,
            applied=self.log.applied,
            first_index=self.log.first_index(),
            last_index=self.log.last_index(),
            conf_state=self._conf.current,
            transferee=self.transferee,
            progress=self._leader.progress_status() if self._leader is not None else (),
        )

    # --- role transitions --------------------------------------------------------------------

    def _reset(self, term: int) -> None:
        if term != self.term:
            self.term = term
            self.vote = None
        self.lead = None
        self._election_elapsed = 0
        self._randomized_timeout = self._rng.randint(
            self.config.election_ticks_min, self.config.election_ticks_max
        )
        self._votes = {}
        self._leader = None

    def _become_follower(self, term: int, lead: NodeId | None) -> None:
        self._reset(term)
        self.lead = lead
        self.role = Role.FOLLOWER

    def _become_pre_candidate(self) -> None:
        # Pre-vote changes neither term nor vote: a node that cannot win leaves no trace.
        self._votes = {}
        self._leader = None
        self.lead = None
        self.role = Role.PRE_CANDIDATE

    def _become_candidate(self) -> None:
        self._reset(self.term + 1)
        self.vote = self.id
        self.role = Role.CANDIDATE

    def _become_leader(self) -> None:
        self._reset(self.term)
        self.lead = self.id
        self.role = Role.LEADER
        self._leader = Leader(self)
        # The no-op lets the new leader commit (and so learn the commit index) in its own term.
        self._append_local(EntryType.NOOP, b"")

    def step_down(self) -> None:
        """Called by the leader half: lost quorum, or removed from the configuration."""
        self._become_follower(self.term, None)

    # --- elections ---------------------------------------------------------------------------

    def _promotable(self) -> bool:
        return self._conf.current.is_voter(self.id)

    def _in_lease(self) -> bool:
        cfg = self.config
        if cfg.leader_lease and self._now < cfg.election_ticks_min:
            return True  # just (re)started: we may have acknowledged a lease-holding leader
        return (
            cfg.check_quorum
            and self.lead is not None
            and self._election_elapsed < cfg.election_ticks_min
        )

    def _hup(self, *, transfer: bool) -> None:
        if self.role is Role.LEADER or not self._promotable():
            return
        if self.term + 1 >= MAX_COUNTER:
            return  # never reached through messages (the codec and step() cap terms)
        self._campaign(pre=self.config.pre_vote and not transfer, transfer=transfer)

    def _campaign(self, *, pre: bool, transfer: bool) -> None:
        if pre:
            self._become_pre_candidate()
        else:
            self._become_candidate()
        self._campaign_transfer = transfer
        self._request_votes(pre=pre, unanswered_only=False)
        if pre:
            self._record_vote(self.id, True)

    def _request_votes(self, *, pre: bool, unanswered_only: bool) -> None:
        """A (pre-)vote request to every other voter (``unanswered_only``: to those whose
        answer has not come)."""
        vote_term = self.term + 1 if pre else self.term
        last_index = self.log.last_index()
        last_term = self.log.last_term()
        for voter in self._conf.current.voters:
            if voter != self.id and not (unanswered_only and voter in self._votes):
                self.send(
                    VoteRequest(
                        src=self.id,
                        dst=voter,
                        term=vote_term,
                        last_log_index=last_index,
                        last_log_term=last_term,
                        pre_vote=pre,
                        transfer=self._campaign_transfer,
                    )
                )

    def _record_vote(self, voter: NodeId, granted: bool) -> None:
        self._votes.setdefault(voter, granted)
        voters = self._conf.current.voters
        need = majority(len(voters))
        granted_n = sum(1 for v in voters if self._votes.get(v) is True)
        rejected_n = sum(1 for v in voters if self._votes.get(v) is False)
        if granted_n >= need:
            if self.role is Role.PRE_CANDIDATE:
                self._campaign(pre=False, transfer=False)
            elif self.role is Role.CANDIDATE:
                self._become_leader()
        elif rejected_n > len(voters) - need:
            self._become_follower(self.term, None)

    def _handle_vote_request(self, m: VoteRequest) -> None:
        can_vote = (
            self.vote == m.src
            or (self.vote is None and self.lead is None)
            or (m.pre_vote and m.term > self.term)
        )
        if can_vote and self.log.is_up_to_date(m.last_log_index, m.last_log_term):
            if self._steps_back_for(m):
                self._step_back()
            self.send(
                VoteResponse(src=self.id, dst=m.src, term=m.term, granted=True, pre_vote=m.pre_vote)
            )
            if not m.pre_vote:
                self._election_elapsed = 0
                self.vote = m.src
        else:
            self.send(
                VoteResponse(
                    src=self.id, dst=m.src, term=self.term, granted=False, pre_vote=m.pre_vote
                )
            )

    def _steps_back_for(self, m: VoteRequest) -> bool:
        """Whether this pre-candidate, about to grant ``m`` (a pre-vote whose log is at least
        as up to date as its own), steps back to follower instead of going on with its own
        pre-campaign: two pre-campaigns at once (both followers told at once that their leader's
        process is gone, their ticks late) would otherwise both succeed, each granting the
        other, and split the real vote between two candidates of one term (issue 34). It steps
        back when ``m``'s campaign is for the same term as its own and its log is more up to
        date, or as up to date and ``m.src`` ranks ahead (:meth:`_ranks_ahead`), so of two such
        pre-campaigns exactly one goes on: the other grants it and waits a new election timeout.

        A node that ranks ahead grants and goes on: refusing could block the other for good
        were it cut off from the rest. And a node steps back at most once per term, so a node
        ranked ahead that cannot win (slow, partitioned, its answers lost while it asks again
        every tick) costs the others one election timeout, not their liveness. Safety is
        untouched: a pre-candidate has promised nothing, and the grant is the one it gave."""
        if not m.pre_vote or self.role is not Role.PRE_CANDIDATE or m.term != self.term + 1:
            return False
        if self._stepped_back_in == self.term:
            return False
        log = self.log
        if (m.last_log_term, m.last_log_index) != (log.last_term(), log.last_index()):
            return True  # more up to date than ours (the grant's condition): it may win, we not
        return self._ranks_ahead(m.src)

    def _step_back(self) -> None:
        """From pre-candidate to follower, for a peer's campaign (:meth:`_steps_back_for`), with
        a whole ``election_ticks_min`` more than a fresh election timeout before campaigning
        again: the peer still has to read this node's grant, make its term and vote durable and
        win the real vote. A new pre-campaign of this node in the same term could otherwise
        count a grant the peer sent to its first one, arriving late (loops running late), and
        become a candidate beside the peer (seen in tests/controller/test_controller_split_vote
        .py with a 3-tick timeout)."""
        self._stepped_back_in = self.term
        self._become_follower(self.term, None)
        self._randomized_timeout += self.config.election_ticks_min

    def _ranks_ahead(self, other: NodeId) -> bool:
        """Whether ``other`` goes first between two pre-campaigns with equal logs: the
        preferred leader (no transfer is then needed after the election), then the lower node
        id. The same order on every node."""
        preferred = self.config.preferred_leader
        return (other != preferred, other) < (self.id != preferred, self.id)

    # --- follower and candidate --------------------------------------------------------------

    def _step_candidate(self, m: Message) -> None:
        if isinstance(m, AppendEntries | Heartbeat | InstallSnapshot):
            self._become_follower(m.term, m.src)
            self._step_follower(m)
        elif isinstance(m, VoteResponse) and m.pre_vote == (self.role is Role.PRE_CANDIDATE):
            self._record_vote(m.src, m.granted)

    def _step_follower(self, m: Message) -> None:
        if isinstance(m, AppendEntries):
            self._election_elapsed = 0
            self.lead = m.src
            self._handle_append(m)
        elif isinstance(m, Heartbeat):
            self._election_elapsed = 0
            self.lead = m.src
            self.log.commit_to(min(m.commit, self.log.last_index()))
            self.send(
                HeartbeatResponse(src=self.id, dst=m.src, term=self.term, read_seq=m.read_seq)
            )
        elif isinstance(m, InstallSnapshot):
            self._election_elapsed = 0
            self.lead = m.src
            self._handle_snapshot_chunk(m)
        elif isinstance(m, TimeoutNow):
            # The leader is handing over: campaign at once, skipping pre-vote and the lease.
            # Only the leader of this term may ask; from anyone else it is a forgery or a
            # confusion, and obeying it would move leadership at a stranger's word.
            if m.src == self.lead:
                self._hup(transfer=True)
        elif isinstance(m, ReadIndexResponse):
            self.add_read_state(ReadState(index=m.index, ctx=m.ctx))

    def _handle_append(self, m: AppendEntries) -> None:
        log = self.log
        if m.prev_log_index < log.committed:
            self.send(AppendResponse(src=self.id, dst=m.src, term=self.term, index=log.committed))
            return
        last_new, conflict = log.maybe_append(
            m.prev_log_index, m.prev_log_term, m.commit, m.entries
        )
        if last_new is not None:
            if conflict:
                self._entries_appended(m.entries[conflict - m.prev_log_index - 1 :], conflict)
            self.send(AppendResponse(src=self.id, dst=m.src, term=self.term, index=last_new))
            return
        hint = min(m.prev_log_index, log.last_index())
        hint, hint_term = log.find_conflict_by_term(hint, m.prev_log_term)
        self.send(
            AppendResponse(
                src=self.id,
                dst=m.src,
                term=self.term,
                index=m.prev_log_index,
                reject=True,
                reject_hint=hint,
                hint_term=hint_term,
            )
        )

    def _handle_snapshot_chunk(self, m: InstallSnapshot) -> None:
        if m.meta.index <= self.log.committed:
            # Already have it (a duplicate, or the final chunk's ack was lost).
            self.send(
                AppendResponse(src=self.id, dst=m.src, term=self.term, index=self.log.committed)
            )
            return
        key = (m.src, m.term, m.meta)
        if key != self._snap_key:
            self._snap_key = key
            self._snap_buf = bytearray()
        buf = self._snap_buf
        if m.offset == len(buf) and len(buf) + len(m.data) <= self.config.max_snapshot_bytes:
            buf += m.data
            if m.done:
                snapshot = Snapshot(meta=m.meta, data=bytes(buf))
                self._snap_key = None
                self._snap_buf = bytearray()
                self._restore(snapshot)
                self.send(
                    AppendResponse(
                        src=self.id, dst=m.src, term=self.term, index=self.log.last_index()
                    )
                )
                return
        elif m.offset == len(buf):
            self._snap_key = None  # too big: drop it, the leader starts over
            self._snap_buf = bytearray()
        self.send(
            InstallSnapshotAck(
                src=self.id,
                dst=m.src,
                term=self.term,
                snapshot_index=m.meta.index,
                offset=len(self._snap_buf),
            )
        )

    def _restore(self, snapshot: Snapshot) -> bool:
        log = self.log
        if snapshot.index <= log.committed:
            return False
        if log.match_term(snapshot.index, snapshot.term):
            # Our log already holds the snapshot's last entry: just move the commit index.
            log.commit_to(snapshot.index)
            return False
        log.restore(snapshot)
        self._conf.reset(snapshot.index, snapshot.meta.conf_state)
        self._compaction = None
        return True

    # --- the log and the configuration -------------------------------------------------------

    def _append_local(self, kind: EntryType, data: bytes) -> int:
        """Append one entry as the leader and schedule its replication (batched at ready())."""
        leader = self._leader
        assert leader is not None
        entry = Entry(term=self.term, index=self.log.last_index() + 1, type=kind, data=data)
        self.log.append([entry])
        self._entries_appended((entry,), 0)
        leader.entries_appended()
        return entry.index

    def _entries_appended(self, entries: tuple[Entry, ...], conflict: int) -> None:
        changed = self._conf.truncate_from(conflict) if conflict else False
        for entry in entries:
            if entry.type is EntryType.CONF_CHANGE:
                changed = self._record_conf_entry(entry) or changed
        if changed and self._leader is not None:
            self._leader.conf_changed()

    def _record_conf_entry(self, entry: Entry) -> bool:
        try:
            cs = apply_conf_change(self._conf.current, decode_conf_change(entry.data))
        except (ValueError, ConfChangeRejected):
            cs = self._conf.current  # never proposed by a correct leader; keep the config
        self._conf.append(entry.index, cs)
        return True

    # --- helpers -----------------------------------------------------------------------------

    def _require_leader(self) -> Leader:
        if self._leader is None:
            raise NotLeader(self.lead)
        return self._leader

    def send(self, m: Message) -> None:
        """Queue ``m`` for the next Ready (the leader half sends through this too)."""
        self._msgs.append(m)

    def _hard_state(self) -> HardState:
        return HardState(term=self.term, vote=self.vote, commit=self.log.committed)

    def _soft_state(self) -> SoftState:
        return SoftState(lead=self.lead, role=self.role)
