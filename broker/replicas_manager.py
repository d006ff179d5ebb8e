"""ReplicasManager: the broker's side of controller mode.

It obtains a persistent BrokerId, registers with the active controller, heart-beats, learns the
group's metadata from the controllers (by poll; a NOTIFY_BROKER_ROLE_CHANGED push only makes it
poll at once) and flips the broker between master and slave through the HAService. It also
reports SyncStateSet changes (AlterSyncStateSet), registers topics for routes with every
controller, fences a master that lost the controller, and keeps a slave's topic config,
consumer offsets, subscription groups and DLQ resend ledger in step with its master.

Rules worth knowing:
- a role change is believed only from the controllers' own answers (GET_REPLICA_INFO, REGISTER,
  ELECT_MASTER, through the AddressFailover that follows the active controller). A push on the broker's
  port proves nothing about its sender (any client can send 1008), so its content is never
  applied: it is a hint to poll now, and a claim the controllers do not confirm is logged once;
- metadata with a master epoch older than one already seen is ignored (a stale poll);
- a broker registers with its register code; one whose identity the controllers no longer
  know (2010 when it registers: an operator cleaned its metadata while it was down; 2014: the id
  went to another broker since) applies its id again, or obtains a new one when that id is gone,
  and registers: it never loops on 2010;
- a broker takes writes only after ``HAService.become_master`` returned for the current epoch;
- a master holds a lease: ``broker_heartbeat_timeout_ms`` from the moment it *sent* the last
  heartbeat the active controller answered, as long as that answer named it master at its
  epoch (slaves renew theirs the same way, so a slave that becomes master already holds one;
  a registration or a role change renews nothing: the controllers time a broker out from its
  heartbeats alone). Every write checks it, so a master cut off from the controllers (or
  frozen, then resumed) refuses writes with MASTER_FENCED before the controllers can have
  declared it dead and elected another, and a deposed master whose heartbeat is answered again
  does not write before it learned its new role.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass

import msgpack
import structlog

from broker.context import BrokerContext
from broker.controller_link import ControllerLink
from broker.ha.service import HARole, HAService
from broker.identity import (
    BrokerIdConflictError,
    BrokerIdentity,
    IdentityError,
    establish_identity,
    reestablish_identity,
)
from broker.traffic_meter import TrafficMeter
from protocol.codes import RequestCode, ResponseCode
from protocol.controller_requests.brokers import (
    ApplyBrokerId,
    GetNextBrokerId,
    NextBrokerIdAnswer,
    RegisterBroker,
)
from protocol.controller_requests.groups import (
    AlterSyncStateSet,
    AlterSyncStateSetAnswer,
    ElectMaster,
    GetReplicaInfo,
)
from protocol.controller_requests.heartbeats import BrokerHeartbeat
from protocol.controller_requests.topics import RegisterRoutes
from protocol.remoting import Frame
from protocol.retry import RetryConfigError, config_from_dict
from remoting.client import ConnectionPool
from remoting.errors import RemotingError, ResponseError, UnreachableError
from remoting.failover import AddressFailover
from storage.errors import StoreError

log = structlog.get_logger(__name__)

NO_MASTER = -1


def electing(exc: RemotingError) -> bool:
    """Every controller answered, but none could serve now: no leader known (an election in
    progress, as at every cluster start) or busy. Retried; not a fault."""
    if isinstance(exc, ResponseError):
        return exc.code == ResponseCode.CONTROLLER_NOT_LEADER
    return isinstance(exc, UnreachableError) and exc.answered


LATE_HEARTBEAT_S = 0.2
"""A heartbeat that leaves this much after it was due is logged (``controller heartbeat late``)."""

PUSH_POLL_MIN_INTERVAL_S = 0.1
"""Pushes (NOTIFY_BROKER_ROLE_CHANGED) make the broker poll at once, at most this often."""


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """What the controller says of this broker's group."""

    master_broker_id: int
    master_address: str
    master_epoch: int
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int
    sealed_queues: frozenset[tuple[str, int]] = frozenset()
    """The group's static topic queues whose items are sealed (``sealedQueues``)."""

    @classmethod
    def from_frame(cls, frame: Frame) -> GroupInfo:
        h = frame.header
        members: list[int] = []
        sealed: set[tuple[str, int]] = set()
        if frame.body:
            doc = msgpack.unpackb(frame.body)
            if isinstance(doc, dict):
                members = [int(m) for m in doc.get("syncStateSet") or []]
                for pair in doc.get("sealedQueues") or []:
                    if (
                        isinstance(pair, list)
                        and len(pair) == 2
                        and isinstance(pair[0], str)
                        and type(pair[1]) is int
                    ):
                        sealed.add((pair[0], pair[1]))
        master_id = h.get("masterBrokerId")
        address = h.get("masterAddress")
        return cls(
            master_broker_id=int(master_id) if isinstance(master_id, int) else NO_MASTER,
            master_address=address if isinstance(address, str) else "",
            master_epoch=int(h.get("masterEpoch") or 0),
            sync_state_set=frozenset(members),
            sync_state_set_epoch=int(h.get("syncStateSetEpoch") or 0),
            sealed_queues=frozenset(sealed),
        )


