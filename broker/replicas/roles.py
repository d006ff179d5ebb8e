"""Applying the controllers' answer about the group: this broker becomes master or slave
through the HAService, and the role (``broker.role``) says so.

- a role change is believed only from the controllers' own answers (GET_REPLICA_INFO, REGISTER,
  ELECT_MASTER): never from a push (``broker.replicas.poll``);
- metadata with a master epoch older than one already seen is ignored (a stale poll);
- a broker takes writes only after ``HAService.become_master`` returned for the current epoch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

from broker.config import BrokerConfig
from broker.context import BrokerContext
from broker.ha.service import HARole, HAService
from broker.replicas.group_info import NO_MASTER, GroupInfo
from broker.role import RoleCell
from protocol.broker_requests.runtime import RuntimeInfo, RuntimeInfoQuery
from protocol.fields import FieldError
from remoting.client import ConnectionPool
from remoting.errors import RemotingError

log = structlog.get_logger(__name__)


class Roles:
    """The one place that flips the broker between master and slave. ``broker_id`` is None
    until this broker has an id (nothing is applied before)."""

    def __init__(
        self,
        cfg: BrokerConfig,
        ctx: BrokerContext,
        ha: HAService,
        role: RoleCell,
        pool: ConnectionPool,
        broker_id: Callable[[], int | None],
        topics_changed: Callable[[], None],
        role_changed: Callable[[], None],
    ) -> None:
        self.cfg = cfg
        self.ctx = ctx
        self.ha = ha
        self._role = role
        self.pool = pool
        self._broker_id = broker_id
        self._topics_changed = topics_changed
        self._role_changed = role_changed
        """Called when this broker becomes master, or stops being one (its traffic report
        starts again: broker.traffic_meter)."""
        self._lock = asyncio.Lock()
        self._seen_epoch = 0
        self._slave_of: tuple[str, int] | None = None
        self.stopping = False

    def forget(self) -> None:
        """The controllers' epochs for this group may have started again (a cleaned group):
        what this broker saw of the old metadata says nothing about the new."""
        self._seen_epoch = 0
        self._slave_of = None

    def hand_replicas_to_ha(self, info: GroupInfo) -> None:
        """The HA master counts only the replicas the controllers list, at their addresses."""
        self.ha.set_registered_replicas(info.replicas)

    async def apply(self, info: GroupInfo) -> None:
        # Sealed static topic queues first: an answer naming this broker master reflects every
        # seal committed before its election, and it must refuse those queues from its first
        # write (sealed items never reopen, so even a stale answer's are true).
        self.ctx.sealed.learn(info.sealed_queues)
        if self._broker_id() is None or self.stopping:
            return
        async with self._lock:
            if info.master_epoch < self._seen_epoch:
                return  # stale
            self._seen_epoch = info.master_epoch
            me = self._broker_id()
            assert me is not None  # an id once had is never taken away
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
                await self._be_master(info, me)
                return
            await self._be_slave(info, me)

    async def _be_master(self, info: GroupInfo, me: int) -> None:
        if self.ha.role is HARole.MASTER and self.ha.master_epoch == info.master_epoch:
            self.ha.apply_sync_state_set(info.sync_state_set, info.sync_state_set_epoch)
            return
        log.info("becoming master", broker_id=me, master_epoch=info.master_epoch)
        self._role.swap(is_master=False)
        await self.ha.become_master(
            info.master_epoch, info.sync_state_set, info.sync_state_set_epoch, me
        )
        self._slave_of = None
        # The write lease stays what the last answered heartbeat gave (a slave's heartbeats
        # renew it too): the controllers time this broker out from its heartbeats, so a lease
        # counted from now could outlive their verdict.
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
        self._role_changed()
        self._topics_changed()

    async def _be_slave(self, info: GroupInfo, me: int) -> None:
        if self._role.current.is_master:
            self._role_changed()  # no longer master
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
            ask = RuntimeInfoQuery()
            resp = await conn.call(ask.code, *ask.encode(), timeout=2.0)
            address = RuntimeInfo.parse(resp.header, resp.body).ha_address
        except (RemotingError, FieldError) as exc:
            log.warning(
                "cannot ask the master for its HA address", master=master_address, error=str(exc)
            )
            return None
        return address or None
