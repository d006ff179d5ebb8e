"""The asyncio driver of the Raft core: one task owns the :class:`RaftNode`, nothing else calls it.

It carries out what the core decides (controller/raft/README.md, "The driver loop"):

- time: a 100 ms tick timer; ticks that fell due while the loop was busy are fed in a row,
  interleaved with the messages that arrived meanwhile in the order of their times (a tick
  that fell due before a message arrived is fed before it, one due after it, after it). A tick
  that comes more than ``LATE_TICK_S`` late means the process (or the whole machine) stood
  still: the ticks it missed are fed as one stall (``RaftNode.tick_after_stall``), which
  shortens a leader's lease but runs no follower's election clock, so a stall of the whole
  host does not start an election. When ticks fall due and how they are fed is
  :class:`controller.raft_ticks.TickSchedule`'s (time an input); this module sleeps and wakes;
- the leader lease: :meth:`RaftDriver.holds_lease` turns the core's lease (in ticks) into
  time counted from when the core's latest tick fell due, so a leader that was frozen (SIGSTOP)
  or starved knows at once, before the ticks it missed are fed, that its lease is gone;
- the network: :class:`~controller.transport.PeerTransport` (RAFT_MESSAGE frames on the
  controller's one port); failed sends become ``report_unreachable``, a refused connection
  (the peer's process gone) also ``report_refused``;
- the disk: :class:`storage.raftlog.DiskStorage`, ``save`` in a worker thread, one Ready per
  fsync, so every proposal made while an fsync runs is committed by the next one (group commit);
- the state machine: committed entries are applied in order; a proposal's future resolves when
  its index comes out with its term (another term there: :class:`ProposalLost`);
- reads: ``read_index`` resolves once the state machine has applied the read index;
- snapshots every ``snapshot_every`` applied entries; a snapshot holds the state machine's bytes
  and the member address book (addresses travel in the context of add-learner entries).

Callers (request handlers) talk to the driver through coroutines that queue a closure for the
loop task and wait on a future: ``propose``, ``read_index``, ``add_member``, ``remove_member``,
``transfer_leadership``. The node is "active" (the active controller) once it leads and has
applied the no-op of its own term, i.e. its applied state includes every committed entry.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import random
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import msgpack
import structlog

from controller.raft import (
    ConfChange,
    ConfChangeRejected,
    ConfChangeType,
    ConfState,
    Entry,
    EntryType,
    Message,
    NodeId,
    NotLeader,
    ProposalDropped,
    RaftConfig,
    RaftError,
    RaftNode,
    ReadState,
    Ready,
    ReadyHandler,
    Role,
    Snapshot,
    SoftState,
    Status,
    TransferRejected,
    bootstrap,
    decode_conf_change,
)
from controller.raft_ticks import LATE_TICK_S, TickSchedule
from controller.transport import PeerTransport
from daemon import gc_tuning
from daemon.tasks import cancel_and_wait
from protocol.remoting import DEFAULT_MAX_FRAME_BYTES
from protocol.request_auth import Credentials
from storage.raftlog import DiskStorage

log = structlog.get_logger(__name__)

_SNAPSHOT_VERSION = 1
_INF = float("inf")


_Prepared = tuple[Snapshot, dict[NodeId, str], Callable[[], None]]
"""A decoded snapshot: the snapshot, the peers' addresses, the state machine's swap."""


def _yield_gil() -> None:
    """From a thread decoding a snapshot: let the event loop's thread take the GIL now rather
    than at the interpreter's next forced switch."""
    time.sleep(0)


class StateMachine(Protocol):
    """What the driver applies committed NORMAL entries to."""

    def apply(self, index: int, data: bytes) -> object:
        """Apply one committed entry; the result resolves the proposal's future."""
        ...

    def snapshot_parts(self) -> Iterator[bytes]:
        """The state now, copied cheaply when called, encoded in parts as it is iterated (the
        driver gives the loop back between parts); entries applied meanwhile must not show."""
        ...

    def prepare_restore(
        self, data: bytes, between: Callable[[], None] | None = None
    ) -> Callable[[], None]:
        """Decode a snapshot (ValueError if invalid, state untouched) in the caller's thread,
        which may be another one, calling ``between`` now and then (between two parts); the
        function returned swaps the state in, on the loop."""
        ...


