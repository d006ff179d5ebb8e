"""REGISTER_BROKER of this broker's topics with every controller, which build the clients'
routes from them: periodically (``route_register_interval_ms``) and soon after a change."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from broker.config import BrokerConfig
from broker.context import BrokerContext
from daemon.tasks import sleep_or_wake
from protocol.controller_requests.topics import RegisterRoutes
from remoting.client import ConnectionPool
from remoting.errors import RemotingError


class RouteRegistration:
    """``broker_id`` is None until this broker has an id (nothing is registered before)."""

    def __init__(
        self,
        cfg: BrokerConfig,
        ctx: BrokerContext,
        pool: ConnectionPool,
        broker_id: Callable[[], int | None],
    ) -> None:
        self.cfg = cfg
        self.ctx = ctx
        self.pool = pool
        self._broker_id = broker_id
        self.dirty = asyncio.Event()
        """Set to register soon (the topics changed, or the controllers may have lost them)."""

    def changed(self) -> None:
        self.dirty.set()

    async def run(self) -> None:
        interval = self.cfg.route_register_interval_ms / 1000
        while True:
            await sleep_or_wake(self.dirty, interval)
            self.dirty.clear()
            broker_id = self._broker_id()
            if broker_id is None:
                continue
            await self._register(broker_id)

    async def _register(self, broker_id: int) -> None:
        if not self.ctx.role.is_master:
            # A slave may hold a topic's messages before its config arrives from the master
            # (or with the master gone for good): route what it can serve all the same.
            self.ctx.adopt_store_topics()
        ask = RegisterRoutes(
            cluster=self.cfg.cluster,
            broker_name=self.cfg.broker_name,
            broker_id=broker_id,
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
