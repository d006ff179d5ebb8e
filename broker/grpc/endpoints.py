"""The gRPC endpoints of the brokers a route names, for QueryRoute's answers.

A route (the controllers' GET_ROUTEINFO_BY_TOPIC) names brokers by their remoting addresses;
the clients need their gRPC endpoints, plaintext or TLS as the client connected. Each broker
tells its own in GET_BROKER_RUNTIME_INFO (``grpcEndpoint``, ``grpcTlsEndpoint``); this book
asks once per broker and keeps the answer for :data:`KEEP_S`, and keeps an older answer while a
broker does not answer (a dead master stays listed until the controllers drop it: the clients
skip an endpoint that refuses connections).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import structlog

from protocol.broker_requests.runtime import RuntimeInfo, RuntimeInfoQuery
from protocol.remoting import Frame
from remoting.client import ConnectionPool
from remoting.errors import RemotingError

log = structlog.get_logger(__name__)

KEEP_S: Final = 30.0
"""How long a broker's answer is used before it is asked again."""
ASK_TIMEOUT_S: Final = 1.0
RETRY_S: Final = 5.0
"""A broker that did not answer and was not known before is asked again after this long."""

_WILDCARDS: Final = frozenset({"", "0.0.0.0", "::", "[::]"})

ONE_ADDRESS_LANGUAGES: Final = frozenset({"HTTP"})
"""``x-mq-language`` of the clients that reach only one address per ``Endpoints``: the Node.js
client (rocketmq-client-nodejs) says ``HTTP`` and dials the addresses joined by commas as one
gRPC target, which grpc-js cannot resolve, so a route listing a group's brokers stalls it."""


@dataclass(frozen=True, slots=True)
class BrokerEndpoints:
    plain: tuple[str, int] | None
    tls: tuple[str, int] | None
    at: float


def _endpoint(value: object, remoting_address: str) -> tuple[str, int] | None:
    """``host:port`` from a runtime info answer; a wildcard host is the broker's remoting
    host (the address the controllers know it by)."""
    if not isinstance(value, str) or not value:
        return None
    host, _, port = value.rpartition(":")
    if host in _WILDCARDS:
        host = remoting_address.rpartition(":")[0]
    try:
        return host, int(port)
    except ValueError:
        return None


class EndpointBook:
    def __init__(self, pool: ConnectionPool, own_address: str) -> None:
        self.pool = pool
        self.own_address = own_address
        self.own = BrokerEndpoints(None, None, float("inf"))
        """This broker's own: set by the endpoint once it listens, never asked."""
        self._known: dict[str, BrokerEndpoints] = {}

    def set_own(self, plain: tuple[str, int] | None, tls: tuple[str, int] | None) -> None:
        def own(at: tuple[str, int] | None) -> tuple[str, int] | None:
            return None if at is None else _endpoint(f"{at[0]}:{at[1]}", self.own_address)

        self.own = BrokerEndpoints(own(plain), own(tls), float("inf"))

    async def group(self, members: Sequence[str], tls: bool) -> list[tuple[str, int]]:
        """The gRPC endpoints of a broker group's members (remoting addresses, master first),
        in that order; members without one are left out."""
        found = await asyncio.gather(*(self._of(a) for a in members))
        out: list[tuple[str, int]] = []
        for known in found:
            at = known.tls if tls else known.plain
            if at is not None and at not in out:
                out.append(at)
        return out

    def one_of(self, group: Sequence[tuple[str, int]], tls: bool) -> list[tuple[str, int]]:
        """One endpoint of a group's (:meth:`group`), for a client that takes one: this broker's
        own when it is a member (the client reached it, and it forwards to whichever master the
        group has, so the client rides through the group's failovers), else the first (the
        master's)."""
        own = self.own.tls if tls else self.own.plain
        if own is not None and own in group:
            return [own]
        return list(group[:1])

    async def _of(self, address: str) -> BrokerEndpoints:
        if address == self.own_address:
            return self.own
        known = self._known.get(address)
        now = time.monotonic()
        if known is not None and now - known.at < KEEP_S:
            return known
        try:
            async with asyncio.timeout(ASK_TIMEOUT_S):
                resp = await self._ask(address)
            info = RuntimeInfo.parse(resp.header, resp.body)
            fresh = BrokerEndpoints(
                _endpoint(info.grpc_endpoint, address),
                _endpoint(info.grpc_tls_endpoint, address),
                now,
            )
        except (RemotingError, TimeoutError, ValueError, TypeError, AttributeError) as exc:
            if isinstance(exc, RemotingError | TimeoutError):
                self.pool.drop(address)
            else:
                log.warning("malformed runtime info", address=address, error=str(exc))
            if known is None:  # not known: none, and not asked again for RETRY_S
                known = self._known[address] = BrokerEndpoints(None, None, now - KEEP_S + RETRY_S)
            return known
        self._known[address] = fresh
        return fresh

    async def _ask(self, address: str) -> Frame:
        conn = await self.pool.get(address)
        ask = RuntimeInfoQuery()
        return await conn.call(ask.code, *ask.encode(), timeout=ASK_TIMEOUT_S)
