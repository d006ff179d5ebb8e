"""One request from rmqctl to the controllers, and the msgpack body of its answer.

The request goes to whichever bootstrap address answers and follows CONTROLLER_NOT_LEADER
(2007) to the leader (:class:`client.bootstrap.Bootstrap`); each call opens and closes its own
connection pool, which signs with the credentials rmqctl was given.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgpack

from client.bootstrap import Bootstrap
from client.errors import ClientError
from protocol.controller_requests.groups import GetReplicaInfo, GroupMetadata, ReplicaEntry
from protocol.fields import FieldError
from protocol.remoting import Frame, Scalar
from remoting.client import ConnectionPool

TIMEOUT = 5.0


async def call_controllers(
    addresses: str,
    code: int,
    header: Mapping[str, Scalar] | None = None,
    body: bytes | None = None,
    timeout: float = TIMEOUT,
) -> Frame:
    """The answer of the controllers at ``addresses`` (the leader's, for a change)."""
    pool = ConnectionPool(timeout)
    try:
        return await Bootstrap(addresses, pool, timeout).call(code, header, body, timeout=timeout)
    finally:
        pool.close()


def answer_body(frame: Frame, what: str) -> Any:
    """The answer's msgpack body (an empty body reads as ``{}``); ``what`` names it in the error
    a malformed one raises."""
    try:
        return msgpack.unpackb(frame.body or b"\x80", raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise ClientError(f"malformed {what} answer: {type(exc).__name__}") from None


async def group_replicas(addresses: str, broker_name: str) -> tuple[ReplicaEntry, ...]:
    """The replicas the controllers have registered for broker group ``broker_name``."""
    ask = GetReplicaInfo(broker_name=broker_name)
    resp = await call_controllers(addresses, ask.code, *ask.encode())
    try:
        return GroupMetadata.parse(resp.header, resp.body).replicas
    except FieldError as exc:
        raise ClientError(f"malformed replica info answer: {exc}") from None
