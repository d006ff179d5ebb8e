"""A slave's endpoint through a failover of its group's master: wait for the next master.

A write the endpoint of a slave takes goes to the group's master (:mod:`broker.grpc.produce`,
:mod:`broker.grpc.consume`). When the master has just died, the forward fails at once
(connection refused) while the controllers have not yet elected the next one (that takes the
broker heartbeat timeout and an election: about a second). Answering the client then makes it
spend its few attempts within milliseconds (the official clients resend at once) and fail.

So a request that could not reach the master waits, within a bound, for the group's next master
as this broker learns it from the controllers (its role, which the ReplicasManager swaps): when
this broker becomes the master it serves the request itself, in-process; when another broker
does, the request goes there. Only a request that did not leave is sent again
(:attr:`broker.grpc.translate.Unreached.sent` False: the connection was refused or closed before
the request was written), and one the master refused without doing anything (NOT_MASTER,
MASTER_FENCED: asked again every :data:`RETRY_REFUSED_S` until the role names another master,
for a newly elected master refuses writes until it has taken the role). A request that may have reached the master (its connection closed, or it timed
out, after it was written) may have been done: it is not sent again behind the client's back;
the endpoint still waits for the next master (so that the client's own retry, which it can see,
finds one) and then answers ``PROXY_TIMEOUT`` (what RocketMQ's proxy answers when its request to
the broker got no answer): not known whether it was done. An end of transaction is the exception
(``repeatable``): it is sent to the next master even then, because ending a transaction twice
the same way does what ending it once does (the second finds it resolved and writes nothing; the
op record is written before the committed copy, so a master that holds the copy holds the op
too, and a new master appends the copy of a last commit op whose copy a failover cut off), and
the official clients do not resend an EndTransaction. A request that found no master within its
bound answers ``HA_NOT_AVAILABLE``: nothing was done.

The bound: what is left of the call's gRPC deadline (4/5 of it, so the answer leaves before the
client gives up), at most :data:`WAIT_BOUND_S`. The role is read every :data:`POLL_S` while
waiting (only while a request waits).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, TypeVar

from broker.grpc.translate import Refused, Unreached
from protocol.codes import ResponseCode
from protocol.rocketmq_v2 import definition_pb2 as pb

__all__ = ["WAIT_BOUND_S", "Master", "MasterWatch", "NotDone", "at_master", "is_next"]

WAIT_BOUND_S: Final = 5.0
"""The longest a request waits for its group's next master."""
POLL_S: Final = 0.02
"""How often a waiting request reads the broker's role."""
_DEADLINE_SHARE: Final = 0.8
"""The share of the call's remaining gRPC deadline a request may wait."""
RETRY_REFUSED_S: Final = 0.1
"""How soon a request the master refused as not (yet) the master goes to it again when this
broker learns of no other: a newly elected master refuses writes until it has taken the role."""

#: The master's refusals that say it did nothing because it is not (or no longer) the master.
NOT_THE_MASTER: Final = frozenset({ResponseCode.NOT_MASTER, ResponseCode.MASTER_FENCED})

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Master:
    """The group's master as this broker knows it now."""

    address: str
    """Its remoting address ("" while none is known)."""
    epoch: int
    """The master epoch this broker last learned."""
    is_self: bool = False
    """This broker is the master."""


def is_next(tried: Master, now: Master) -> bool:
    """Whether ``now`` is a master other than ``tried`` (the one a request could not reach):
    this broker, another address, or the same address in a later epoch (re-elected)."""
    if now.is_self and not tried.is_self:
        return True
    if not now.address:
        return False
    return now.address != tried.address or now.epoch > tried.epoch


class NotDone(Exception):
    """A request that may be sent again to the next master: nothing was done with it."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class MasterWatch:
    """The group's master as the broker's role says, and the wait for the next one."""

    def __init__(
        self, master: Callable[[], Master], bound_s: float = WAIT_BOUND_S, poll_s: float = POLL_S
    ) -> None:
        self.master = master
        self.bound_s = bound_s
        self.poll_s = poll_s

    @classmethod
    def of_address(cls, master_address: Callable[[], str], local_address: str) -> MasterWatch:
        """A watch that knows only the master's address (no epoch)."""

        def master() -> Master:
            address = master_address()
            return Master(address, 0, address == local_address)

        return cls(master)

    def deadline(self, time_remaining: float | None) -> float:
        """The monotonic time until which a request whose gRPC call has ``time_remaining``
        seconds left (None: no deadline) may wait."""
        wait = self.bound_s
        if time_remaining is not None:
            wait = min(wait, max(0.0, time_remaining * _DEADLINE_SHARE))
        return time.monotonic() + wait

    async def next_master(self, tried: Master, deadline: float) -> Master | None:
        """The group's next master once this broker knows one (see :func:`is_next`), or None
        at ``deadline``."""
        while True:
            now = self.master()
            if is_next(tried, now):
                return now
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            await asyncio.sleep(min(self.poll_s, left))


async def at_master(
    watch: MasterWatch,
    deadline: float,
    remote: Callable[[str], Awaitable[T]],
    here: Callable[[], Awaitable[T]] | None,
    what: str,
    *,
    repeatable: bool = False,
) -> T:
    """``here()`` while this broker is the master (None: ``remote`` to its own address),
    else ``remote(address)`` at the master; through a failover as the module docstring says.
    ``remote`` raises :class:`broker.grpc.translate.Unreached` when it got no answer and
    :class:`NotDone` when the master refused having done nothing; both are handled here. Raises
    :class:`Refused`: HA_NOT_AVAILABLE when no master could be reached by ``deadline``,
    PROXY_TIMEOUT when the request may have been done. ``repeatable``: doing the request twice
    does what doing it once does (an end of transaction), so one that may have been done is
    sent to the next master too."""
    master = watch.master()
    maybe_done = ""  # why an earlier attempt may have been done
    while True:
        if master.is_self and here is not None:
            return await here()
        try:
            if not master.address:
                raise NotDone("the group has no master right now")
            return await remote(master.address)
        except NotDone as exc:
            # Nothing was done. The broker this one takes for the master may be about to take
            # the role (a newly elected master refuses writes until it has, and the other
            # slaves may learn of the election first): it is asked again shortly.
            why = exc.why
            again = min(deadline, time.monotonic() + RETRY_REFUSED_S)
            found = await watch.next_master(master, again)
            if found is None and time.monotonic() < deadline:
                found = watch.master()
            if found is not None:
                master = found
                continue
        except Unreached as exc:
            why = exc.message
            if exc.sent:
                maybe_done = why
        # Wait for the next master even after an attempt that may have been done: the client's
        # own retry (the same message id, the same handle) then finds one.
        found = await watch.next_master(master, deadline)
        if maybe_done and (found is None or not repeatable):
            raise Refused(
                pb.PROXY_TIMEOUT,
                f"{what}: the master went away after the request was written; it may have "
                f"been done ({maybe_done})",
            )
        if found is None:
            raise Refused(
                pb.HA_NOT_AVAILABLE,
                f"{what}: no master could be reached in time, nothing was done ({why})",
            )
        master = found
