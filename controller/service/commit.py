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
        """Commit the decision's events and answer it once they are applied.

        Each event is its own Raft entry, proposed in order once the one before it applied: an
        event rejected when applied ends the decision (the events after it were decided as
        following it, so they are never proposed) and its rejection is the answer.
        """
        outcomes: list[Applied] = []
        for event in decision.events:
            outcome = await self._commit(encode_event(event))
            outcomes.append(outcome)
            if not outcome.ok:
                break
        return decision.settle(outcomes)

    async def _commit(self, data: bytes) -> Applied:
        """Append one entry and wait until it is applied; its outcome."""
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
        return outcome
