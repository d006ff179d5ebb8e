"""Polling the group's metadata from the controllers (CONTROLLER_GET_REPLICA_INFO).

A NOTIFY_BROKER_ROLE_CHANGED push on the broker's port proves nothing about its sender (any
client can send 1008), so its content is never applied: it is a hint to poll now, and a claim
the controllers' answer does not confirm is logged once. A group with no master asks for an
election (CONTROLLER_ELECT_MASTER). The HA master's unknown slaves also make it poll now.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import structlog

from broker.config import BrokerConfig
from broker.replicas.group_info import NO_MASTER, GroupInfo
from broker.replicas.roles import Roles
from daemon.tasks import sleep_or_wake
from protocol.codes import ResponseCode
from protocol.controller_requests.groups import ElectMaster, GetReplicaInfo, RoleChanged
from remoting.errors import RemotingError, ResponseError
from remoting.failover import AddressFailover

log = structlog.get_logger(__name__)

PUSH_POLL_MIN_INTERVAL_S = 0.1
"""Pushes (NOTIFY_BROKER_ROLE_CHANGED) make the broker poll at once, at most this often."""

Claim = tuple[int, str, int]
"""A pushed role change: (master id, address, epoch)."""


class MetadataPoll:
    """The poll loop. ``register`` registers and applies the answer (the controllers do not
    know this broker, or lost it)."""

    def __init__(
        self,
        cfg: BrokerConfig,
        controllers: AddressFailover,
        roles: Roles,
        broker_id: Callable[[], int],
        register: Callable[[], Awaitable[None]],
    ) -> None:
        self.cfg = cfg
        self.controllers = controllers
        self.roles = roles
        self._broker_id = broker_id
        self._register = register
        self.now = asyncio.Event()
        """Set to poll at once."""
        self._refresh_waiters: list[Callable[[], None]] = []
        """Called after the next poll (one that starts after they were added)."""
        self._claims: dict[Claim, str] = {}
        """Role changes pushed since the last poll: claim -> sender."""
        self._ignored_claims: set[Claim] = set()
        self.ignored_pushes = 0
        """Pushed role changes the controllers did not confirm (forged or stale)."""

    def refresh(self, done: Callable[[], None]) -> None:
        """Poll now, and call ``done`` once that poll (one started after this call) handed the
        controllers' answer over, or failed."""
        self._refresh_waiters.append(done)
        self.now.set()

    def on_push(self, pushed: RoleChanged | None, sender: str) -> None:
        """A NOTIFY_BROKER_ROLE_CHANGED (None: a malformed one, still a hint): poll now; keep
        the claim to check against the answer."""
        if pushed is not None and len(self._claims) < 64:
            info = GroupInfo.of(pushed.metadata)
            claim = (info.master_broker_id, info.master_address, info.master_epoch)
            self._claims.setdefault(claim, sender)
        self.now.set()

    async def run(self) -> None:
        interval = self.cfg.replica_info_poll_interval_ms / 1000
        last_failure: str | None = None
        while True:
            await sleep_or_wake(self.now, interval)
            self.now.clear()
            waiters, self._refresh_waiters = self._refresh_waiters, []
            try:
                await self.poll_once()
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

    async def poll_once(self) -> None:
        claims, self._claims = self._claims, {}
        try:
            ask = GetReplicaInfo(broker_name=self.cfg.broker_name)
            resp = await self.controllers.call(ask.code, *ask.encode())
        except ResponseError as exc:
            if exc.code in (
                ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST,
                ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
            ):
                await self._register()
            return
        except RemotingError:
            return
        info = GroupInfo.from_frame(resp)
        self._check_claims(claims, info)
        self.roles.hand_replicas_to_ha(info)
        if self._broker_id() not in info.replicas:
            await self._register()  # the controller lost us (e.g. cleaned)
            return
        await self.roles.apply(info)
        if info.master_broker_id == NO_MASTER:
            await self._request_election()

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
        info = GroupInfo.from_frame(resp)
        self.roles.hand_replicas_to_ha(info)
        await self.roles.apply(info)

    def _check_claims(self, claims: dict[Claim, str], info: GroupInfo) -> None:
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
