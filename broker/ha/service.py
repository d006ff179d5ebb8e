"""HAService: the broker's replication (AutoSwitchHAService), master and slave, behind one facade.

The broker (its ReplicasManager) owns one ``HAService`` per store and flips it between roles
when the controller says so. Everything here runs on the event-loop thread; blocking epoch-file
writes run in one worker thread of the service.

API::

    ha = HAService(store, epoch_file, HAConfig(listen_port=...),
                   propose_sync_state_set=replicas_manager.alter_sync_state_set,
                   append_replicated=appender.append_replicated)   # how a slave appends
    await ha.start()                 # binds the HA port (ha.address); serves nobody yet
    await ha.become_master(epoch, sync_state_set, sync_state_set_epoch, broker_id)
    await ha.become_slave(master_ha_address, master_epoch, broker_id, address)
    ha.notify_appended()             # after every append (broker.appender; cheap)
    ha.when_replicated(result.end_offset, timeout_s, done)   # all-ack sends: done(ok), once
    ok = await ha.wait_for_replicas(result.end_offset, timeout_s)   # the same, awaitable
    ha.has_min_in_sync_replicas(n)   # False: reject the write (set too small)
    ha.confirm_offset                # consumers read up to it (master and slave)
    ha.slave_acks()                  # {slave broker id: acked offset} (metrics, heartbeats)
    ha.in_sync_members()             # the SyncStateSet the controller accepted
    ha.apply_sync_state_set(members, epoch)   # a newer set learnt from the controller
    ha.set_registered_replicas({id: address})  # the group's replicas as the controllers list them
    ha.add_confirm_listener(fn)      # fn(confirm_offset) whenever it advances (master or slave)
    ha.retry_replication()           # a slave suspended by ReplicationRefused tries again
    await ha.stop()

``become_master`` persists the epoch history first (:func:`broker.ha.role_change.
plan_master_epochs`: drop entries beyond the max offset, keep or append this epoch's entry), then
serves slaves. The store recovered its torn tail when it opened and dispatches ConsumeQueues as
it appends, so there is nothing else to wait for. Repeating it for the current epoch only adopts
a newer SyncStateSet. The broker must not take writes before it returns.

``become_slave`` aborts every slave connection (and their buffered CommitLog views) before the
store may be truncated, then replicates from the named master (:mod:`broker.ha.slave_client`).
Repeating it for the same master only raises the expected master epoch.

SyncStateSet changes (:mod:`broker.ha.sync_state`) go through ``propose_sync_state_set(new_set)``
which returns the new syncStateSetEpoch or raises; the ReplicasManager sends AlterSyncStateSet
with :attr:`HAService.master_epoch` and :attr:`HAService.sync_state_set_epoch` (read at the
call). It is given ``propose_timeout_ms``. A refusal the controller evaluated (a
:class:`~remoting.errors.ResponseError` with a code of :data:`SETTLED_REFUSALS`) is retried after
``propose_retry_ms``; any other failure (a timeout, no controller reachable, a stale base epoch)
leaves the outcome unknown: the proposal may have committed, so acks keep counting the union of
both sets and the same proposal is sent again every ``propose_retry_ms`` until an answer settles
it or :meth:`HAService.apply_sync_state_set` brings a newer set from the controllers. With no
proposer (a broker without controllers) changes are adopted at once.

Which HA connections may count (:mod:`broker.ha.sync_state`): only a registered replica of this
group at the address the controllers know (:meth:`HAService.set_registered_replicas`, fed by the
ReplicasManager from the controllers' answers), one live connection per broker id, and an id
back after a lost connection only once the shrink that loss causes was accepted.

``when_replicated`` calls ``done(True)`` once every member of the SyncStateSet (and of a proposed
one in flight) acknowledged ``end_offset``, i.e. once the confirm offset reaches it; ``done(False)``
on timeout or when this broker stops being master. Waiters are
:class:`~broker.offset_waiters.OffsetWaiters` (like the group commit of
:mod:`broker.message_service`): released in one pass when the confirm offset advances, one timer
for all of them.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import structlog

from broker.ha.config import HAConfig
from broker.ha.master_server import MasterServer, RefreshReplicas
from broker.ha.refusals import Refusal
from broker.ha.role_change import plan_master_epochs
from broker.ha.slave_client import AppendReplicated, SlaveClient, SlaveState
from broker.ha.sync_state import NotAliveRefusals, SyncState
from broker.offset_waiters import Done, OffsetWaiters, future_waiter
from daemon.tasks import cancel_and_wait
from protocol.codes import ResponseCode
from protocol.ha import EpochRange
from remoting.errors import ResponseError
from storage.epoch_file import EpochFile
from storage.store import MessageStore

__all__ = ["SETTLED_REFUSALS", "HARole", "HAService", "ProposeSyncStateSet", "monotonic_ms"]

log = structlog.get_logger(__name__)

ProposeSyncStateSet = Callable[[frozenset[int]], Awaitable[int]]
"""Send AlterSyncStateSet for this set; the new syncStateSetEpoch, or raise."""

SETTLED_REFUSALS: frozenset[int] = frozenset(
    {
        ResponseCode.CONTROLLER_INVALID_REPLICAS,
        ResponseCode.CONTROLLER_INVALID_REQUEST,
        ResponseCode.CONTROLLER_BROKER_NOT_ALIVE,
        ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
    }
)
"""Answers that settle a proposal as refused: the active controller evaluated it against the
base syncStateSetEpoch it named (these checks come after the epoch checks), so nothing it sent
committed. Any other failure leaves the outcome unknown."""


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class HARole(enum.Enum):
    NONE = "none"
    MASTER = "master"
    SLAVE = "slave"


class HAService:
    """See the module docstring."""

    def __init__(
        self,
        store: MessageStore,
        epoch_file: EpochFile,
        config: HAConfig | None = None,
        *,
        propose_sync_state_set: ProposeSyncStateSet | None = None,
        append_replicated: AppendReplicated | None = None,
        now_ms: Callable[[], int] = monotonic_ms,
    ) -> None:
        """``append_replicated``: how a slave appends its master's bytes (the broker's one
        append operation); the store's ``append_raw`` when not given."""
        self.config = config if config is not None else HAConfig()
        self.config.validate()
        self.store = store
        self.epoch_file = epoch_file
        self._propose = propose_sync_state_set
        self._append_replicated = append_replicated
        self._now_ms = now_ms
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ha-io")
        self._server = MasterServer(
            store=store,
            epoch_file=epoch_file,
            config=self.config,
            events=self,
            confirm=lambda: self.confirm_offset,
            now_ms=now_ms,
        )
        self._lock = asyncio.Lock()
        self._role = HARole.NONE
        self._master_epoch: int | None = None
        self._broker_id: int | None = None
        self._sync: SyncState | None = None
        self._slave: SlaveClient | None = None
        self._tick_task: asyncio.Task[None] | None = None
        self._proposals: set[asyncio.Task[None]] = set()
        self._not_alive = NotAliveRefusals()
        self._waiters = OffsetWaiters("replicas")
        self._confirm_listeners: list[Callable[[int], None]] = []
        self._replicas: dict[int, str] | None = None
        self._started = False

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Bind the HA port."""
        await self._server.listen()
        self._started = True

    async def stop(self) -> None:
        async with self._lock:
            await self._leave_role("shutting down")
            await self._server.close()
            self._executor.shutdown(wait=True)
            self._started = False

    def add_confirm_listener(self, listener: Callable[[int], None]) -> None:
        """Call ``listener(confirm_offset)`` on the loop thread each time the confirm offset
        advances, as master or as slave (e.g. to wake consumers parked at the end of a queue)."""
        self._confirm_listeners.append(listener)

    def _confirm_moved(self, confirm: int) -> None:
        for listener in self._confirm_listeners:
            try:
                listener(confirm)
            except Exception as exc:
                log.error("HA: confirm listener failed", error=f"{type(exc).__name__}: {exc}")

    @property
    def address(self) -> str:
        """``host:port`` of the HA port."""
        host, port = self._server.address
        return f"{host}:{port}"

    @property
    def role(self) -> HARole:
        return self._role

    @property
    def master_epoch(self) -> int | None:
        """The epoch this broker is master of, or the epoch of the master it follows."""
        return self._master_epoch

    @property
    def sync_state_set_epoch(self) -> int | None:
        return None if self._sync is None else self._sync.epoch

    @property
    def sync_state(self) -> SyncState | None:
        """The master's SyncStateSet tracker (None unless master); read-only use."""
        return self._sync

    @property
    def slave_client(self) -> SlaveClient | None:
        return self._slave

    @property
    def slave_state(self) -> SlaveState | None:
        return None if self._slave is None else self._slave.state

    # ------------------------------------------------------------ roles

    async def become_master(
        self,
        epoch: int,
        sync_state_set: Iterable[int],
        sync_state_set_epoch: int,
        broker_id: int,
    ) -> None:
        """Serve as master of ``epoch``; see the module docstring."""
        async with self._lock:
            if (
                self._role is HARole.MASTER
                and self._sync is not None
                and self._master_epoch == epoch
                and self._broker_id == broker_id
            ):
                self._sync.set_members(sync_state_set, sync_state_set_epoch, now_ms=self._now_ms())
                self._after_change()
                return
            await self._leave_role(f"becoming master of epoch {epoch}")
            store = self.store
            plan = plan_master_epochs(
                self.epoch_file.entries(), epoch=epoch, max_offset=store.max_offset
            )
            if plan.changed:

                def persist() -> None:
                    if plan.drop_from_offset is not None:
                        self.epoch_file.truncate_suffix_from_offset(plan.drop_from_offset)
                    if plan.append is not None:
                        self.epoch_file.append(plan.append.epoch, plan.append.start_offset)

                await self._run_blocking(persist)
            now = self._now_ms()
            self._sync = SyncState(
                master_id=broker_id,
                members=sync_state_set,
                sync_state_set_epoch=sync_state_set_epoch,
                epoch_start_offset=plan.epoch_start_offset,
                confirm_offset=min(store.confirm_offset, store.max_offset),
                now_ms=now,
                max_time_not_catchup_ms=self.config.max_time_slave_not_catchup_ms,
                retry_after_ms=self.config.propose_retry_ms,
                replicas=self._replicas,
            )
            self._role = HARole.MASTER
            self._master_epoch = epoch
            self._broker_id = broker_id
            log.info(
                "HA: serving as master",
                epoch=epoch,
                epoch_start_offset=plan.epoch_start_offset,
                max_offset=store.max_offset,
                sync_state_set=sorted(self._sync.members),
            )
            self._server.start_serving(broker_id)
            self._tick_task = asyncio.get_running_loop().create_task(
                self._tick_loop(), name="ha-master-tick"
            )
            self._after_change()

    async def become_slave(
        self, master_ha_address: str, master_epoch: int, broker_id: int, address: str
    ) -> None:
        """Replicate from the master at ``master_ha_address`` (master of ``master_epoch``)."""
        async with self._lock:
            slave = self._slave
            if (
                self._role is HARole.SLAVE
                and slave is not None
                and slave.master_address == master_ha_address
                and self._broker_id == broker_id
                and not slave.suspended
            ):
                slave.master_epoch = max(slave.master_epoch, master_epoch)
                self._master_epoch = slave.master_epoch
                return
            await self._leave_role(f"becoming a slave of {master_ha_address}")
            self._slave = SlaveClient(
                store=self.store,
                epoch_file=self.epoch_file,
                config=self.config,
                master_address=master_ha_address,
                master_epoch=master_epoch,
                broker_id=broker_id,
                address=address,
                run_blocking=self._run_blocking,
                on_confirm=self._confirm_moved,
                append=self._append_replicated,
            )
            self._role = HARole.SLAVE
            self._master_epoch = master_epoch
            self._broker_id = broker_id
            log.info("HA: replicating as slave", master=master_ha_address, epoch=master_epoch)
            self._slave.start()

    def retry_replication(self) -> None:
        """A slave suspended by ReplicationRefused (or a store it cannot fill) tries again."""
        if self._slave is not None:
            self._slave.retry()

    async def _leave_role(self, reason: str) -> None:
        if self._role is HARole.MASTER:
            # Forget the set first: the disconnections that follow are no proposals.
            self._sync = None
            self._waiters.fail_all()
            self._server.stop_serving(reason)
            tasks = [*self._proposals]
            if self._tick_task is not None:
                tasks.append(self._tick_task)
            await cancel_and_wait(tasks)
            self._tick_task = None
            self._proposals.clear()
        elif self._role is HARole.SLAVE:
            if self._slave is not None:
                await self._slave.stop()
            self._slave = None
            # The worker may still be finishing an epoch-file write the slave handed it.
            await self._run_blocking(lambda: None)
        self._role = HARole.NONE
        self._master_epoch = None

    # ------------------------------------------------------------ master: writes

    def notify_appended(self) -> None:
        """The CommitLog grew (call after every put): wake idle slave streams."""
        if self._role is not HARole.MASTER:
            return
        self._server.notify_appended()
        sync = self._sync
        if sync is not None and sync.solo and sync.update_confirm_offset(self.store.max_offset):
            self._confirm_advanced()

    def when_replicated(self, end_offset: int, timeout: float, done: Done) -> None:
        """Call ``done(True)`` once every SyncStateSet member has acknowledged ``end_offset``
        (at once when they have), ``done(False)`` after ``timeout`` seconds or if this broker
        stops being master first (at once when it is not master)."""
        sync = self._sync
        if sync is None:
            done(False)
            return
        if (
            end_offset > sync.confirm_offset
            and sync.solo
            and sync.update_confirm_offset(self.store.max_offset)
        ):
            self._confirm_advanced()
        if end_offset <= sync.confirm_offset:
            done(True)
            return
        self._waiters.add(end_offset, timeout, done)

    def wait_for_replicas(self, end_offset: int, timeout: float) -> asyncio.Future[bool]:
        """:meth:`when_replicated` as a future (True: acknowledged by every member)."""
        return future_waiter(lambda done: self.when_replicated(end_offset, timeout, done))

    def has_min_in_sync_replicas(self, min_in_sync_replicas: int) -> bool:
        """Whether the SyncStateSet holds at least ``min_in_sync_replicas`` brokers (master
        included); a write on a smaller set must be rejected. False unless master."""
        sync = self._sync
        return sync is not None and sync.in_sync_replicas() >= min_in_sync_replicas

    @property
    def confirm_offset(self) -> int:
        """How far consumers may read: the master's confirm offset, or on a slave the master's
        confirm offset capped at the local max offset."""
        sync = self._sync
        return sync.confirm_offset if sync is not None else self.store.confirm_offset

    def slave_acks(self) -> dict[int, int]:
        """Each connected slave's acknowledged offset (empty unless master)."""
        return {} if self._sync is None else self._sync.acked_offsets()

    def refused_counts(self) -> dict[str, int]:
        """HA peers the master refused since start, per reason (:mod:`broker.ha.refusals`)."""
        return dict(self._server.refusals.counts)

    def in_sync_members(self) -> frozenset[int]:
        """The SyncStateSet the controller accepted (empty unless master)."""
        return frozenset() if self._sync is None else self._sync.members

    def apply_sync_state_set(self, members: Iterable[int], epoch: int) -> bool:
        """Adopt a newer SyncStateSet learnt from the controller; True when adopted."""
        sync = self._sync
        if sync is None or not sync.set_members(members, epoch, now_ms=self._now_ms()):
            return False
        self._after_change()
        return True

    def set_replicas_refresher(self, refresh: RefreshReplicas) -> None:
        """How the master asks the controllers for the group's replicas at once, when a slave it
        does not know yet shakes hands (:mod:`broker.ha.master_server`): the answer comes back
        through :meth:`set_registered_replicas`."""
        self._server.refresh_replicas = refresh

    @property
    def registered_replicas(self) -> Mapping[int, str]:
        """The group's replicas as the controllers last listed them (broker id -> address):
        where a damaged record is fetched from (``broker.repair``)."""
        return dict(self._replicas or {})

    def epoch_at(self, offset: int) -> EpochRange | None:
        """This broker's epoch entry holding CommitLog ``offset``, its end capped at the max
        offset; None when no entry does (below the first, at or past the max offset)."""
        for entry in self.epoch_file.entries_with_end(self.store.max_offset):
            if entry.start_offset <= offset < entry.end_offset:
                return entry
        return None

    def set_registered_replicas(self, replicas: Mapping[int, str]) -> None:
        """The group's registered replicas (broker id -> broker address) as the controllers list
        them, from their answer to a registration or a poll (never from a push): only these
        may count for the SyncStateSet, each at its address."""
        view = dict(replicas)
        if view == self._replicas:
            return
        self._replicas = view
        if self._sync is not None:
            self._sync.set_replicas(view)
            self._after_change()

    # ------------------------------------------------------------ master: slave events

    def slave_connected(self, broker_id: int, address: str, async_learner: bool) -> Refusal | None:
        """None when the connection is admitted, else why it is refused."""
        if self._sync is None:
            return Refusal(None, "not master")
        refused = self._sync.slave_connected(
            broker_id, address=address, now_ms=self._now_ms(), async_learner=async_learner
        )
        if refused is None:
            self._after_change()
        return refused

    def slave_acked(self, broker_id: int, offset: int) -> None:
        sync = self._sync
        if sync is None:
            return
        sync.slave_acked(
            broker_id, offset, master_max_offset=self.store.max_offset, now_ms=self._now_ms()
        )
        if sync.update_confirm_offset(self.store.max_offset):
            self._confirm_advanced()
        # A member's ack never makes a change of the set due (shrinks are due to time, lost
        # connections or lagging members: the tick and the other events see them); a
        # non-member's may let it join.
        if broker_id not in sync.members and sync is self._sync:
            self._maybe_propose(sync)

    def slave_disconnected(self, broker_id: int) -> None:
        if self._sync is not None:
            self._sync.slave_disconnected(broker_id, now_ms=self._now_ms())
            self._after_change()

    # ------------------------------------------------------------ master: upkeep

    def _after_change(self) -> None:
        sync = self._sync
        if sync is None:
            return
        if sync.update_confirm_offset(self.store.max_offset):
            self._confirm_advanced()
        self._maybe_propose(sync)

    def _confirm_advanced(self) -> None:
        assert self._sync is not None
        confirm = self._sync.confirm_offset
        self.store.confirm_offset = confirm  # persisted by the next store.flush
        self._waiters.release(confirm)
        self._server.push_confirm()
        if self._confirm_listeners:
            self._confirm_moved(confirm)

    def _maybe_propose(self, sync: SyncState) -> None:
        resend = sync.outcome_unknown
        proposal = sync.next_proposal(now_ms=self._now_ms())
        if proposal is None:
            return
        log.info(
            "HA: sending again a SyncStateSet whose outcome is unknown"
            if resend
            else "HA: proposing a new SyncStateSet",
            current=sorted(sync.members),
            proposed=sorted(proposal),
            epoch=sync.epoch,
        )
        if self._propose is None:
            sync.proposal_accepted(proposal, sync.epoch + 1, now_ms=self._now_ms())
            self._after_change()
            return
        task = asyncio.get_running_loop().create_task(
            self._run_proposal(sync, proposal, sync.attempt)
        )
        self._proposals.add(task)
        task.add_done_callback(self._proposals.discard)

    async def _run_proposal(self, sync: SyncState, proposal: frozenset[int], attempt: int) -> None:
        assert self._propose is not None
        try:
            async with asyncio.timeout(self.config.propose_timeout_ms / 1000):
                new_epoch = await self._propose(proposal)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            if sync is not self._sync:
                return
            if isinstance(exc, ResponseError) and exc.code in SETTLED_REFUSALS:
                # Two slaves lost at once (they stop together): the shrink proposed after the
                # first loss still names the second, which the controllers know dead too.
                expected = self._not_alive.refused(
                    proposal,
                    exc.code == ResponseCode.CONTROLLER_BROKER_NOT_ALIVE,
                    outdated=sync.outdated(proposal),
                )
                level = log.info if expected else log.warning
                level("HA: AlterSyncStateSet refused", proposed=sorted(proposal), error=error)
                sync.proposal_failed(proposal, now_ms=self._now_ms(), attempt=attempt)
            else:
                # It may have committed: keep counting both sets until an answer settles it.
                log.warning(
                    "HA: AlterSyncStateSet outcome unknown; counting both sets until settled",
                    current=sorted(sync.members),
                    proposed=sorted(proposal),
                    error=error,
                )
                sync.proposal_unknown(proposal, now_ms=self._now_ms(), attempt=attempt)
            self._after_change()
            return
        if sync is not self._sync:
            return
        self._not_alive.accepted()
        sync.proposal_accepted(proposal, int(new_epoch), now_ms=self._now_ms(), attempt=attempt)
        log.info("HA: SyncStateSet changed", sync_state_set=sorted(sync.members), epoch=sync.epoch)
        self._after_change()

    async def _tick_loop(self) -> None:
        interval = self.config.tick_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            sync = self._sync
            if sync is None:
                return
            try:
                now = self._now_ms()
                self._server.tick(now)
                sync.tick(master_max_offset=self.store.max_offset, now_ms=now)
                self._after_change()
            except Exception as exc:  # keep the upkeep alive, loudly
                log.error("HA: master upkeep failed", error=f"{type(exc).__name__}: {exc}")

    # ------------------------------------------------------------ helpers

    async def _run_blocking(self, fn: Callable[[], Any]) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)
