"""Committing a decision: its events through the Raft log, its answer once they are applied."""

from __future__ import annotations

from typing import TypeVar

from controller.metadata import Applied, Decision, encode_event
from controller.raft import ProposalDropped
from controller.raft_driver import NotLeaderError, ProposalLost, RaftDriver
from controller.service.gate import LeadershipGate
from controller.service.requests import Refused
from protocol.codes import ResponseCode

R = TypeVar("R")


class DecisionCommitter:
    def __init__(self, driver: RaftDriver, gate: LeadershipGate, timeout: float) -> None:
        self.driver = driver
        self.gate = gate
        self.timeout = timeout

    async def settle(self, decision: Decision[R]) -> Decision[R]:
        """Append the decision's event, wait until it is applied, and settle the decision."""
        if not decision.events:
            return decision
        data = encode_event(decision.events[0])
        try:
            outcome = await self.driver.propose(data, self.timeout)
        except NotLeaderError:
            raise self.gate.redirect() from None
        except (ProposalDropped, ProposalLost) as exc:
            raise Refused(ResponseCode.SYSTEM_BUSY, f"not committed: {exc}; retry") from None
        except TimeoutError:
            if not self.driver.active:
                raise self.gate.redirect() from None
            raise Refused(
                ResponseCode.SYSTEM_BUSY, "the Raft log did not commit in time; retry"
            ) from None
        assert isinstance(outcome, Applied)
        return decision.settle([outcome])