class RaftObserver:
    """Hooks for metrics; the default does nothing."""

    def fsync(self, seconds: float) -> None:
        pass

    def campaign(self) -> None:
        pass

    def leader_changed(self, leader: NodeId | None) -> None:
        pass

    def snapshot_size(self, size: int) -> None:
        pass

    def messages_dropped(self, peer: NodeId, count: int) -> None:
        pass

    def members_lost_log(self, members: Mapping[NodeId, int]) -> None:
        """The members this leader found without entries they had acknowledged, each with
        where its log now ends (empty: none, or this node is not the leader)."""


class NotLeaderError(Exception):
    """This node cannot serve the write; ``leader_address`` is where to go, when known."""

    def __init__(self, leader_id: NodeId | None, leader_address: str | None) -> None:
        super().__init__(f"not the leader (leader: {leader_id or 'unknown'})")
        self.leader_id = leader_id
        self.leader_address = leader_address


class ProposalLost(Exception):
    """The proposal's index was taken by another leader's entry (it did not commit), or a
    snapshot replaced the log before it was applied (outcome unknown). Retrying is safe for
    the controller's events: each carries the state it was decided against."""


class DriverStopped(Exception):
    """The driver stopped before the request completed."""


@dataclass(frozen=True, kw_only=True)
class DriverConfig:
    node_id: NodeId
    peers: dict[NodeId, str]
    """Founding members (when ``join`` is false) and known addresses, this node included."""
    data_dir: Path
    join: bool = False
    tick_ms: int = 100
    heartbeat_ticks: int = 1
    election_ticks_min: int = 3
    election_ticks_max: int = 6
    preferred_leader: NodeId | None = None
    snapshot_every: int = 10_000
    segment_bytes: int = 64 << 20
    fsync: bool = True
    max_append_bytes: int = 1 << 20
    max_inflight: int = 64
    peer_queue_messages: int = 4096
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    credentials: Credentials | None = None
    """With authentication on: the cluster's credentials, every Raft message is signed."""
    raft_extra: dict[str, Any] = field(default_factory=dict)
    """Further RaftConfig keywords (tests)."""


def encode_snapshot(addresses: dict[NodeId, str], data: bytes) -> bytes:
    packed: bytes = msgpack.packb([_SNAPSHOT_VERSION, dict(sorted(addresses.items())), data])
    return packed


def decode_snapshot(raw: bytes) -> tuple[dict[NodeId, str], bytes]:
    obj = msgpack.unpackb(raw, raw=False)
    if (
        not isinstance(obj, list)
        or len(obj) != 3
        or obj[0] != _SNAPSHOT_VERSION
        or not isinstance(obj[1], dict)
        or not isinstance(obj[2], bytes)
    ):
        raise ValueError("not a controller snapshot")
    return {str(k): str(v) for k, v in obj[1].items()}, obj[2]


