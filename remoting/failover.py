"""Requests to "any of" a list of addresses: the controllers, or in development mode a lone broker.

Addresses are tried in turn, starting with the one that answered last; any may be down. A
controller that is not the Raft leader answers CONTROLLER_NOT_LEADER (2007) with the leader's
address in header ``leaderAddress`` when it knows it: that address is tried next and preferred
afterwards.

Errors are remoting's: :class:`~remoting.errors.ResponseError` for a definitive error answer,
:class:`~remoting.errors.UnreachableError` when no address could serve the request. The client
SDK's :class:`~client.bootstrap.Bootstrap` is this with the SDK's errors; the broker uses it as
it is.
"""

from __future__ import annotations

import asyncio
import random
import socket
from collections.abc import Mapping, Sequence

from protocol.codes import ResponseCode
from protocol.controller_requests.base import NotLeader
from protocol.fields import FieldError
from protocol.remoting import Frame, ProtocolError, Scalar
from remoting.client import DEFAULT_TIMEOUT, ConnectionPool
from remoting.errors import (
    ConnectError,
    ConnectionClosedError,
    RequestTimeoutError,
    ResponseError,
    UnreachableError,
)

__all__ = ["NOT_NOW", "AddressFailover", "describe_failure", "parse_addresses"]

NOT_NOW = frozenset(
    {
        ResponseCode.SYSTEM_BUSY,
        ResponseCode.SERVICE_NOT_AVAILABLE,
        ResponseCode.CONTROLLER_NOT_LEADER,
        ResponseCode.TOO_MANY_IN_FLIGHT,
    }
)
"""Answers that say "this address cannot serve you now, another may" (or it may, later)."""


def parse_addresses(addresses: str | Sequence[str]) -> list[str]:
    """Split a ``;``-separated address list (or clean a sequence); order kept, duplicates dropped."""
    items = addresses.split(";") if isinstance(addresses, str) else list(addresses)
    return list(dict.fromkeys(a.strip() for a in items if a.strip()))


def describe_failure(exc: BaseException) -> str:
    """A short human reason for a connection-level failure ("connection refused", ...)."""
    cause: BaseException | None = exc
    if isinstance(exc, ConnectError) and exc.__cause__ is not None:
        cause = exc.__cause__
    if isinstance(cause, ConnectionRefusedError):
        return "connection refused"
    if isinstance(cause, TimeoutError | RequestTimeoutError):
        return "timed out"
    if isinstance(cause, socket.gaierror):
        return "unknown host"
    if isinstance(cause, ConnectionClosedError):
        inner = cause.__cause__
        if isinstance(inner, ProtocolError):
            return str(inner)  # "not an rmq server: ..." when its first bytes were no frame
        # Closed or reset (a close with our request unread): either way, no answer came.
        return "the peer closed the connection without answering"
    if isinstance(cause, OSError) and cause.strerror:
        return cause.strerror.lower()
    if isinstance(cause, ValueError):
        return str(cause)
    return str(cause) or type(cause).__name__


