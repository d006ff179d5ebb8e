"""This broker's persistent broker id and its registration with the controllers.

The id is obtained once (GetNextBrokerId, ApplyBrokerId as a compare-and-set on a register
code: ``broker.identity``) and kept across restarts. A broker registers with its register code;
one whose identity the controllers no longer know (2010 when it registers: an operator cleaned
its metadata while it was down; 2014: the id went to another broker since) applies its id
again, or obtains a new one when that id is gone, and registers: it never loops on 2010.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

from broker.config import BrokerConfig
from broker.controller_link import ControllerLink
from broker.identity import (
    BrokerIdConflictError,
    BrokerIdentity,
    IdentityError,
    establish_identity,
    reestablish_identity,
)
from broker.replicas.group_info import NO_MASTER
from broker.role import RoleCell
from protocol.codes import ResponseCode
from protocol.controller_requests.brokers import (
    ApplyBrokerId,
    GetNextBrokerId,
    NextBrokerIdAnswer,
    RegisterBroker,
)
from protocol.remoting import Frame
from remoting.errors import RemotingError, ResponseError, UnreachableError
from remoting.failover import NOT_NOW, AddressFailover

log = structlog.get_logger(__name__)


def electing(exc: RemotingError) -> bool:
    """Every controller answered, but none could serve now: no leader known (an election in
    progress, as at every cluster start) or busy (the leader's own answer, the followers only
    naming it). Retried; not a fault."""
    if isinstance(exc, ResponseError):
        return exc.code in NOT_NOW
    return isinstance(exc, UnreachableError) and exc.answered


class Registration:
    """The broker id (:attr:`identity`) and CONTROLLER_REGISTER_BROKER. ``on_new_identity`` is
    called when the id was established again: the controllers' epochs for the group may have
    started again (a cleaned group), so what was seen of the old metadata says nothing now."""

    def __init__(
        self,
        cfg: BrokerConfig,
        controllers: AddressFailover,
        link: ControllerLink,
        role: RoleCell,
        on_new_identity: Callable[[], None],
    ) -> None:
        self.cfg = cfg
        self.controllers = controllers
        self.link = link
        self._role = role
        self._on_new_identity = on_new_identity
        self.identity: BrokerIdentity | None = None
        self.lock = asyncio.Lock()
        """Held while registering: one registration at a time."""

    @property
    def broker_id(self) -> int:
        return self.identity.broker_id if self.identity else NO_MASTER

    async def establish(self) -> BrokerIdentity:
        """This broker's id: read from its data directory, or obtained from the controllers,
        retrying (with backoff) until they answer."""
        delay = 0.2
        while self.identity is None:
            try:
                self.identity = await establish_identity(
                    self.cfg.data_dir, self.get_next_broker_id, self.apply_broker_id
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
        return self.identity

    async def get_next_broker_id(self) -> int:
        ask = GetNextBrokerId(cluster=self.cfg.cluster, broker_name=self.cfg.broker_name)
        resp = await self.controllers.call(ask.code, *ask.encode())
        return NextBrokerIdAnswer.parse(resp.header, resp.body).next_broker_id

    async def apply_broker_id(self, broker_id: int, code: str) -> None:
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

    async def register(self) -> Frame | None:
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
            if not await self._reestablish():
                return None
        return None

    async def _reestablish(self) -> bool:
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
                self.cfg.data_dir, old, self.get_next_broker_id, self.apply_broker_id
            )
        except (RemotingError, IdentityError) as exc:
            log.warning("could not apply for a broker id again", error=str(exc))
            return False
        self.identity = identity
        self._role.swap(broker_id=identity.broker_id)
        self._on_new_identity()
        return True
