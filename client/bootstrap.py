"""Requests to "any of" the bootstrap addresses: controllers, or in development mode a lone broker.

The failover itself (try each address, follow CONTROLLER_NOT_LEADER to the leader, prefer the
address that answered last, repeat "not now" rounds) is :class:`remoting.failover.
AddressFailover`; :class:`Bootstrap` is that with the SDK's errors (:class:`BrokerError`,
:class:`UnreachableError`), so a caller catches :class:`~client.errors.ClientError` only.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping, Sequence
from typing import Self

from client.errors import BrokerError, UnreachableError
from protocol.remoting import Frame, Scalar
from protocol.request_auth import Credentials
from remoting import errors as remoting_errors
from remoting.client import DEFAULT_TIMEOUT, ConnectionPool
from remoting.failover import AddressFailover, describe_failure, parse_addresses

__all__ = ["Bootstrap", "BootstrapClient", "describe_failure", "parse_addresses"]


class Bootstrap(AddressFailover):
    """Sends requests to whichever bootstrap address answers, following the leader's address."""

    async def call(
        self,
        code: int,
        header: Mapping[str, Scalar] | None = None,
        body: bytes | None = None,
        timeout: float | None = None,
        *,
        deadline: float | None = None,
    ) -> Frame:
        """:meth:`AddressFailover.call`, raising :class:`BrokerError` for a definitive error
        answer (e.g. TOPIC_NOT_EXIST) and :class:`UnreachableError` when no address could serve
        the request."""
        try:
            return await super().call(code, header, body, timeout, deadline=deadline)
        except remoting_errors.ResponseError as exc:
            raise BrokerError(exc.code, exc.remark, exc.address) from None
        except remoting_errors.UnreachableError as exc:
            raise UnreachableError(exc.addresses, exc.reasons) from None


class BootstrapClient:
    """What the SDK's administrative clients (:class:`client.admin.Admin`,
    :class:`client.lookup.Lookup`, :class:`client.progress.ProgressAdmin`) share: one connection
    pool (signing with ``credentials`` when given, over TLS with ``tls``), the bootstrap addresses over it, and
    ``async with`` closing the pool."""

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        timeout: float = DEFAULT_TIMEOUT,
        credentials: Credentials | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.timeout = timeout
        self._pool = ConnectionPool(timeout, credentials, tls)
        self.bootstrap = Bootstrap(bootstrap, self._pool, timeout)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._pool.close()
