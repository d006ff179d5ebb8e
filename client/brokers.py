"""Requests to the master of a topic's broker group, found through the route cache; reads fall
back to a slave while the group has no master."""

from __future__ import annotations

from collections.abc import Mapping

from client.errors import BrokerError, NoRouteError
from client.routes import RouteCache
from protocol.codes import ResponseCode
from protocol.remoting import Frame, Scalar
from remoting.client import ConnectionPool, RemotingClient


class MasterCaller:
    """Sends requests to the current master of one broker group of ``topic``."""

    def __init__(self, pool: ConnectionPool, routes: RouteCache, topic: str) -> None:
        self.pool = pool
        self.routes = routes
        self.topic = topic

    def address(self, broker_name: str) -> str:
        route = self.routes.peek(self.topic)
        address = route.read_address(broker_name) if route is not None else None
        if address is None:
            raise NoRouteError(f"broker group {broker_name!r} has no master or slave in the route")
        return address

    async def connection(self, broker_name: str) -> RemotingClient:
        return await self.pool.get(self.address(broker_name))

    async def request(
        self,
        broker_name: str,
        code: int,
        header: Mapping[str, Scalar] | None = None,
        body: bytes | None = None,
        timeout: float = 5.0,
    ) -> Frame:
        """Any answer; connection failures raise the remoting errors, no master NoRouteError."""
        conn = await self.connection(broker_name)
        return await conn.request(code, header, body, timeout)

    async def call(
        self,
        broker_name: str,
        code: int,
        header: Mapping[str, Scalar] | None = None,
        body: bytes | None = None,
        timeout: float = 5.0,
    ) -> Frame:
        """Like :meth:`request`, but a non-success answer raises :class:`BrokerError`."""
        conn = await self.connection(broker_name)
        resp = await conn.request(code, header, body, timeout)
        if resp.code != ResponseCode.SUCCESS:
            raise BrokerError.of(resp, conn.address)
        return resp