class RaftDriver:
    def __init__(
        self,
        cfg: DriverConfig,
        state_machine: StateMachine,
        *,
        observer: RaftObserver | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if cfg.node_id not in cfg.peers:
            raise ValueError(f"node id {cfg.node_id!r} is not among the peers")
        self.cfg = cfg
        self.id = cfg.node_id
        self.sm = state_machine
        self.observer = observer or RaftObserver()
        self.storage = DiskStorage.open(
            cfg.data_dir, segment_bytes=cfg.segment_bytes, fsync=cfg.fsync
        )
        for line in self.storage.report.truncated:
            log.warning("raft storage repaired", repair=line)
        fresh = self.storage.last_index() == 0 and self.storage.snapshot_meta().index == 0
        if fresh and not cfg.join:
            hs, entry = bootstrap(sorted(cfg.peers))
            self.storage.save(hard_state=hs, entries=[entry])
            log.info("raft group founded", voters=sorted(cfg.peers))
        self.addresses: dict[NodeId, str] = dict(cfg.peers)
        self._pending: dict[int, tuple[int, asyncio.Future[object]]] = {}
        self.transport = PeerTransport(
            cfg.node_id,
            on_message=self._on_message,
            on_unreachable=self._on_unreachable,
            max_queue=cfg.peer_queue_messages,
            max_frame_bytes=cfg.max_frame_bytes,
            on_dropped=self.observer.messages_dropped,
            credentials=cfg.credentials,
            on_refused=self._on_refused,
        )
        self.applied = 0
        self.replayed_through = 0 if fresh else self.storage.hard_state().commit
        """The commit index this controller had when it started: entries up to it are its own
        history, applied again to rebuild the state (logged at debug, not as news)."""
        snapshot = self.storage.snapshot()
        if snapshot.index > 0:
            self._restore(snapshot)
        for peer, address in self.addresses.items():
            self.transport.set_address(peer, address)
        self.node = RaftNode(
            RaftConfig(
                node_id=cfg.node_id,
                heartbeat_ticks=cfg.heartbeat_ticks,
                election_ticks_min=cfg.election_ticks_min,
                election_ticks_max=cfg.election_ticks_max,
                preferred_leader=cfg.preferred_leader or None,
                max_msg_bytes=cfg.max_append_bytes,
                max_inflight=cfg.max_inflight,
                leader_lease=True,
                **cfg.raft_extra,
            ),
            self.storage,
            rng or random.Random(),
        )
        self.handler = ReadyHandler(
            self.node,
            self.storage,
            send=self.transport.send,
            apply=self._apply,
            restore=self._restored,
            read=self._serve_read,
        )
        self.role = Role.FOLLOWER
        self.lead: NodeId | None = None
        # The term whose leader the observer was last told of: a follower that lost its leader
        # (a pre-vote round, no new term) and hears it again has seen no new leader.
        self._leader_term_seen = -1
        self.active = False
        self.on_active_change: list[Callable[[bool], None]] = []
        self.on_leader_change: list[Callable[[NodeId | None], None]] = []
        self._inbox: list[tuple[float, Message]] = []
        """Messages with the loop time they arrived at."""
        self._unreachable: set[NodeId] = set()
        self._refused: set[NodeId] = set()
        """Peers whose connection was refused since the core was last fed (process gone)."""
        self._requests: list[Callable[[], None]] = []
        self._ticks = TickSchedule(cfg.tick_ms / 1000, 0.0)
        """When ticks fall due (started again by ``start``, from the loop's time then)."""
        self._dropped_from: dict[NodeId, float] = {}
        self._lease_ends = -_INF
        """Loop time the lease ends at, as of the core's latest input (``holds_lease``)."""
        self._lease_stale = True
        """The core was fed since ``_lease_ends`` was worked out."""
        self._late_reported_at = -60.0
        self._lease_told = 0
        """The latest term whose first confirmed lease was logged (once a term)."""
        self._lost_seen = (0, 0)
        """(term, the core's ``lost_log_changes``) when the lost logs were last reported."""
        self._lost_reported: dict[NodeId, int] = {}
        self._wake = asyncio.Event()
        self._reads: dict[bytes, asyncio.Future[None]] = {}
        self._read_seq = itertools.count(1)
        self._pulse: asyncio.Future[None] | None = None
        self._compact_requested = self.storage.snapshot_meta().index
        self._compacting: asyncio.Task[None] | None = None
        """The snapshot being encoded in a thread, if any."""
        self._prepared: _Prepared | None = None
        """A snapshot from the leader decoded in a thread, for ``_restored`` to swap in."""
        self._tasks: list[asyncio.Task[None]] = []
        self._stopped = False
        self._loop: asyncio.AbstractEventLoop | None = None
        """The loop ``start`` ran on."""
        self.failure: asyncio.Future[BaseException]
        """Resolves with the exception that stopped the driver loop (set by ``start``)."""

    # --- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = loop = asyncio.get_running_loop()
        self._ticks = TickSchedule(self._ticks.interval, loop.time())
        self.failure = loop.create_future()
        self.transport.start()
        self._tasks = [
            asyncio.create_task(self._run(), name=f"raft-{self.id}"),
            asyncio.create_task(self._ticker(), name=f"raft-tick-{self.id}"),
        ]

    async def stop(self) -> None:
        """Stop the loop, fail every waiting request, close the transport and the storage."""
        if self._stopped:
            return
        self._stopped = True
        await cancel_and_wait(self._tasks)
        self._tasks = []
        for _term, fut in self._pending.values():
            if not fut.done():
                fut.set_exception(DriverStopped("controller stopping"))
        self._pending.clear()
        for read in self._reads.values():
            if not read.done():
                read.set_exception(DriverStopped("controller stopping"))
        self._reads.clear()
        await self.transport.stop()
        await asyncio.to_thread(self.storage.close)
        self._set_active(False)

    # --- inputs from other tasks ---------------------------------------------------------------

    def handle_raft_frame(self, conn: Any, frame: Any) -> None:
        """The RemotingServer handler for RAFT_MESSAGE."""
        self.transport.handle_frame(conn, frame)

    def _on_message(self, message: Message) -> None:
        self._inbox.append((asyncio.get_running_loop().time(), message))
        self._wake.set()

    def _on_unreachable(self, peer: NodeId) -> None:
        self._unreachable.add(peer)
        self._wake.set()

    def _on_refused(self, peer: NodeId) -> None:
        self._refused.add(peer)
        self._wake.set()

    def _submit(self, call: Callable[[], None]) -> None:
        if self._stopped:
            raise DriverStopped("controller stopping")
        self._requests.append(call)
        self._wake.set()

    # --- requests ------------------------------------------------------------------------------

    @property
    def leader_address(self) -> str | None:
        return self.addresses.get(self.lead) if self.lead is not None else None

    def not_leader(self) -> NotLeaderError:
        return NotLeaderError(self.lead, self.leader_address)

    async def propose(self, data: bytes, timeout: float) -> object:
        """Append ``data`` and wait until it is applied; returns the state machine's result.

        Raises NotLeaderError, ProposalDropped (retry later), ProposalLost, TimeoutError."""
        return await self._propose(lambda: self.node.propose(data), timeout)

    async def propose_conf_change(self, cc: ConfChange, timeout: float) -> ConfState:
        result = await self._propose(lambda: self.node.propose_conf_change(cc), timeout)
        assert isinstance(result, ConfState)
        return result

    async def _propose(self, call: Callable[[], int], timeout: float) -> object:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[object] = loop.create_future()

        def run() -> None:
            try:
                index = call()
            except NotLeader:
                fut.set_exception(self.not_leader())
                return
            except RaftError as exc:
                fut.set_exception(exc)
                return
            self._pending[index] = (self.node.term, fut)

        self._submit(run)
        async with asyncio.timeout(timeout):
            return await fut

    async def read_index(self, timeout: float) -> None:
        """Return once this node's state machine reflects every write committed before the
        call (linearizable read). On a follower the leader is asked. Raises NotLeaderError
        when no leader is known, TimeoutError when the leader did not confirm in time."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        ctx = f"{self.id}/{next(self._read_seq)}".encode()
        self._reads[ctx] = fut

        def run() -> None:
            try:
                self.node.read_index(ctx)
            except NotLeader:
                if not fut.done():
                    fut.set_exception(self.not_leader())

        try:
            self._submit(run)
            async with asyncio.timeout(timeout):
                await fut
        finally:
            self._reads.pop(ctx, None)

    async def add_member(
        self, node_id: NodeId, address: str, timeout: float, *, wait_voter: bool = True
    ) -> ConfState:
        """Add ``node_id`` as a learner; with ``wait_voter``, also wait until the leader has
        promoted it (it caught up). Returns the configuration reached."""
        if not node_id or "-" in node_id or ";" in node_id:
            raise ConfChangeRejected(f"bad node id {node_id!r}")
        deadline = time.monotonic() + timeout
        self.transport.set_address(node_id, address)
        cs = await self.propose_conf_change(
            ConfChange.add_learner(node_id, address.encode()), timeout
        )
        if wait_voter:
            with contextlib.suppress(TimeoutError):
                await self.wait_for(
                    lambda: (
                        self.node.conf_state.is_voter(node_id)
                        and self.node.commit_index >= self.applied
                    ),
                    max(0.0, deadline - time.monotonic()),
                )
            cs = self.node.conf_state
        return cs

    async def remove_member(self, node_id: NodeId, timeout: float) -> ConfState:
        return await self.propose_conf_change(ConfChange.remove(node_id), timeout)

    async def transfer_leadership(self, target: NodeId, timeout: float) -> None:
        """Hand leadership to ``target`` and wait until it leads. Raises NotLeaderError,
        TransferRejected, TimeoutError (the transfer was abandoned)."""
        loop = asyncio.get_running_loop()
        started: asyncio.Future[None] = loop.create_future()

        def run() -> None:
            try:
                self.node.transfer_leadership(target)
            except NotLeader:
                started.set_exception(self.not_leader())
            except TransferRejected as exc:
                started.set_exception(exc)
            else:
                started.set_result(None)

        self._submit(run)
        async with asyncio.timeout(timeout):
            await started
        if target == self.id:
            return
        await self.wait_for(lambda: self.lead == target, timeout)

    def campaign(self) -> None:
        """Start an election now (tests and tooling)."""
        self._submit(self.node.campaign)

    async def wait_for(self, predicate: Callable[[], bool], timeout: float) -> None:
        """Wait until ``predicate()`` holds, checked after every Ready. TimeoutError."""
        deadline = asyncio.get_running_loop().time() + timeout
        while not predicate():
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                raise TimeoutError("condition not reached in time")
            if self._pulse is None or self._pulse.done():
                self._pulse = asyncio.get_running_loop().create_future()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(remaining, 0.1)):
                    await asyncio.shield(self._pulse)

    # --- inspection ----------------------------------------------------------------------------

    def status(self) -> Status:
        return self.node.status()

    @property
    def term(self) -> int:
        return self.node.term

    def holds_lease(self) -> bool:
        """Whether this node leads under a lease a quorum confirmed: no other controller can
        have been elected before it ends. Only then may it answer what extends a broker's
        lease (a heartbeat). Counted in time from when the core's latest tick fell due, so
        ticks not yet fed (a frozen or busy loop) shorten it rather than extend it.

        The lease's end is worked out at most once each time the loop task has fed the core,
        not per call: the core's lease moves only then, and every broker heartbeat asks
        (issue 34: the core's quorum of acknowledged ticks was worked out per heartbeat)."""
        if self._lease_stale:
            self._lease_stale = False
            ticks = self.node.lease_remaining()
            self._lease_ends = (
                self._ticks.lease_end(ticks, self.node.config.lease_ticks) if ticks > 0 else -_INF
            )
        # The loop it runs on, kept: asyncio.get_running_loop() asks the kernel for the
        # process id each time (3.11), once per heartbeat.
        return (self._loop or asyncio.get_running_loop()).time() < self._lease_ends

    def lease_read(self) -> bool:
        """Whether this node may answer a read from its applied state at once, linearizably,
        without a read-index round (the Raft dissertation's lease-based read, 6.4.1): it is
        the active controller, holds its lease (no other leader can have committed anything
        since), and has applied everything it knows committed."""
        return self.active and self.applied >= self.node.commit_index and self.holds_lease()

    @property
    def conf_state(self) -> ConfState:
        return self.node.conf_state

    def member_addresses(self) -> dict[NodeId, str]:
        """Every member (voters and learners) of the configuration in use, with its address."""
        return {m: self.addresses.get(m, "") for m in self.node.conf_state.members()}

    # --- the loop ------------------------------------------------------------------------------

    async def _ticker(self) -> None:
        loop = asyncio.get_running_loop()
        ticks = self._ticks
        while True:
            await asyncio.sleep(max(0.0, ticks.wake_at - loop.time()))
            late = ticks.fell_due(loop.time())
            if late > LATE_TICK_S:
                self._report_late(late)
            self._wake.set()

    def _report_late(self, late: float) -> None:
        """A tick fell due ``late`` seconds before the loop ran it (the process starved, a long
        turn of its loop, the machine stood still): logged, at most once every 10 s. The ticks
        it missed are fed as a stall (see the module's docstring)."""
        now = time.monotonic()
        if now - self._late_reported_at < 10.0:
            return
        self._late_reported_at = now
        log.info("raft tick late", late_ms=round(late * 1000), role=self.role.value)

    async def _run(self) -> None:
        node = self.node
        while True:
            await self._wake.wait()
            self._wake.clear()
            self._drain_inputs()
            while (rd := node.ready()) is not None:
                try:
                    await self._handle(rd)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    # Storage failures leave the node unable to keep Raft's promises: stop
                    # serving rather than acknowledge what is not durable (fail-stop; the
                    # daemon exits on ``failure``).
                    log.exception("raft driver failed; this controller stops taking part")
                    self._set_active(False)
                    if not self.failure.done():
                        self.failure.set_result(exc)
                    raise
                self._drain_inputs()
            if self.role is Role.LEADER and self._lease_told < node.term and self.holds_lease():
                self._lease_told = node.term
                log.info("raft leader lease", term=node.term, me=self.id)
            if (node.term, node.lost_log_changes) != self._lost_seen:
                self._report_lost_logs()

    def _report_lost_logs(self) -> None:
        """Log and export the members that lost entries they had acknowledged (on the leader,
        the only node that knows); a follower exports none."""
        node = self.node
        self._lost_seen = (node.term, node.lost_log_changes)
        status = node.status()
        lost = {p.node_id: p.lost_log for p in status.progress if p.lost_log is not None}
        acked = {p.node_id: p.match for p in status.progress}
        for member, ends in lost.items():
            if self._lost_reported.get(member) != ends:
                log.error(
                    "raft member lost its log",
                    member=member,
                    acknowledged=acked[member],
                    log_ends_at=ends,
                    term=node.term,
                    me=self.id,
                    what_to_do=f"remove it (rmqctl removeController --id {member}) and add it "
                    "back under a new id with an empty data directory (docs/operations.md, "
                    '"A controller that lost its data directory")',
                )
        members = status.conf_state.members()
        for member in self._lost_reported.keys() - lost.keys():
            if self.role is Role.LEADER and member in members:  # not removed: restored
                log.info("raft member holds its log again", member=member, me=self.id)
        self._lost_reported = lost
        self.observer.members_lost_log(dict(lost))

    def lost_logs(self) -> dict[NodeId, int]:
        """The members this leader found without entries they had acknowledged: id -> where
        its log ends now (``getControllerMetaData``)."""
        return dict(self._lost_reported)

    def _drain_inputs(self) -> None:
        node = self.node
        if self._inbox:
            inbox, self._inbox = self._inbox, []
            for arrived, message in inbox:
                self._ticks.feed(node, arrived)
                if not node.step(message):
                    self._dropped(message)
        self._ticks.feed(node, None)
        if self._unreachable:
            peers, self._unreachable = self._unreachable, set()
            for peer in peers:
                node.report_unreachable(peer)
        if self._refused:
            peers, self._refused = self._refused, set()
            for peer in peers:
                node.report_refused(peer)
        if self._requests:
            requests, self._requests = self._requests, []
            for call in requests:
                call()
        self._lease_stale = True

    def _dropped(self, message: Message) -> None:
        """The core dropped a message unseen (a stranger, a term out of range, a TimeoutNow
        not from the leader, a message for another id): say so, once a minute per sender and
        for at most 16 senders a minute (the sender's id is the peer's to choose)."""
        now = time.monotonic()
        src = message.src[:64]
        if now - self._dropped_from.get(src, -120.0) < 60:
            return
        recent = {s: t for s, t in self._dropped_from.items() if now - t < 60}
        if len(recent) >= 16:
            self._dropped_from = recent
            return
        recent[src] = now
        self._dropped_from = recent
        log.warning(
            "raft message dropped",
            src=src,
            kind=type(message).__name__,
            term=message.term,
            my_term=self.node.term,
            members=list(self.node.conf_state.members()),
        )

    async def _handle(self, rd: Ready) -> None:
        if rd.soft_state is not None:
            self._on_soft_state(rd.soft_state)
        hs = rd.hard_state
        if hs is not None and hs.vote == self.id and hs.term != self.storage.hard_state().term:
            self.observer.campaign()
        handler = self.handler
        handler.send(rd)
        for entry in rd.entries:
            if entry.type is EntryType.CONF_CHANGE:
                self._learn_address(entry)
        if handler.writes(rd):
            started = time.perf_counter()
            await asyncio.to_thread(handler.persist, rd)
            if rd.must_sync:
                self.observer.fsync(time.perf_counter() - started)
        else:
            handler.persist(rd)  # commit only: in memory
        if rd.compaction is not None:
            self.observer.snapshot_size(len(rd.compaction.data))
        if rd.snapshot is not None:
            # Decoded here in a thread; handler.finish swaps it in (_restored) in one step.
            self._prepared = await asyncio.to_thread(self._prepare_paused, rd.snapshot)
        handler.finish(rd)
        self._lease_stale = True  # a membership change applied may change the quorum
        self._maybe_compact()
        if self._pulse is not None and not self._pulse.done():
            self._pulse.set_result(None)

    def _on_soft_state(self, ss: SoftState) -> None:
        was_leader = self.role is Role.LEADER
        if ss.role is not self.role:
            # One line per change of role: with "raft leader" and "active controller", a
            # failover's phases can be read off the survivors' logs (bench/scale_bench.py).
            log.info("raft role", role=ss.role.value, term=self.node.term, me=self.id)
        self.role = ss.role
        if ss.lead != self.lead:
            self.lead = ss.lead
            if ss.lead is not None:
                if self.node.term != self._leader_term_seen:  # one leader per term at most
                    self._leader_term_seen = self.node.term
                    self.observer.leader_changed(ss.lead)
                log.info("raft leader", leader=ss.lead, term=self.node.term, me=self.id)
            for cb in self.on_leader_change:
                cb(ss.lead)
        if was_leader and ss.role is not Role.LEADER:
            self._set_active(False)
            self._fail_reads()

    def _fail_reads(self) -> None:
        """A leader that stepped down can confirm none of the reads it took: each is told
        at once (NotLeaderError), rather than when its timeout ends (issue 34: route lookups
        caught by a change of leader waited the whole request timeout, 3 s, for a read-index
        round that could no longer come)."""
        for fut in self._reads.values():
            if not fut.done():
                fut.set_exception(self.not_leader())

    def _set_active(self, active: bool) -> None:
        if active == self.active:
            return
        self.active = active
        log.info("active controller" if active else "standby controller", node=self.id)
        for cb in self.on_active_change:
            cb(active)

    def _apply(self, entry: Entry) -> None:
        result: object = None
        if entry.type is EntryType.NORMAL:
            result = self.sm.apply(entry.index, entry.data)
        elif entry.type is EntryType.CONF_CHANGE:
            result = self._apply_conf_change(entry)
        elif (
            entry.type is EntryType.NOOP
            and self.role is Role.LEADER
            and entry.term == self.node.term
        ):
            self._set_active(True)
        self.applied = entry.index
        if entry.index == self.replayed_through:
            log.info("state rebuilt from the raft log", index=entry.index)
        pending = self._pending.pop(entry.index, None)
        if pending is not None:
            term, fut = pending
            if fut.done():
                return
            if term == entry.term:
                fut.set_result(result)
            else:
                fut.set_exception(ProposalLost("a new leader replaced the proposal"))

    def _apply_conf_change(self, entry: Entry) -> ConfState:
        try:
            cc = decode_conf_change(entry.data)
        except ValueError:
            return self.node.conf_state
        if cc.type is ConfChangeType.ADD_LEARNER and cc.context:
            self._set_address(cc.node_id, cc.context.decode(errors="replace"))
        elif cc.type is ConfChangeType.REMOVE:
            node_id = cc.node_id
            if node_id == self.id:
                log.warning("this controller was removed from the group", node=self.id)
            elif node_id not in self.node.conf_state.members():
                self.addresses.pop(node_id, None)
                self.transport.remove(node_id)
        # A restarted controller applies its log again: those changes are history.
        (log.debug if entry.index <= self.replayed_through else log.info)(
            "membership changed",
            change=cc.type.name,
            node=cc.node_ids,
            voters=self.node.conf_state.voters,
            learners=self.node.conf_state.learners,
        )
        return self.node.conf_state

    def _learn_address(self, entry: Entry) -> None:
        """A learner being added needs appends before its entry commits."""
        try:
            cc = decode_conf_change(entry.data)
        except ValueError:
            return
        if cc.type is ConfChangeType.ADD_LEARNER and cc.context:
            self._set_address(cc.node_id, cc.context.decode(errors="replace"))

    def _set_address(self, node_id: NodeId, address: str) -> None:
        if node_id == self.id:
            return
        self.addresses[node_id] = address
        self.transport.set_address(node_id, address)

    def _restored(self, snapshot: Snapshot) -> None:
        """A snapshot from the leader, now durable: the state machine takes it."""
        prepared, self._prepared = self._prepared, None
        if prepared is None or prepared[0] is not snapshot:
            prepared = self._prepare_restore(snapshot)
        self._install(prepared)
        self.observer.snapshot_size(len(snapshot.data))
        self._compact_requested = max(self._compact_requested, snapshot.index)

    def _serve_read(self, rs: ReadState) -> None:
        read = self._reads.get(rs.ctx)
        if read is not None and not read.done():
            read.set_result(None)

    def _restore(self, snapshot: Snapshot) -> None:
        """The snapshot on disk at start-up, decoded with the collector paused as one from the
        leader is (issue 34: at 100,000 topics a restarted controller ran five full collections
        over its growing heap while decoding, 0.13-0.32 s each on the loaded machine)."""
        self._install(self._prepare_paused(snapshot))

    def _prepare_restore(
        self, snapshot: Snapshot, between: Callable[[], None] | None = None
    ) -> _Prepared:
        """The decoding half of a restore: runs in a thread, touches nothing shared."""
        addresses, data = decode_snapshot(snapshot.data)
        return snapshot, addresses, self.sm.prepare_restore(data, between)

    def _prepare_paused(self, snapshot: Snapshot) -> _Prepared:
        """In a thread: a collection set off by the decoding's temporary lists would hold the
        GIL (hence the loop) while it scans the whole heap."""
        with gc_tuning.collector_paused():
            return self._prepare_restore(snapshot, between=_yield_gil)

    def _install(self, prepared: _Prepared) -> None:
        snapshot, addresses, install = prepared
        install()
        # The restored state lives long: keep the collector from scanning it again and again
        # (a full collection over it held the loop for about as long as decoding it).
        gc.freeze()
        for node_id, address in addresses.items():
            self._set_address(node_id, address)
        self.applied = snapshot.index
        for index in [i for i in self._pending if i <= snapshot.index]:
            _term, fut = self._pending.pop(index)
            if not fut.done():
                fut.set_exception(ProposalLost("a snapshot replaced the log; outcome unknown"))

    def _maybe_compact(self) -> None:
        """Every ``snapshot_every`` applied entries: copy the state at the applied index on the
        loop (cheap), encode the copy a group at a time, giving the loop back between groups, then
        hand it to the node at that index."""
        if (
            self._compacting is not None
            or self.applied - self._compact_requested < self.cfg.snapshot_every
        ):
            return
        index = self.applied
        addresses = self.addresses | {self.id: self.cfg.peers[self.id]}
        parts = self.sm.snapshot_parts()
        self._compacting = asyncio.create_task(
            self._compact(index, addresses, parts), name=f"raft-snapshot-{self.id}"
        )
        self._tasks.append(self._compacting)

    async def _compact(
        self, index: int, addresses: dict[NodeId, str], parts: Iterator[bytes]
    ) -> None:
        try:
            chunks: list[bytes] = []
            for part in parts:
                chunks.append(part)
                await asyncio.sleep(0)  # the loop serves everything else between two parts
            data = encode_snapshot(addresses, b"".join(chunks))
        finally:
            self._compacting = None
            with contextlib.suppress(ValueError):
                self._tasks.remove(asyncio.current_task())  # type: ignore[arg-type]

        def hand_over() -> None:
            try:
                if self.node.compact(index, data):
                    log.info("raft snapshot", index=index, bytes=len(data))
                    # What the state holds now lives long, as a restored state does (_install):
                    # out of the collector's sight, so a full collection scans what came since,
                    # not every topic again (issue 34: on a controller that had applied 100,000
                    # topics and never restarted, one took 1.0 s during a failover's window).
                    gc.freeze()
            except ValueError:
                return
            self._compact_requested = max(self._compact_requested, index)

        if not self._stopped:
            self._submit(hand_over)


__all__ = [
    "ConfChangeRejected",
    "DriverConfig",
    "DriverStopped",
    "NotLeaderError",
    "ProposalDropped",
    "ProposalLost",
    "RaftDriver",
    "RaftObserver",
    "StateMachine",
    "TransferRejected",
]
