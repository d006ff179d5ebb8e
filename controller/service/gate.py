"""The leadership gate: who may answer what.

Writes and liveness are the active controller's (a leader that has applied its term's first
entry); elsewhere they are refused with CONTROLLER_NOT_LEADER (2007) and ``leaderAddress`` when
the leader is known. Reads on the leader wait for a read-index barrier (none while it holds its
lease and has applied what it knows committed); a follower answers from what it has applied. A
broker heartbeat extends the broker's write lease, so only a leader whose lease a quorum
confirmed may answer it.
"""

from __future__ import annotations

import contextlib

from controller.raft import Role
from controller.raft_driver import NotLeaderError, RaftDriver
from controller.service.requests import Refused
from protocol.codes import ResponseCode
from protocol.controller_requests.base import NotLeader


class LeadershipGate:
    def __init__(self, driver: RaftDriver, timeout: float) -> None:
        self.driver = driver
        self.timeout = timeout

    def redirect(self) -> Refused:
        lead = self.driver.lead
        address = self.driver.leader_address
        if lead is not None and lead != self.driver.id and address:
            answer = NotLeader(leader_address=address)
            remark = f"{self.driver.id} is not the active controller; the leader is {lead}"
        else:
            answer = NotLeader()
            remark = f"{self.driver.id} is not the active controller; no leader known"
        header, _ = answer.encode()
        return Refused(ResponseCode.CONTROLLER_NOT_LEADER, remark, header)

    async def require_active(self) -> None:
        """Return on the active controller; a leader that has not applied its term's first
        entry yet is waited for briefly. Refused with 2007 elsewhere."""
        driver = self.driver
        if driver.active:
            return
        if driver.role is Role.LEADER:
            with contextlib.suppress(TimeoutError):
                await driver.wait_for(
                    lambda: driver.active or driver.role is not Role.LEADER, self.timeout
                )
            if driver.active:
                return
        raise self.redirect()

    def require_lease(self) -> None:
        """Return on a leader whose lease a quorum confirmed, never on one that merely believes
        it leads (a deposed leader just thawed from SIGSTOP still does). Refused with 2007."""
        driver = self.driver
        if driver.holds_lease():
            return
        if driver.role is Role.LEADER:
            raise Refused(
                ResponseCode.CONTROLLER_NOT_LEADER,
                f"{driver.id} holds no leader lease confirmed by a quorum; retry",
            )
        raise self.redirect()

    async def barrier(self) -> None:
        """Linearizable read on the leader: wait until applied state covers every write
        committed before now. A leader holding its lease that has applied all it knows
        committed is there already (``RaftDriver.lease_read``, a lease-based read): it
        returns at once, without a read-index round (issue 34: a round per route lookup cost a
        heartbeat round trip through both followers' loops, and the lookups' p99 was the
        followers' busiest moments)."""
        if self.driver.lease_read():
            return
        try:
            await self.driver.read_index(self.timeout)
        except (NotLeaderError, TimeoutError):
            raise Refused(
                ResponseCode.SYSTEM_BUSY, "read barrier not confirmed by a quorum; retry"
            ) from None

    async def read_view(self) -> None:
        """The leader serves reads after a read-index barrier; a follower from its state."""
        if self.driver.role is Role.LEADER:
            await self.require_active()
            await self.barrier()

    async def route_view(self) -> None:
        """Routes stay available without a quorum: on a barrier failure the leader answers from
        its applied state like a follower does."""
        if self.driver.active:
            with contextlib.suppress(Refused):
                await self.barrier()
