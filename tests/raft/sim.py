"""Deterministic simulation of a Raft group (in the spirit of TigerBeetle's VOPR).

One seed derives every setting (cluster size, fault rates, timings, sizes) and drives every
random choice through one ``random.Random``; the same seed replays the same run exactly, and a
failure names the seed (``Simulation(seed).run()`` replays it).

The world:

- time advances in steps; every node ticks once per ``STEPS_PER_TICK`` steps, with its own phase;
- the network delays each message 1..``max_delay`` steps (so it reorders), loses and duplicates
  messages, and applies partitions (a node isolated, the group split in two, one-way links);
- a message to a crashed node is refused: its sender is told (``report_refused``), as the
  driver's transport tells it;
- a node's disk is its MemoryStorage, written only when the Ready's simulated fsync completes
  (0..2 steps after ``ready()``); a crash loses the Ready in flight, or persists a torn part of
  it (a prefix of its entries, no hard state); a restarted node recovers from what was durable;
- a workload proposes at random nodes, changes membership (add a learner, which the leader
  promotes once caught up; remove a voter or learner, the leader included), transfers
  leadership, asks for read-index reads, and compacts the log every ``snapshot_every`` entries.

Checked after every step (:class:`Checker`): at most one leader per term; an entry once
committed never changes on any node (and every new leader holds all those committed in an
earlier term than its own: Raft's Leader Completeness); every node applies
the same sequence of entries (same state digest at each index); a snapshot restores exactly
the digest recorded at its index; a read's index covers every entry committed before the read
was asked; while a node holds a leader lease, no node leads a later term. Then the liveness
phase heals everything and requires a leader that commits a new entry and gets it applied on
every member within a bound. The run counts the faults it injects by kind (:class:`Faults`, in
the result), so a test can require that those its schedule was drawn with happened.

A Ready is carried out by :class:`controller.raft.ReadyHandler`, the asyncio driver's own
handling: the simulation supplies the network, the state machine and the fsync's timing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import heapq
import random
import struct
from dataclasses import dataclass, field

from controller.raft import (
    AppendResponse,
    ConfChange,
    Entry,
    Message,
    NodeId,
    RaftConfig,
    RaftError,
    RaftNode,
    ReadState,
    Ready,
    ReadyHandler,
    Role,
    Snapshot,
    VoteRequest,
    VoteResponse,
    bootstrap,
)
from storage.raftlog import MemoryStorage

STEPS_PER_TICK = 10
_SNAP_HEAD = struct.Struct(">Q16s")
_ENTRY_KEY = struct.Struct(">QQB")


@dataclass(frozen=True, slots=True)
class SimOptions:
    seed: int
    voters: int
    spares: int
    loss: float
    duplicate: float
    max_delay: int
    crash_rate: float
    torn_rate: float
    partition_rate: float
    propose_rate: float
    conf_rate: float
    transfer_rate: float
    read_rate: float
    snapshot_every: int
    chunk_bytes: int
    max_inflight: int
    max_msg_bytes: int
    max_uncommitted_bytes: int | None
    preferred_leader: bool
    safety_ticks: int
    liveness_ticks: int
    stall_rate: float = 0.0
    """Per step: the chance that one node, or every node at once (a whole-host stall), stands
    still for 3 to 12 ticks, then resumes through ``RaftNode.tick_after_stall``."""

    @classmethod
    def from_seed(
        cls, seed: int, *, voters: int | None = None, safety_ticks: int = 600
    ) -> SimOptions:
        rng = random.Random(seed)
        options = cls(
            seed=seed,
            voters=voters if voters is not None else rng.choice((3, 5)),
            spares=rng.randint(1, 2),
            loss=rng.choice((0.0, 0.02, 0.05, 0.15)),
            duplicate=rng.choice((0.0, 0.02, 0.1)),
            max_delay=rng.randint(1, 6),
            crash_rate=rng.choice((0.0, 0.002, 0.006)),
            torn_rate=rng.choice((0.0, 0.5)),
            partition_rate=rng.choice((0.0, 0.003, 0.01)),
            propose_rate=rng.choice((0.05, 0.2, 0.5)),
            conf_rate=rng.choice((0.0, 0.003, 0.01)),
            transfer_rate=rng.choice((0.0, 0.002, 0.01)),
            read_rate=rng.choice((0.0, 0.02, 0.1)),
            snapshot_every=rng.choice((4, 10, 25, 1000)),
            chunk_bytes=rng.choice((16, 64, 1024)),
            max_inflight=rng.choice((1, 2, 8)),
            max_msg_bytes=rng.choice((40, 200, 4096)),
            max_uncommitted_bytes=rng.choice((None, 200, 2000)),
            preferred_leader=rng.random() < 0.2,
            safety_ticks=safety_ticks,
            liveness_ticks=150,
            # From a generator of its own, so the draws above stay what they were per seed.
            stall_rate=random.Random(seed * 7 + 3).choice((0.0, 0.001, 0.003)),
        )
        if not options.faults_configured():
            # A schedule always injects something: when the draw left every fault off (about
            # one seed in 650), the network loses 2% of the messages.
            options = dataclasses.replace(options, loss=0.02)
        return options

    def faults_configured(self) -> tuple[str, ...]:
        """The kinds of fault (fields of :class:`Faults`) this schedule injects: each must
        happen at least once in a run."""
        kinds = {
            "partitions": self.partition_rate > 0,
            "lost": self.loss > 0,
            "duplicated": self.duplicate > 0,
            "reordered": self.max_delay > 1,
            "crashes": self.crash_rate > 0,
            "stalls": self.stall_rate > 0,
        }
        return tuple(kind for kind, on in kinds.items() if on)


@dataclass(slots=True)
class Faults:
    """What the simulation injected, by kind, while faults were on."""

    partitions: int = 0  # partitions applied (a node isolated, a split, one-way links)
    lost: int = 0  # messages dropped by the network
    duplicated: int = 0  # messages delivered twice
    reordered: int = 0  # messages delivered after a later message on the same link
    cut: int = 0  # messages dropped by a partition
    crashes: int = 0
    torn_writes: int = 0  # crashes that left a part of the Ready in flight on disk
    stalls: int = 0  # a node or every node stood still for a while

    def missing(self, kinds: tuple[str, ...]) -> list[str]:
        return [kind for kind in kinds if getattr(self, kind) == 0]


class SimFailure(AssertionError):
    pass


class Machine:
    """The replicated state: a digest chained over every applied entry."""

    def __init__(self) -> None:
        self.applied = 0
        self.digest = b"\x00" * 16

    def apply(self, entry: Entry) -> None:
        key = _ENTRY_KEY.pack(entry.index, entry.term, int(entry.type))
        self.digest = hashlib.blake2b(self.digest + key + entry.data, digest_size=16).digest()
        self.applied = entry.index

    def snapshot(self, filler: int) -> bytes:
        # The filler makes snapshots span several chunks.
        return _SNAP_HEAD.pack(self.applied, self.digest) + b"s" * filler

    def restore(self, raw: bytes) -> None:
        self.applied, self.digest = _SNAP_HEAD.unpack_from(raw, 0)


@dataclass(slots=True)
class SimNode:
    id: NodeId
    storage: MemoryStorage
    node: RaftNode | None = None
    handler: ReadyHandler | None = None
    machine: Machine = field(default_factory=Machine)
    persisting: tuple[Ready, int] | None = None
    phase: int = 0
    restart_at: int = 0
    last_role: Role = Role.FOLLOWER
    stalled_until: int = 0
    """Step at which a stalled node resumes (it neither ticks, reads nor sends before)."""
    missed_ticks: int = 0
    """Ticks that fell due during the current stall."""

    def stalled(self, now: int) -> bool:
        return self.stalled_until > now


class Checker:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.leaders: dict[int, NodeId] = {}
        self.committed: dict[int, tuple[int, int, bytes]] = {}
        self.commit_terms: dict[int, tuple[int, int]] = {}
        """Index -> (the term it was committed in, the step it was first seen committed): the
        lowest term of the nodes seen with it committed in that step, the committing leader's
        (it is checked in the step it commits)."""
        self.max_commit = 0
        self.digests: dict[int, bytes] = {}
        self.seen_commit: dict[NodeId, int] = {}
        self.read_floor: dict[bytes, int] = {}
        self.reads_served = 0
        self.applied_entries = 0
        self.leases_held = 0

    def fail(self, message: str) -> None:
        raise SimFailure(
            f"seed {self.sim.options.seed} step {self.sim.now}: {message}\n"
            f"replay: Simulation({self.sim.options!r}).run()"
        )

    def node_started(self, sn: SimNode) -> None:
        self.seen_commit[sn.id] = sn.storage.snapshot().index

    def check(self, sn: SimNode) -> None:
        node = sn.node
        assert node is not None
        if node.role is Role.LEADER:
            holder = self.leaders.setdefault(node.term, sn.id)
            if holder != sn.id:
                self.fail(f"two leaders in term {node.term}: {holder} and {sn.id}")
            if sn.last_role is not Role.LEADER:
                self._check_leader_completeness(sn.id, node)
        sn.last_role = node.role
        commit = node.commit_index
        seen = self.seen_commit.get(sn.id, 0)
        if commit > seen:
            lo = max(seen + 1, node.log.first_index())
            if lo <= commit:
                for entry in node.log.slice(lo, commit + 1):
                    self._committed(sn.id, entry)
                    self._commit_term(entry.index, node.term)
            self.seen_commit[sn.id] = commit
            self.max_commit = max(self.max_commit, commit)

    def check_leases(self, alive: list[SimNode]) -> None:
        """A leader lease means no other leader: while a node holds one, nobody leads a later
        term (a crashed node's lease ends with it)."""
        nodes = [sn.node for sn in alive if sn.node is not None]
        missed = {sn.id: sn.missed_ticks for sn in alive}
        for holder in nodes:
            # A stalled leader's lease runs on in real time (the driver's holds_lease): the
            # ticks it missed so far are gone from it.
            if holder.lease_remaining() - missed[holder.id] <= 0:
                continue
            for other in nodes:
                if other.role is Role.LEADER and other.term > holder.term:
                    self.fail(
                        f"{other.id} leads term {other.term} while {holder.id} holds a lease "
                        f"in term {holder.term} for {holder.lease_remaining()} more ticks"
                    )
            self.leases_held += 1

    def leaving(self, sn: SimNode, m: Message) -> None:
        """The durability contract, checked on every message as it leaves its node."""
        hs = sn.storage.hard_state()
        pre = isinstance(m, VoteRequest | VoteResponse) and m.pre_vote
        if not pre and m.term > hs.term:
            self.fail(f"{sn.id} sends {m} before its term {m.term} is durable ({hs})")
        if m.term < hs.term:
            return  # an answer from a term this node has left; it can never act in it again
        if isinstance(m, VoteResponse) and m.granted and not m.pre_vote and hs.vote != m.dst:
            self.fail(f"{sn.id} grants {m} before the vote is durable ({hs})")
        if isinstance(m, AppendResponse) and not m.reject and m.index:
            storage = sn.storage
            if storage.last_index() < m.index:
                self.fail(f"{sn.id} acks {m.index} with only {storage.last_index()} durable")
            # (The in-memory log may already hold a newer leader's entry there, not yet
            # durable; the acknowledged one is what the disk has.)
            if m.index >= storage.first_index() and storage.term(m.index) > m.term:
                self.fail(f"{sn.id} acks {m.index} but its durable entry is from a later term")

    def _committed(self, node_id: NodeId, entry: Entry) -> None:
        key = (entry.term, int(entry.type), entry.data)
        known = self.committed.setdefault(entry.index, key)
        if known != key:
            self.fail(f"{node_id} committed {key} at {entry.index}, but {known} was committed")

    def _commit_term(self, index: int, term: int) -> None:
        seen = self.commit_terms.get(index)
        if seen is None or (seen[1] == self.sim.now and term < seen[0]):
            self.commit_terms[index] = (term, self.sim.now)

    def _check_leader_completeness(self, node_id: NodeId, node: RaftNode) -> None:
        """Raft's Leader Completeness: an entry committed in a term is in the log of every
        leader of a later term. A leader of an earlier term may lack it: a candidate that
        stood still while its votes waited in its socket wins its old term after a later
        leader committed more (it cannot commit in that term: a quorum has moved on)."""
        first = node.log.first_index()
        for index in range(first, self.max_commit + 1):
            seen = self.commit_terms.get(index)
            if seen is not None and seen[0] >= node.term:
                continue
            term = node.log.term_or_none(index)
            if term != self.committed[index][0]:
                self.fail(f"new leader {node_id} lacks committed entry {index} (has term {term})")

    def applied(self, sn: SimNode, entry: Entry) -> None:
        known = self.committed.get(entry.index)
        key = (entry.term, int(entry.type), entry.data)
        if known is not None and known != key:
            self.fail(f"{sn.id} applied {key} at {entry.index}, committed was {known}")
        self.committed.setdefault(entry.index, key)
        digest = self.digests.setdefault(entry.index, sn.machine.digest)
        if digest != sn.machine.digest:
            self.fail(f"{sn.id} state diverged at {entry.index}")
        self.applied_entries += 1

    def restored(self, sn: SimNode, snapshot: Snapshot) -> None:
        digest = self.digests.get(snapshot.index)
        if digest is None or digest != sn.machine.digest:
            self.fail(f"{sn.id} restored a snapshot at {snapshot.index} with the wrong state")

    def read_asked(self, ctx: bytes) -> None:
        self.read_floor[ctx] = self.max_commit

    def read_served(self, sn: SimNode, index: int, ctx: bytes) -> None:
        floor = self.read_floor.get(ctx)
        if floor is None:
            self.fail(f"{sn.id} served an unknown read {ctx!r}")
            return
        if index < floor:
            self.fail(f"read {ctx!r} at {index} misses entries committed up to {floor}")
        if sn.machine.applied < index:
            self.fail(f"read {ctx!r} served at {sn.id} before applying {index}")
        self.reads_served += 1


@dataclass(slots=True)
class SimResult:
    seed: int
    steps: int
    leaders: int
    committed: int
    applied: int
    reads: int
    crashes: int
    conf_changes: int
    snapshots_installed: int
    faults: Faults


class Simulation:
    def __init__(self, options: SimOptions | int) -> None:
        if isinstance(options, int):
            options = SimOptions.from_seed(options)
        self.options = options
        self.rng = random.Random(options.seed * 7919 + 1)
        self.stall_rng = random.Random(options.seed * 7919 + 2)
        """Stalls draw from their own generator: a seed without them runs as it always did."""
        self.first_stall_at = self.stall_rng.randint(1, options.safety_ticks * STEPS_PER_TICK // 2)
        """A schedule with stalls has one by then at the latest."""
        self.now = 0
        self.seq = 0
        self.inflight: list[tuple[int, int, Message]] = []
        self.blocked: set[tuple[NodeId, NodeId]] = set()
        self.heal_at = 0
        self.faults = True
        self.workload = True
        self.injected = Faults()
        self.delivered_seq: dict[tuple[NodeId, NodeId], int] = {}
        self.conf_changes = 0
        self.snapshots_installed = 0
        self.counter = 0
        founders = [f"n{i}" for i in range(options.voters)]
        spares = [f"n{i}" for i in range(options.voters, options.voters + options.spares)]
        self.nodes: dict[NodeId, SimNode] = {}
        self.checker = Checker(self)
        for node_id in founders + spares:
            storage = MemoryStorage()
            if node_id in founders:
                hs, entry = bootstrap(founders)
                storage.save(hard_state=hs, entries=[entry])
            sn = SimNode(id=node_id, storage=storage, phase=self.rng.randrange(STEPS_PER_TICK))
            self.nodes[node_id] = sn
            self._start(sn)

    # --- nodes -----------------------------------------------------------------------------

    def _config(self, node_id: NodeId) -> RaftConfig:
        o = self.options
        return RaftConfig(
            node_id=node_id,
            max_inflight=o.max_inflight,
            max_msg_bytes=o.max_msg_bytes,
            max_uncommitted_bytes=o.max_uncommitted_bytes,
            snapshot_chunk_bytes=o.chunk_bytes,
            preferred_leader="n0" if o.preferred_leader else None,
            preferred_leader_backoff_ticks=20,
            leader_lease=True,
        )

    def _start(self, sn: SimNode) -> None:
        sn.node = RaftNode(self._config(sn.id), sn.storage, random.Random(self.rng.getrandbits(64)))
        # The driver's own Ready handling (controller.raft.handler), with the simulated world's
        # network, state machine and checks behind its callbacks.
        sn.handler = ReadyHandler(
            sn.node,
            sn.storage,
            send=lambda messages: self._send(sn, messages),
            apply=lambda entry: self._apply(sn, entry),
            restore=lambda snapshot: self._restored(sn, snapshot),
            read=lambda rs: self._read(sn, rs),
        )
        sn.machine = Machine()
        snapshot = sn.storage.snapshot()
        if snapshot.index:
            sn.machine.restore(snapshot.data)
            self.checker.restored(sn, snapshot)
        sn.persisting = None
        sn.last_role = Role.FOLLOWER
        sn.stalled_until = sn.missed_ticks = 0
        self.checker.node_started(sn)

    def _crash(self, sn: SimNode) -> None:
        if sn.persisting is not None and self.rng.random() < self.options.torn_rate:
            rd = sn.persisting[0]
            keep = self.rng.randint(0, len(rd.entries))
            # A torn write: the snapshot (if any) and a prefix of the entries reached the disk.
            if rd.snapshot is not None and self.rng.random() < 0.5:
                sn.storage.save(snapshot=rd.snapshot, entries=rd.entries[:keep])
                self.injected.torn_writes += 1
            elif rd.snapshot is None:
                sn.storage.save(entries=rd.entries[:keep])
                self.injected.torn_writes += 1
        sn.node = None
        sn.handler = None
        sn.persisting = None
        sn.restart_at = self.now + self.rng.randint(5, 80)
        self.injected.crashes += 1

    def kill(self, node_id: NodeId) -> None:
        """Crash ``node_id`` for good (it does not restart). Every running node is told at once,
        as the driver's transport tells its core when the connection to the dead process closes
        and the reconnect is refused (``report_refused``)."""
        sn = self.nodes[node_id]
        self._crash(sn)
        sn.restart_at = 1 << 62
        for other in self._alive():
            assert other.node is not None
            other.node.report_refused(node_id)

    # --- network ---------------------------------------------------------------------------

    def _send(self, sn: SimNode, messages: tuple[Message, ...]) -> None:
        o = self.options
        for m in messages:
            self.checker.leaving(sn, m)
            if self.faults and self.rng.random() < o.loss:
                self.injected.lost += 1
                continue
            copies = 2 if self.faults and self.rng.random() < o.duplicate else 1
            self.injected.duplicated += copies - 1
            for _ in range(copies):
                self.seq += 1
                at = self.now + self.rng.randint(1, o.max_delay)
                heapq.heappush(self.inflight, (at, self.seq, m))

    def _deliver_due(self) -> None:
        while self.inflight and self.inflight[0][0] <= self.now:
            _, seq, m = heapq.heappop(self.inflight)
            target = self.nodes.get(m.dst)
            if (m.src, m.dst) in self.blocked:
                self.injected.cut += 1
                continue
            if target is None or target.node is None:
                # A crashed node's port is closed: the sender's transport is refused (what the
                # driver reports as RaftNode.report_refused), if the sender still runs.
                sender = self.nodes.get(m.src)
                if target is not None and sender is not None and sender.node is not None:
                    sender.node.report_refused(m.dst)
                continue
            if target.stalled(self.now):  # it sits in the socket until the node resumes
                heapq.heappush(self.inflight, (target.stalled_until, seq, m))
                continue
            link = (m.src, m.dst)
            if seq < self.delivered_seq.get(link, 0):
                if self.faults:
                    self.injected.reordered += 1
            else:
                self.delivered_seq[link] = seq
            target.node.step(m)

    def _partition(self) -> None:
        ids = sorted(self.nodes)
        self.blocked.clear()
        kind = self.rng.randrange(3)
        if kind == 0:
            lone = self.rng.choice(ids)
            for other in ids:
                if other != lone:
                    self.blocked |= {(lone, other), (other, lone)}
        elif kind == 1:
            side = set(self.rng.sample(ids, self.rng.randint(1, len(ids) - 1)))
            for a in ids:
                for b in ids:
                    if (a in side) != (b in side):
                        self.blocked.add((a, b))
        else:
            for a in ids:
                for b in ids:
                    if a != b and self.rng.random() < 0.3:
                        self.blocked.add((a, b))  # one-way links
        self.heal_at = self.now + self.rng.randint(20, 300)
        self.injected.partitions += 1

    # --- driving Readies ---------------------------------------------------------------------

    def _drive(self, sn: SimNode) -> None:
        node, handler = sn.node, sn.handler
        assert node is not None and handler is not None
        if sn.persisting is not None:
            done, done_at = sn.persisting
            if done_at > self.now:
                return
            self._finish(sn, done)
        while sn.node is not None and sn.persisting is None:
            rd = node.ready()
            if rd is None:
                return
            handler.send(rd)
            delay = self.rng.choice((0, 0, 1, 2))
            if delay:
                sn.persisting = (rd, self.now + delay)
                return
            self._finish(sn, rd)

    def _finish(self, sn: SimNode, rd: Ready) -> None:
        """The simulated fsync completed: the driver's handler writes and finishes the Ready."""
        node, handler = sn.node, sn.handler
        assert node is not None and handler is not None
        sn.persisting = None
        handler.persist(rd)
        handler.finish(rd)
        machine = sn.machine
        every = self.options.snapshot_every
        if machine.applied - sn.storage.snapshot().index >= every:
            node.compact(machine.applied, machine.snapshot(self.rng.randint(0, 200)))

    def _restored(self, sn: SimNode, snapshot: Snapshot) -> None:
        sn.machine.restore(snapshot.data)
        self.checker.restored(sn, snapshot)
        self.snapshots_installed += 1

    def _apply(self, sn: SimNode, entry: Entry) -> None:
        machine = sn.machine
        if entry.index != machine.applied + 1:
            self.checker.fail(f"{sn.id} applies {entry.index} after {machine.applied}")
        machine.apply(entry)
        self.checker.applied(sn, entry)

    def _read(self, sn: SimNode, rs: ReadState) -> None:
        self.checker.read_served(sn, rs.index, rs.ctx)

    # --- workload ----------------------------------------------------------------------------

    def _alive(self) -> list[SimNode]:
        return [sn for sn in self.nodes.values() if sn.node is not None]

    def _stall(self) -> None:
        """One node, or every node (the whole host), stands still for 3 to 12 ticks."""
        alive = [sn for sn in self._alive() if not sn.stalled(self.now)]
        if not alive:
            return
        rng = self.stall_rng
        chosen = alive if rng.random() < 0.5 else [rng.choice(alive)]
        until = self.now + rng.randint(3, 12) * STEPS_PER_TICK
        for sn in chosen:
            sn.stalled_until = until
        self.injected.stalls += 1

    def _resume(self, sn: SimNode) -> None:
        """The stall is over: the driver feeds the ticks it missed as one stall (the last of
        them as an ordinary tick), before the messages that waited in its socket."""
        assert sn.node is not None
        if sn.missed_ticks:
            sn.node.tick_after_stall(sn.missed_ticks - 1)
        sn.missed_ticks = 0

    def leader(self) -> SimNode | None:
        """The leader of the highest term among live nodes, if any."""
        best: SimNode | None = None
        best_term = -1
        for sn in self._alive():
            node = sn.node
            if node is not None and node.role is Role.LEADER and node.term > best_term:
                best, best_term = sn, node.term
        return best

    def _workload(self) -> None:
        o = self.options
        rng = self.rng
        # A stalled node takes no request (requests wait in its socket).
        alive = [sn for sn in self._alive() if not sn.stalled(self.now)] if self.workload else []
        if alive and rng.random() < o.propose_rate:
            sn = rng.choice(alive)
            assert sn.node is not None
            self.counter += 1
            try:
                sn.node.propose(b"p%d" % self.counter)
            except RaftError:
                pass
        if alive and rng.random() < o.read_rate:
            sn = rng.choice(alive)
            assert sn.node is not None
            self.counter += 1
            ctx = b"r%d" % self.counter
            self.checker.read_asked(ctx)
            try:
                sn.node.read_index(ctx)
            except RaftError:
                pass
        if not self.faults:
            return
        leader = self.leader()
        if leader is not None and rng.random() < o.conf_rate:
            self._change_membership(leader)
        if leader is not None and leader.node is not None and rng.random() < o.transfer_rate:
            voters = [v for v in leader.node.conf_state.voters if v != leader.id]
            if voters:
                try:
                    leader.node.transfer_leadership(rng.choice(voters))
                except RaftError:
                    pass
        if alive and rng.random() < o.crash_rate:
            # Half the crashes hit a node in the middle of an fsync, where they hurt most.
            busy = [sn for sn in alive if sn.persisting is not None]
            self._crash(rng.choice(busy if busy and rng.random() < 0.5 else alive))
        if rng.random() < o.partition_rate:
            self._partition()
        if o.stall_rate and (
            self.stall_rng.random() < o.stall_rate or self.now == self.first_stall_at
        ):
            self._stall()

    def _change_membership(self, leader: SimNode) -> None:
        node = leader.node
        assert node is not None
        cs = node.conf_state
        outsiders = [i for i in sorted(self.nodes) if not cs.is_member(i)]
        choices: list[ConfChange] = [ConfChange.add_learner(i) for i in outsiders]
        if len(cs.voters) > 2:
            choices += [ConfChange.remove(v) for v in cs.voters]
        choices += [ConfChange.remove(v) for v in cs.learners]
        if not choices:
            return
        try:
            node.propose_conf_change(self.rng.choice(choices))
            self.conf_changes += 1
        except RaftError:
            pass

    # --- the run -----------------------------------------------------------------------------

    def step(self) -> None:
        self.now += 1
        if self.blocked and self.now >= self.heal_at:
            self.blocked.clear()
        for sn in self.nodes.values():
            if sn.node is not None and sn.stalled_until == self.now:
                self._resume(sn)
        self._deliver_due()
        for sn in self.nodes.values():
            if sn.node is None:
                if self.now >= sn.restart_at:
                    self._start(sn)
                continue
            if (self.now + sn.phase) % STEPS_PER_TICK == 0:
                if sn.stalled(self.now):
                    sn.missed_ticks += 1
                else:
                    sn.node.tick()
        self._workload()
        for sn in self.nodes.values():
            if sn.node is not None and not sn.stalled(self.now):
                self._drive(sn)
        for sn in self.nodes.values():
            if sn.node is not None:
                self.checker.check(sn)
        self.checker.check_leases(self._alive())

    def run(self) -> SimResult:
        o = self.options
        for _ in range(o.safety_ticks * STEPS_PER_TICK):
            self.step()
        self._liveness()
        return SimResult(
            seed=o.seed,
            steps=self.now,
            leaders=len(self.checker.leaders),
            committed=self.checker.max_commit,
            applied=self.checker.applied_entries,
            reads=self.checker.reads_served,
            crashes=self.injected.crashes,
            conf_changes=self.conf_changes,
            snapshots_installed=self.snapshots_installed,
            faults=self.injected,
        )

    def _liveness(self) -> None:
        """Heal the network, restart every node, stop the faults and the workload. Within
        ``liveness_ticks`` a leader must commit a new entry; then, within as many ticks again
        plus time to stream the log to the slowest member, every member must apply it."""
        self.faults = False
        self.workload = False
        self.blocked.clear()
        for sn in self.nodes.values():
            if sn.node is None:
                sn.restart_at = self.now
        # Before the probe commits, a leader may first have to replicate an uncommitted backlog
        # left by earlier terms, one round trip per append in the worst configurations.
        alive = [sn.node for sn in self.nodes.values() if sn.node is not None]
        backlog = max(n.log.last_index() for n in alive) - min(n.commit_index for n in alive)
        deadline = (
            self.now
            + self.options.liveness_ticks * STEPS_PER_TICK
            + backlog * 2 * self.options.max_delay
        )
        probe: tuple[int, int] | None = None
        payload = b"liveness-probe"
        while True:
            if self.now >= deadline:
                self._stuck(f"no commit within {self.options.liveness_ticks} ticks")
            self.step()
            leader = self.leader()
            if leader is None or leader.node is None:
                continue
            node = leader.node
            if probe is not None:
                committed = self.checker.committed.get(probe[0])
                if committed is not None and committed[0] != probe[1]:
                    probe = None  # overwritten before it committed: propose again
            if probe is None or (node.term > probe[1] and probe[0] not in self.checker.committed):
                try:
                    probe = (node.propose(payload), node.term)
                except RaftError:
                    continue
            if probe[0] in self.checker.committed:
                break
        # Catching up may take one round trip per entry (a window of 1, one entry per append).
        lag = max(probe[0] - sn.machine.applied for sn in self.nodes.values())
        rounds = lag * 2 * self.options.max_delay + 20 * STEPS_PER_TICK
        deadline = self.now + self.options.liveness_ticks * STEPS_PER_TICK + rounds
        while self.now < deadline:
            self.step()
            leader = self.leader()
            if leader is None or leader.node is None:
                continue
            members = leader.node.conf_state.members()
            if all(self.nodes[m].machine.applied >= probe[0] for m in members):
                return
        self._stuck("members did not all apply the committed probe")

    def _stuck(self, what: str) -> None:
        states = {
            sn.id: (
                None
                if sn.node is None
                else (sn.node.role.value, sn.node.term, sn.node.commit_index, sn.machine.applied)
            )
            for sn in self.nodes.values()
        }
        self.checker.fail(f"liveness: {what}: {states}")