class AddressFailover:
    """Sends requests to whichever address answers, following the leader's address."""

    def __init__(
        self,
        addresses: str | Sequence[str],
        pool: ConnectionPool | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        *,
        busy_rounds: int = 4,
        busy_delay: float = 0.25,
        busy_delay_max: float = 2.0,
    ) -> None:
        self.addresses = parse_addresses(addresses)
        if not self.addresses:
            raise ValueError("no bootstrap address given")
        self._owns_pool = pool is None
        self.pool = pool if pool is not None else ConnectionPool(timeout)
        self.timeout = timeout
        self.busy_rounds = busy_rounds
        self.busy_delay = busy_delay
        self.busy_delay_max = busy_delay_max
        self._preferred: str | None = None

    async def call(
        self,
        code: int,
        header: Mapping[str, Scalar] | None = None,
        body: bytes | None = None,
        timeout: float | None = None,
        *,
        deadline: float | None = None,
    ) -> Frame:
        """Send the request until one address answers SUCCESS.

        ``timeout`` bounds each request to one address; ``deadline`` (the event loop's time), when
        given, the whole call: no request waits past it and no round starts after it. Without
        it a call may take ``busy_rounds`` times as many timeouts as there are addresses (with
        two of three controllers frozen, 4 rounds of two 10 s timeouts: 80 s).

        When every address that answered said "not now" (not the leader with no leader known,
        SYSTEM_BUSY from a controller shedding load), the round is repeated up to
        ``busy_rounds`` times after a back-off: ``busy_delay`` doubled per round up to
        ``busy_delay_max``, each drawn between half and all of it (jitter, so that clients shed
        together do not come back together); a Raft election takes a few hundred ms.
        Addresses that refuse connections fail at once.

        Raises :class:`ResponseError` for a definitive error answer (e.g. TOPIC_NOT_EXIST) and
        :class:`UnreachableError` when no address could serve the request.
        """
        timeout = self.timeout if timeout is None else timeout
        loop = asyncio.get_running_loop()
        told: tuple[list[str], list[ResponseError], bool] | None = None
        for round_no in range(self.busy_rounds):
            result = await self._round(code, header, body, timeout, deadline)
            if isinstance(result, Frame):
                return result
            if told is None or len(result[0]) >= len(told[0]):
                told = result  # a round the deadline cut short tells less than a whole one
            if not result[1] or round_no + 1 == self.busy_rounds:
                break
            pause = self.backoff(round_no)
            if deadline is not None and loop.time() + pause >= deadline:
                break
            await asyncio.sleep(pause)
        if told is None:  # busy_rounds < 1: nothing was asked
            raise UnreachableError(self.addresses, [], answered=False)
        reasons, errors, answered = told
        if errors and len(reasons) == 1:
            raise errors[-1]
        own = [e for e in errors if e.code != ResponseCode.CONTROLLER_NOT_LEADER]
        if answered and len(own) == 1:
            # Every address answered, all but one only "not the leader, ask X": X's own
            # "not now" (a controller shedding load, a placement that must wait) is the answer.
            raise own[0]
        raise UnreachableError(self.addresses, reasons, answered=answered)

    def backoff(self, round_no: int) -> float:
        """Seconds to wait after the ``round_no``-th (from 0) round of "not now" answers."""
        ceiling = min(self.busy_delay_max, self.busy_delay * 2**round_no)
        return random.uniform(ceiling / 2, ceiling)

    async def _round(
        self,
        code: int,
        header: Mapping[str, Scalar] | None,
        body: bytes | None,
        timeout: float,
        deadline: float | None = None,
    ) -> Frame | tuple[list[str], list[ResponseError], bool]:
        """Try every address once (those left when ``deadline`` passes are not asked): the
        SUCCESS frame, else (reasons, the "not now" answers, whether every address tried
        answered)."""
        loop = asyncio.get_running_loop()
        order = list(self.addresses)
        if self._preferred is not None:
            # The last address that answered goes first (it may be a leader not in the list).
            order = [self._preferred, *(a for a in order if a != self._preferred)]
        tried: set[str] = set()
        reasons: list[str] = []
        unreachable: dict[str, str] = {}  # address -> why it could not be asked
        errors: list[ResponseError] = []
        answered = True
        while order:
            address = order.pop(0)
            if address in tried:
                continue
            wait = timeout
            if deadline is not None:
                wait = min(timeout, deadline - loop.time())
                if wait <= 0 and tried:
                    answered = False
                    break
            tried.add(address)
            try:
                conn = await self.pool.get(address)
                resp = await conn.request(code, header, body, max(wait, 0.001))
            except (ConnectError, ConnectionClosedError, RequestTimeoutError, ValueError) as exc:
                # The connection is left alone: it may be shared with sends in flight (a lone
                # broker is both bootstrap and broker), and the pool replaces it once closed.
                unreachable[address] = describe_failure(exc)
                reasons.append(address)  # replaced by its reason below
                answered = False
                if self._preferred == address:
                    self._preferred = None
                continue
            if resp.code == ResponseCode.SUCCESS:
                self._preferred = address
                return resp
            error = ResponseError.of(resp, address)
            if resp.code not in NOT_NOW:
                raise error
            errors.append(error)
            reasons.append(str(error))
            if resp.code == ResponseCode.CONTROLLER_NOT_LEADER:
                leader = _leader_named(resp)
                if leader is not None and leader not in tried:
                    order.insert(0, leader)
        # One reason for every address that could not be asked: said once. Several: each with
        # its address (answers name theirs already).
        named = len(set(unreachable.values())) > 1 or len(unreachable) < len(reasons)
        reasons = [
            (f"{r}: {unreachable[r]}" if named else unreachable[r]) if r in unreachable else r
            for r in reasons
        ]
        return reasons, errors, answered and bool(reasons)

    def close(self) -> None:
        """Close the connections, when the pool is ours (not shared with a producer/consumer)."""
        if self._owns_pool:
            self.pool.close()


def _leader_named(answer: Frame) -> str | None:
    """The leader a follower's CONTROLLER_NOT_LEADER names (:class:`NotLeader`); None when it
    names none, or none that is text (then the next address is tried, as for none)."""
    try:
        return NotLeader.parse(answer.header, answer.body).leader_address
    except FieldError:
        return None
