"""Requests to "any of" the bootstrap addresses: controllers, or in development mode a lone broker.

The failover itself (try each address, follow CONTROLLER_NOT_LEADER to the leader, prefer the
address that answered last, repeat "not now" rounds) is :class:`remoting.failover.
AddressFailover`; :class:`Bootstrap` is that with the SDK's errors (:class:`BrokerError`,
:class:`UnreachableError`), so a caller catches :class:`~client.errors.ClientError` only.
"""

from __future__ import annotations

from collections.abc import Mapping

from client.errors import BrokerError, UnreachableError
from protocol.remoting import Frame, Scalar
from remoting import errors as remoting_errors
from remoting.failover import AddressFailover, describe_failure, parse_addresses

__all__ = ["Bootstrap", "describe_failure", "parse_addresses"]


class Bootstrap(AddressFailover):
    """Sends requests to whichever bootstrap address answers, following the leader's address."""

    async def call(
        self,
        code: int,
        header: Mapping[str, Scalar] | None = None,
        body: bytes | None = None,
        timeout: float | None = None,
    ) -> Frame:
        """:meth:`AddressFailover.call`, raising :class:`BrokerError` for a definitive error
        answer (e.g. TOPIC_NOT_EXIST) and :class:`UnreachableError` when no address could serve
        the request."""
        try:
            return await super().call(code, header, body, timeout)
        except remoting_errors.ResponseError as exc:
            raise BrokerError(exc.code, exc.remark, exc.address) from None
        except remoting_errors.UnreachableError as exc:
            raise UnreachableError(exc.addresses, exc.reasons) from None
