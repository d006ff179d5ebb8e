"""Committing a decision: its events through the Raft log, its answer once they are applied."""

from __future__ import annotations

from typing import TypeVar

from controller.metadata import Applied, Decision, encode_event
from controller.raft import ProposalDropped
from controller.raft_driver import NotLeaderError, ProposalLost, RaftDriver
from controller.service.admission import ProposalBudget
from controller.service.gate import LeadershipGate
from controller.service.requests import Refused
from protocol.codes import ResponseCode

R = TypeVar("R")


class DecisionCommitter:
    def __init__(
        self,
        driver: RaftDriver,
        gate: LeadershipGate,
        timeout: float,
        budget: ProposalBudget | None = None,
    ) -> None:
        self.driver = driver
        self.gate = gate
        self.timeout = timeout
        self.budget = budget or ProposalBudget(max_count=1 << 30, max_bytes=1 << 62)

    async def settle(self, decision: Decision[R], *, shed: bool = True) -> Decision[R]:
        """Commit the decision's events and answer it once they are applied.

        Each event is its own Raft entry, proposed in order once the one before it applied: an
        event rejected when applied ends the decision (the events after it were decided as
        following it, so they are never proposed) and its rejection is the answer.

        Past the budget of decisions in flight the answer is SYSTEM_BUSY, before any event is
        proposed (:mod:`controller.service.admission`); ``shed=False`` (the controller's own
        elections) is admitted past it.
        """
        outcomes: list[Applied] = []
        if not decision.events:
            return decision.settle(outcomes)
        entries = [encode_event(event) for event in decision.events]
        size = sum(len(data) for data in entries)
        self.budget.acquire(size, shed=shed)
        try:
            for data in entries:
                outcome = await self._commit(data)
                outcomes.append(outcome)
                if not outcome.ok:
                    break
        finally:
            self.budget.release(size)
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