def monotonic() -> float:
    return time.monotonic()


class ReplicasManager:
    def __init__(self, ctx: BrokerContext, ha: HAService) -> None:
        self.ctx = ctx
        self.cfg = ctx.cfg
        self.ha = ha
        self._role = ctx.role_cell  # this manager is the role's one writer
        # Signed as the cluster when auth is on: the controllers and the master require it.
        self.pool = ConnectionPool(connect_timeout=2.0, credentials=ctx.cluster_credentials)
        self.controllers = AddressFailover(
            self.cfg.controller_addresses, self.pool, timeout=3.0, busy_rounds=3
        )
        # Registration and heartbeats: on a thread of their own (broker.controller_link).
        self.link = ControllerLink(self.cfg.controller_addresses, ctx.cluster_credentials)
        # Messages put per second, sent with every heartbeat (sampled on the link's thread).
        self.traffic = TrafficMeter(self.cfg.traffic_window_ms, self.cfg.traffic_report_topics)
        self._loop: asyncio.AbstractEventLoop | None = None
        self.identity: BrokerIdentity | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._apply_lock = asyncio.Lock()
        self._last_contact = monotonic()
        self._seen_epoch = 0
        self._slave_of: tuple[str, int] | None = None
        self._routes_dirty = asyncio.Event()
        self._stopping = False
        self._poll_now = asyncio.Event()
        self._refresh_waiters: list[Callable[[], None]] = []
        """Called after the next poll (one that starts after they were added)."""
        ha.set_replicas_refresher(self.refresh_replicas)
        self._register_lock = asyncio.Lock()
        self._claims: dict[tuple[int, str, int], str] = {}
        """Role changes pushed since the last poll: (master id, address, epoch) -> sender."""
        self._ignored_claims: set[tuple[int, str, int]] = set()
        self.ignored_pushes = 0
        """Pushed role changes the controllers did not confirm (forged or stale)."""
        self.on_auth_digest: Callable[[str], None] | None = None
        """Called with every heartbeat answer's ``authDigest`` (the users' table changed)."""

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        """Start in the background: the broker serves (refusing writes) while controllers are
        found, so operators see it come up even when the controllers are down."""
        self._loop = asyncio.get_running_loop()
        self.link.start()
        self._tasks.append(asyncio.create_task(self._run(), name="replicas-manager"))
        self._tasks.append(
            asyncio.create_task(self._register_routes_loop(), name="route-registration")
        )

    async def stop(self) -> None:
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        await self.link.stop()
        self.pool.close()

    @property
    def broker_id(self) -> int:
        return self.identity.broker_id if self.identity else NO_MASTER

    def topics_changed(self) -> None:
        self._routes_dirty.set()

    async def _run(self) -> None:
        delay = 0.2
        while self.identity is None:
            try:
                self.identity = await establish_identity(
                    self.cfg.data_dir, self._get_next_broker_id, self._apply_broker_id
                )
            except RemotingError as exc:
                if electing(exc):
                    # Every controller answered, none is leader yet: the controllers are
                    # electing one (at every cluster start), not a fault.
                    log.info("waiting for the controllers to elect a leader", error=str(exc))
                else:
                    log.warning("controllers not reachable for broker id; retrying", error=str(exc))
                await asyncio.sleep(delay)
                delay = min(delay * 2, 3.0)
        self._role.swap(broker_id=self.identity.broker_id)
        self._routes_dirty.set()
        self.link.spawn(self._heartbeat_loop(), "controller-heartbeat")
        self._tasks.append(asyncio.create_task(self._slave_sync_loop(), name="slave-config-sync"))
        await self._register_and_apply()
        await self._poll_loop()

    # -- controller calls ----------------------------------------------------------------------
    async def _get_next_broker_id(self) -> int:
        ask = GetNextBrokerId(cluster=self.cfg.cluster, broker_name=self.cfg.broker_name)
        resp = await self.controllers.call(ask.code, *ask.encode())
        return NextBrokerIdAnswer.parse(resp.header, resp.body).next_broker_id

    async def _apply_broker_id(self, broker_id: int, code: str) -> None:
        ask = ApplyBrokerId(
            cluster=self.cfg.cluster,
            broker_name=self.cfg.broker_name,
            broker_id=broker_id,
            register_check_code=code,
        )
        try:
            await self.controllers.call(ask.code, *ask.encode())
        except ResponseError as exc:
            if exc.code == ResponseCode.CONTROLLER_BROKER_ID_INVALID:
                raise BrokerIdConflictError(str(exc)) from None
            raise

    async def _register_and_apply(self) -> None:
        # No lease from a registration: the controllers count a broker alive by its
        # heartbeats only, so only an answered heartbeat may extend the write lease.
        async with self._register_lock:
            resp = await self._register()
        if resp is not None:
            self._hand_replicas_to_ha(resp)
            await self.apply(GroupInfo.from_frame(resp))

    async def _register(self) -> Frame | None:
        """CONTROLLER_REGISTER_BROKER with this broker's register code; on 2010 (the controllers
        do not know this broker id any more) or 2014 (the id is another broker's now: the
        controllers forgot this one and gave the id away) the identity is established again
        first. None when it did not succeed."""
        lost = (
            ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
            ResponseCode.CONTROLLER_BROKER_ID_INVALID,
        )
        for attempt in range(2):
            assert self.identity is not None
            try:
                # On the link: the controllers take heartbeats only from the connection that
                # registered the broker.
                ask = RegisterBroker(
                    cluster=self.cfg.cluster,
                    broker_name=self.cfg.broker_name,
                    broker_id=self.identity.broker_id,
                    broker_address=self.cfg.listen,
                    register_check_code=self.identity.register_code,
                )
                return await self.link.call(ask.code, *ask.encode())
            except ResponseError as exc:
                if exc.code not in lost or attempt:
                    log.warning("register with controller failed", error=str(exc))
                    return None
            except RemotingError as exc:
                log.warning("register with controller failed", error=str(exc))
                return None
            if not await self._reestablish_identity():
                return None
        return None

    async def _reestablish_identity(self) -> bool:
        """Apply this broker's id again (or obtain a new one); False when that failed now."""
        old = self.identity
        if old is None:
            return False
        log.warning(
            "the controllers no longer know this broker id as ours; applying for it again",
            broker_id=old.broker_id,
        )
        try:
            identity = await reestablish_identity(
                self.cfg.data_dir, old, self._get_next_broker_id, self._apply_broker_id
            )
        except (RemotingError, IdentityError) as exc:
            log.warning("could not apply for a broker id again", error=str(exc))
            return False
        self.identity = identity
        self._role.swap(broker_id=identity.broker_id)
        # The controllers' epochs for this group may have started again (a cleaned group):
        # what this broker saw of the old metadata says nothing about the new.
        self._seen_epoch = 0
        self._slave_of = None
        self._routes_dirty.set()
        return True

    async def alter_sync_state_set(self, members: frozenset[int]) -> int:
        """The HAService's proposer: AlterSyncStateSet; returns the new syncStateSetEpoch."""
        ss_epoch = self.ha.sync_state_set_epoch
        if ss_epoch is None:  # no longer master: the HAService drops this proposal's outcome
            raise RuntimeError("not master any more: no SyncStateSet to change")
        ask = AlterSyncStateSet(
            broker_name=self.cfg.broker_name,
            master_broker_id=self.broker_id,
            master_epoch=self.ha.master_epoch or 0,
            sync_state_set=members,
            sync_state_set_epoch=ss_epoch,
        )
        resp = await self.controllers.call(ask.code, *ask.encode())
        return AlterSyncStateSetAnswer.parse(resp.header, resp.body).sync_state_set_epoch

    async def _request_election(self) -> None:
        try:
            ask = ElectMaster(broker_name=self.cfg.broker_name)
            resp = await self.controllers.call(ask.code, *ask.encode())
        except ResponseError as exc:
            if exc.code not in (
                ResponseCode.CONTROLLER_MASTER_STILL_EXIST,
                ResponseCode.CONTROLLER_MASTER_NOT_AVAILABLE,
            ):
                log.info("election request refused", error=str(exc))
            return
        except RemotingError:
            return
        self._hand_replicas_to_ha(resp)
        await self.apply(GroupInfo.from_frame(resp))

    # -- loops ---------------------------------------------------------------------------------
    def _on_main(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` on the broker's main loop (from the controller link's thread)."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(callback)

    async def _heartbeat_loop(self) -> None:
        """Runs on the controller link's loop (its own thread), not the broker's: what it
        touches of the broker is read whole (offsets, epoch, the role) or handed to the main
        loop (:meth:`_on_main`); the lease is written with one swap of the role."""
        interval = self.cfg.broker_heartbeat_interval_ms / 1000
        timeout = self.cfg.broker_heartbeat_timeout_ms / 1000
        again = False
        late_reported = -60.0
        while True:
            registered = False
            store = self.ctx.store
            sent = monotonic()
            now_ms = int(sent * 1000)
            if self.traffic.due(now_ms):
                self.traffic.observe(now_ms, self.ctx.metrics.traffic.queue_totals())
            beat = BrokerHeartbeat(
                cluster=self.cfg.cluster,
                broker_name=self.cfg.broker_name,
                broker_id=self.broker_id,
                broker_address=self.cfg.listen,
                epoch=self.ha.epoch_file.last_epoch() or 0,
                max_offset=store.max_offset,
                confirm_offset=store.confirm_offset,
                election_priority=self.cfg.election_priority,
                heartbeat_timeout_ms=self.cfg.broker_heartbeat_timeout_ms,
                traffic_report=self.traffic.body(),
            )
            try:
                resp = await self.link.heartbeats.call(
                    beat.code, *beat.encode(), timeout=min(timeout, 2.0)
                )
                # The controller heard us no earlier than ``sent``: a lease counted from there
                # ends before the controller's own timeout for us does.
                if sent - self._last_contact > timeout:
                    # Back after a silence (frozen, partitioned): the controllers may have
                    # dropped our route registration with our liveness; register at once.
                    self._on_main(self.topics_changed)
                self._contact_if_master_confirmed(sent, resp)
                digest = resp.header.get("authDigest")
                on_digest = self.on_auth_digest
                if on_digest is not None and isinstance(digest, str):
                    self._on_main(functools.partial(on_digest, digest))
            except ResponseError as exc:
                if exc.code == ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED:
                    await self._register_from_link()
                    registered = True
            except RemotingError:
                pass
            if self.ctx.role.is_master and monotonic() - self._last_contact > timeout:
                self._set_fenced(True)
            if registered and not again:
                # A new active controller wanted our registration: heartbeat it at once (once),
                # the lease has waited long enough.
                again = True
                continue
            again = False
            slept = monotonic()
            await asyncio.sleep(interval)
            late = monotonic() - slept - interval
            if late > LATE_HEARTBEAT_S and slept - late_reported > 10.0:
                # The whole process stalled (this thread has its own loop): starved of CPU,
                # swapping, a long garbage collection. Logged at most every 10 s.
                late_reported = slept
                log.info("controller heartbeat late", late_ms=round(late * 1000))

    async def _register_from_link(self) -> None:
        """Register (on the main loop, which holds the role's writer) and wait for it."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        done = asyncio.run_coroutine_threadsafe(self._register_and_apply(), loop)
        try:
            await asyncio.wrap_future(done)
        except Exception as exc:  # the main loop logs its own failures; keep heart-beating
            log.warning("registering again failed", error=f"{type(exc).__name__}: {exc}")

    async def _poll_loop(self) -> None:
        interval = self.cfg.replica_info_poll_interval_ms / 1000
        last_failure: str | None = None
        while True:
            try:
                await asyncio.wait_for(self._poll_now.wait(), interval)
            except TimeoutError:
                pass
            self._poll_now.clear()
            waiters, self._refresh_waiters = self._refresh_waiters, []
            try:
                await self._poll_once()
                failed = None
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # keep polling, loudly: the controllers' view must come
                failed = f"{type(exc).__name__}: {exc}"
                if failed != last_failure:  # one line per distinct failure, not one a second
                    log.error("applying the controllers' metadata failed", error=failed)
            finally:
                for done in waiters:
                    try:
                        done()
                    except Exception as exc:  # one listener's fault must not stop the polls
                        log.error(
                            "after-poll callback failed", error=f"{type(exc).__name__}: {exc}"
                        )
            last_failure = failed
            # However many pushes arrive, the controllers are asked at most this often.
            await asyncio.sleep(PUSH_POLL_MIN_INTERVAL_S)

    async def _poll_once(self) -> None:
        claims, self._claims = self._claims, {}
        try:
            ask = GetReplicaInfo(broker_name=self.cfg.broker_name)
            resp = await self.controllers.call(ask.code, *ask.encode())
        except ResponseError as exc:
            if exc.code in (
                ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST,
                ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
            ):
                await self._register_and_apply()
            return
        except RemotingError:
            return
        info = GroupInfo.from_frame(resp)
        self._check_claims(claims, info)
        known = self._known_replicas(resp)
        self._hand_replicas_to_ha(resp)
        if known is not None and self.broker_id not in known:
            await self._register_and_apply()  # the controller lost us (e.g. cleaned)
            return
        await self.apply(info)
        if info.master_broker_id == NO_MASTER:
            await self._request_election()

    def _check_claims(self, claims: dict[tuple[int, str, int], str], info: GroupInfo) -> None:
        """Log (once per claim) the pushed role changes the controllers' answer contradicts."""
        for claim, sender in claims.items():
            master_id, address, epoch = claim
            if epoch < info.master_epoch or (
                epoch == info.master_epoch
                and master_id == info.master_broker_id
                and address == info.master_address
            ):
                continue  # confirmed, or a push the controllers have moved past
            self.ignored_pushes += 1
            if claim in self._ignored_claims:
                continue
            if len(self._ignored_claims) >= 1024:
                self._ignored_claims.clear()
            self._ignored_claims.add(claim)
            log.warning(
                "ignored a role change the controllers do not confirm",
                sender=sender,
                claimed_master=address,
                claimed_master_id=master_id,
                claimed_epoch=epoch,
                master=info.master_address,
                master_id=info.master_broker_id,
                master_epoch=info.master_epoch,
            )

    def _hand_replicas_to_ha(self, resp: Frame) -> None:
        """The HA master counts only the replicas the controllers list, at their addresses."""
        doc = msgpack.unpackb(resp.body) if resp.body else None
        replicas = doc.get("replicas") if isinstance(doc, dict) else None
        if isinstance(replicas, list):
            self.ha.set_registered_replicas(
                {
                    int(r["brokerId"]): str(r.get("address") or "")
                    for r in replicas
                    if isinstance(r, dict) and isinstance(r.get("brokerId"), int)
                }
            )

    @staticmethod
    def _known_replicas(resp: Frame) -> set[int] | None:
        """The broker ids the controller lists for the group; None when the answer has no list."""
        if not resp.body:
            return None
        doc = msgpack.unpackb(resp.body)
        replicas = doc.get("replicas") if isinstance(doc, dict) else None
        if not isinstance(replicas, list):
            return None
        return {int(r["brokerId"]) for r in replicas if isinstance(r, dict) and "brokerId" in r}

    async def _register_routes_loop(self) -> None:
        """REGISTER_BROKER to every controller: periodically and soon after a topic change."""
        interval = self.cfg.route_register_interval_ms / 1000
        while True:
            try:
                await asyncio.wait_for(self._routes_dirty.wait(), interval)
            except TimeoutError:
                pass
            self._routes_dirty.clear()
            if self.identity is None:
                continue
            if not self.ctx.role.is_master:
                # A slave may hold a topic's messages before its config arrives from the master
                # (or with the master gone for good): route what it can serve all the same.
                self.ctx.adopt_store_topics()
            ask = RegisterRoutes(
                cluster=self.cfg.cluster,
                broker_name=self.cfg.broker_name,
                broker_id=self.broker_id,
                broker_address=self.cfg.listen,
                topics={name: tc.queues for name, tc in self.ctx.topics.all().items()},
            )
            header, body = ask.encode()
            for address in self.cfg.controller_addresses:
                try:
                    conn = await self.pool.get(address)
                    await conn.request(ask.code, header, body, timeout=2.0)
                except RemotingError:
                    pass

    async def _slave_sync_loop(self) -> None:
        """A slave copies its master's topic config, consumer offsets, subscription groups and
        DLQ resend ledger, so a new master serves the same topics, groups resume near where they
        were and retry with the same settings."""
        interval = self.cfg.slave_config_sync_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            role = self.ctx.role
            if role.is_master or not role.master_address:
                continue
            try:
                conn = await self.pool.get(role.master_address)
                topics = await conn.call(RequestCode.GET_ALL_TOPIC_CONFIG, timeout=3.0)
                offsets = await conn.call(
                    RequestCode.GET_ALL_CONSUMER_OFFSET, {"withTimes": True}, timeout=3.0
                )
            except RemotingError:
                continue
            changed = False
            for name, doc in (msgpack.unpackb(topics.body or b"\x80") or {}).items():
                current = self.ctx.topics.get(name)
                queues = int(doc.get("queues", 0))
                if queues and (current is None or current.queues != queues):
                    self.ctx.topics.update(name, queues)
                    changed = True
            if changed:
                # Register at once: should the master die now, the controllers' routes still
                # list the topic on this group through the slaves.
                self.topics_changed()
            try:
                self._copy_offsets(offsets)
            except (AttributeError, TypeError, ValueError) as exc:  # a malformed table
                log.warning("master's consumer offsets unreadable", error=str(exc))
            try:
                groups = await conn.call(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, timeout=3.0)
            except RemotingError:  # gone meanwhile, or a master from before the request existed
                continue
            self._copy_subscription_groups(groups)

    def _copy_offsets(self, answer: Frame) -> None:
        """Take the master's consumer offsets and their last consume times (a master that does
        not send times, ``withTimes`` absent, leaves this slave's times as they are)."""
        doc = msgpack.unpackb(answer.body or b"\x80", strict_map_key=False) or {}
        if answer.header.get("withTimes") is True:
            table, times = doc.get("offsets") or {}, doc.get("lastConsumeMs") or {}
        else:
            table, times = doc, {}
        for group, by_topic in table.items():
            for topic, by_queue in by_topic.items():
                topic_times = times.get(group, {}).get(topic, {})
                for queue_id, offset in by_queue.items():
                    at = topic_times.get(queue_id)
                    self.ctx.offsets.commit(
                        group, topic, int(queue_id), int(offset), None if at is None else int(at)
                    )

    def _copy_subscription_groups(self, frame: Frame) -> None:
        """Store the master's subscription groups and resend marks (a bad entry is logged and
        skipped: the master checked it, so it means a version mismatch, not input to trust)."""
        try:
            doc = msgpack.unpackb(frame.body or b"\x80", raw=False)
            table = doc.get("subscriptionGroupTable") or {}
            resent = doc.get("dlqResent") or {}
            for entry in table.values():
                self.ctx.sub_groups.put(config_from_dict(entry))
            self.ctx.dlq_resent.merge(resent)
        except (RetryConfigError, StoreError, ValueError, TypeError, AttributeError) as exc:
            log.error("copying the master's subscription groups failed", error=str(exc))

    # -- role changes --------------------------------------------------------------------------
    def refresh_replicas(self, done: Callable[[], None]) -> None:
        """The HA master met a slave it does not know yet: poll now, and call ``done`` once that
        poll (one started after this call) handed the controllers' answer over, or failed."""
        self._refresh_waiters.append(done)
        self._poll_now.set()

    def on_role_notification(self, frame: Frame, sender: str = "?") -> None:
        """NOTIFY_BROKER_ROLE_CHANGED: a hint that the group's metadata changed, from whoever
        connected (the active controller, or anyone): poll the controllers now, apply only what
        they answer. The claim is kept to be checked against that answer."""
        try:
            info = GroupInfo.from_frame(frame)
        except Exception:  # a malformed hint is still only a hint
            info = None
        if info is not None and len(self._claims) < 64:
            claim = (info.master_broker_id, info.master_address, info.master_epoch)
            self._claims.setdefault(claim, sender)
        self._poll_now.set()

    async def apply(self, info: GroupInfo) -> None:
        # Sealed static topic queues first: an answer naming this broker master reflects every
        # seal committed before its election, and it must refuse those queues from its first
        # write (sealed items never reopen, so even a stale answer's are true).
        self.ctx.sealed.learn(info.sealed_queues)
        if self.identity is None or self._stopping:
            return
        async with self._apply_lock:
            if info.master_epoch < self._seen_epoch:
                return  # stale
            self._seen_epoch = info.master_epoch
            me = self.broker_id
            if (
                info.master_broker_id == NO_MASTER
                and self.ha.role is HARole.MASTER
                and self.ha.master_epoch == info.master_epoch
            ):
                # Clearing a master moves the epoch on: "no master" at this master's own epoch
                # only means the answering controller has not heard it yet (a new active
                # controller answers masters it has no heartbeat from that way). Not a demotion.
                return
            if info.master_broker_id == me:
                if self.ha.role is not HARole.MASTER or self.ha.master_epoch != info.master_epoch:
                    log.info("becoming master", broker_id=me, master_epoch=info.master_epoch)
                    self._role.swap(is_master=False)
                    await self.ha.become_master(
                        info.master_epoch, info.sync_state_set, info.sync_state_set_epoch, me
                    )
                    self._slave_of = None
                    # The write lease stays what the last answered heartbeat gave (a slave's
                    # heartbeats renew it too): the controllers time this broker out from its
                    # heartbeats, so a lease counted from now could outlive their verdict.
                    adopted = self.ctx.adopt_store_topics()
                    if adopted:
                        log.info("topic config adopted from replicated data", topics=adopted)
                    # Writes are taken from here on: the epoch, address and flag in one swap.
                    self._role.swap(
                        is_master=True,
                        master_epoch=info.master_epoch,
                        master_address=self.cfg.listen,
                    )
                    self.ctx.waiters.notify_all()
                    self.topics_changed()
                else:
                    self.ha.apply_sync_state_set(info.sync_state_set, info.sync_state_set_epoch)
                return
            self._role.swap(
                is_master=False,
                master_epoch=info.master_epoch,
                master_address=info.master_address if info.master_broker_id != NO_MASTER else "",
            )
            if info.master_broker_id == NO_MASTER or not info.master_address:
                return
            target = (info.master_address, info.master_epoch)
            if self.ha.role is HARole.SLAVE and self._slave_of == target:
                return
            ha_address = await self._master_ha_address(info.master_address)
            if ha_address is None:
                return  # retried by the next poll
            log.info(
                "becoming slave",
                broker_id=me,
                master=info.master_address,
                master_epoch=info.master_epoch,
            )
            await self.ha.become_slave(ha_address, info.master_epoch, me, self.cfg.listen)
            self._slave_of = target

    async def _master_ha_address(self, master_address: str) -> str | None:
        try:
            conn = await self.pool.get(master_address)
            resp = await conn.call(RequestCode.GET_BROKER_RUNTIME_INFO, timeout=2.0)
        except RemotingError as exc:
            log.warning(
                "cannot ask the master for its HA address", master=master_address, error=str(exc)
            )
            return None
        doc = msgpack.unpackb(resp.body or b"\x80")
        address = doc.get("haAddress") if isinstance(doc, dict) else None
        return address if isinstance(address, str) and address else None

    def _contact_if_master_confirmed(self, at: float, resp: Frame) -> None:
        """An answer from the active controller to a request sent at ``at``: renew the write
        lease, unless this broker takes writes and the answer names another master or a newer
        epoch. A deposed master (frozen, partitioned) whose heartbeat is answered again must
        not write on that lease until it learned its new role; it asks at once."""
        role = self.ctx.role
        master = resp.header.get("masterBrokerId")
        epoch = resp.header.get("masterEpoch")
        named = isinstance(master, int) and isinstance(epoch, int)
        if role.is_master and named and (master, epoch) != (self.broker_id, role.master_epoch):
            self._on_main(self._poll_now.set)
            return
        held = resp.header.get("heartbeatTimeoutMillis")
        self._contact(at, held if isinstance(held, int) and held > 0 else None)

    def _contact(self, at: float, held_ms: int | None = None) -> None:
        """The active controller answered a heartbeat sent at ``at``: renew the write lease, for
        the shorter of our own timeout and the one the controller holds us to (it caps what a
        broker may ask for: ``broker_heartbeat_timeout_max_ms``)."""
        timeout_ms = self.cfg.broker_heartbeat_timeout_ms
        if held_ms is not None:
            timeout_ms = min(timeout_ms, held_ms)
        self._last_contact = at
        self._role.swap(lease_expires=at + timeout_ms / 1000)
        self._set_fenced(False)

    def _set_fenced(self, fenced: bool) -> None:
        if fenced != self._role.current.fenced:
            self._role.swap(fenced=fenced)
            if fenced:
                log.error(
                    "master fenced: active controller unreachable; rejecting writes",
                    timeout_ms=self.cfg.broker_heartbeat_timeout_ms,
                )
            else:
                log.info("master unfenced: active controller reachable again")
