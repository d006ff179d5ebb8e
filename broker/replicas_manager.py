"""ReplicasManager: the broker's side of controller mode, as the broker and its processors see it.

It composes the parts in ``broker.replicas`` and owns what they share (the connections to the
controllers, the controller link's thread, the broker id, the role's one writer):

- ``registration``: the persistent broker id, CONTROLLER_REGISTER_BROKER;
- ``heartbeat`` and ``lease``: heartbeats to the active controller, on the controller link's
  thread, and the fencing lease they renew;
- ``poll``: the group's metadata polled from the controllers (a NOTIFY_BROKER_ROLE_CHANGED push
  only makes it poll at once), elections requested for a group without a master;
- ``roles``: the controllers' answers applied (master or slave through the HAService);
- ``routes``: this broker's topics registered with every controller for the routes;
- ``config_sync``: a slave's topic config, consumer offsets, subscription groups and DLQ resend
  ledger kept in step with its master's.

It also sends the HAService's SyncStateSet proposals (AlterSyncStateSet).

Rules worth knowing (each part's docstring has its own):
- a role change is believed only from the controllers' own answers (GET_REPLICA_INFO, REGISTER,
  ELECT_MASTER, through the AddressFailover that follows the active controller); a push is a
  hint to poll now;
- metadata with a master epoch older than one already seen is ignored (a stale poll);
- a broker whose identity the controllers no longer know (2010, 2014) applies its id again, or
  obtains a new one, and registers: it never loops on 2010;
- a broker takes writes only after ``HAService.become_master`` returned for the current epoch,
  and only while it holds the fencing lease (only answered heartbeats renew it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

from broker.context import BrokerContext
from broker.controller_link import ControllerLink
from broker.ha.service import HAService
from broker.identity import BrokerIdentity
from broker.repair.fetch import RecordRepair
from broker.repair.scrub import Scrubber, export_metrics, export_repair_metrics
from broker.replicas.config_sync import SlaveConfigSync
from broker.replicas.group_info import NO_MASTER, GroupInfo
from broker.replicas.heartbeat import Heartbeats
from broker.replicas.lease import FencingLease
from broker.replicas.poll import MetadataPoll
from broker.replicas.registration import Registration, electing
from broker.replicas.roles import Roles
from broker.replicas.routes import RouteRegistration
from broker.traffic_meter import TrafficMeter
from daemon.tasks import cancel_and_wait
from protocol.controller_requests.groups import (
    AlterSyncStateSet,
    AlterSyncStateSetAnswer,
    RoleChanged,
)
from protocol.fields import FieldError
from remoting.client import ConnectionPool
from remoting.failover import AddressFailover

log = structlog.get_logger(__name__)

__all__ = ["NO_MASTER", "GroupInfo", "ReplicasManager", "electing"]


class ReplicasManager:
    def __init__(self, ctx: BrokerContext, ha: HAService) -> None:
        self.ctx = ctx
        self.cfg = cfg = ctx.cfg
        self.ha = ha
        role = ctx.role_cell  # this manager's parts are the role's one writer
        # Signed as the cluster when auth is on: the controllers and the master require it.
        self.pool = ConnectionPool(connect_timeout=2.0, credentials=ctx.cluster_credentials)
        self.controllers = AddressFailover(
            cfg.controller_addresses, self.pool, timeout=3.0, busy_rounds=3
        )
        # Registration and heartbeats: on a thread of their own (broker.controller_link).
        self.link = ControllerLink(cfg.controller_addresses, ctx.cluster_credentials)
        # Messages put per second, sent with every heartbeat (sampled on the link's thread).
        self.traffic = TrafficMeter(cfg.traffic_window_ms, cfg.traffic_report_topics)
        self.on_auth_digest: Callable[[str], None] | None = None
        """Called with every heartbeat answer's ``authDigest`` (the users' table changed)."""
        self.on_producer_id_limit: Callable[[int], None] | None = None
        """Called with every heartbeat answer's ``producerIdLimit`` (idempotent producers)."""
        self.registration = Registration(
            cfg, self.controllers, self.link, role, on_new_identity=self._new_identity
        )
        self.routes = RouteRegistration(cfg, ctx, self.pool, self._known_broker_id)
        self.roles = Roles(
            cfg,
            ctx,
            ha,
            role,
            self.pool,
            self._known_broker_id,
            self.topics_changed,
            role_changed=self.traffic.request_restart,
        )
        self.poll = MetadataPoll(
            cfg, self.controllers, self.roles, lambda: self.broker_id, self._register_and_apply
        )
        self.lease = FencingLease(role, cfg.broker_heartbeat_timeout_ms)
        self.heartbeats = Heartbeats(
            cfg,
            ctx,
            ha,
            self.link,
            self.traffic,
            self.lease,
            broker_id=lambda: self.broker_id,
            register=self._register_and_apply,
            poll_now=self.poll.now.set,
            topics_changed=self.topics_changed,
            on_auth_digest=lambda: self.on_auth_digest,
            damaged=lambda: self.scrubber.damaged_records,
            on_producer_id_limit=lambda: self.on_producer_id_limit,
        )
        self.config_sync = SlaveConfigSync(cfg, ctx, self.pool, self.topics_changed)
        self._tasks: list[asyncio.Task[None]] = []
        ha.set_replicas_refresher(self.refresh_replicas)
        # Damaged records are fetched from the group's other replicas (issue 31).
        self.repair = RecordRepair(
            ctx.store.repairs, lambda: ha, lambda: ctx.role, lambda: self.pool
        )
        ctx.store.repairs.repairer = self.repair
        export_repair_metrics(ctx.metrics, self.repair)
        self.scrubber = Scrubber(
            ctx.store.repairs,
            self.repair,
            lambda: cfg.scrub_bytes_per_s,
            lambda: cfg.scrub_interval_hours * 3600.0,
        )
        export_metrics(ctx.metrics, self.scrubber)

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        """Start in the background: the broker serves (refusing writes) while controllers are
        found, so operators see it come up even when the controllers are down."""
        self.heartbeats.loop = asyncio.get_running_loop()
        self.link.start()
        self._tasks.append(asyncio.create_task(self._run(), name="replicas-manager"))
        self._tasks.append(asyncio.create_task(self.routes.run(), name="route-registration"))
        self._tasks.append(asyncio.create_task(self.scrubber.run(), name="scrub"))

    async def stop(self) -> None:
        self.roles.stopping = True
        await cancel_and_wait(self._tasks)
        self._tasks.clear()
        await self.link.stop()
        self.pool.close()

    async def _run(self) -> None:
        await self.registration.establish()
        self.routes.changed()
        self.link.spawn(self.heartbeats.run(), "controller-heartbeat")
        self._tasks.append(asyncio.create_task(self.config_sync.run(), name="slave-config-sync"))
        await self._register_and_apply()
        await self.poll.run()

    # -- what the broker and the HAService call --------------------------------------------------
    @property
    def identity(self) -> BrokerIdentity | None:
        return self.registration.identity

    @property
    def broker_id(self) -> int:
        return self.registration.broker_id

    @property
    def ignored_pushes(self) -> int:
        """Pushed role changes the controllers did not confirm (forged or stale)."""
        return self.poll.ignored_pushes

    def topics_changed(self) -> None:
        self.routes.changed()

    def refresh_replicas(self, done: Callable[[], None]) -> None:
        """The HA master met a slave it does not know yet: poll now, and call ``done`` once that
        poll (one started after this call) handed the controllers' answer over, or failed."""
        self.poll.refresh(done)

    def on_role_notification(self, pushed: RoleChanged | None, sender: str = "?") -> None:
        """NOTIFY_BROKER_ROLE_CHANGED: a hint that the group's metadata changed, from whoever
        connected (the active controller, or anyone): poll the controllers now, apply only what
        they answer. The claim is kept to be checked against that answer."""
        self.poll.on_push(pushed, sender)

    async def apply(self, info: GroupInfo) -> None:
        await self.roles.apply(info)

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

    # -- shared between the parts ----------------------------------------------------------------
    def _known_broker_id(self) -> int | None:
        identity = self.registration.identity
        return identity.broker_id if identity is not None else None

    def _new_identity(self) -> None:
        """The broker id was established again: the group's metadata starts afresh for us."""
        self.roles.forget()
        self.routes.changed()

    async def _register_and_apply(self) -> None:
        # No lease from a registration: the controllers count a broker alive by its
        # heartbeats only, so only an answered heartbeat may extend the write lease.
        async with self.registration.lock:
            resp = await self.registration.register()
        if resp is None:
            return
        try:
            info = GroupInfo.from_frame(resp)
        except FieldError as exc:  # nothing applied: the poll asks again
            log.warning("malformed registration answer", error=str(exc))
            return
        self.roles.hand_replicas_to_ha(info)
        await self.roles.apply(info)
