"""The proposal budget of load shedding (issue 17, item 4): pure bookkeeping."""

from __future__ import annotations

import pytest

from controller.metrics import ControllerMetrics
from controller.service.admission import ProposalBudget
from controller.service.requests import Refused
from protocol.codes import ResponseCode


def test_past_the_count_a_write_is_refused_busy_and_counted() -> None:
    metrics = ControllerMetrics()
    budget = ProposalBudget(max_count=2, max_bytes=1 << 20, metrics=metrics)
    budget.acquire(10)
    budget.acquire(10)
    assert budget.full
    with pytest.raises(Refused) as refused:
        budget.acquire(10)
    assert refused.value.code == ResponseCode.SYSTEM_BUSY
    assert "2 proposals" in refused.value.remark
    assert metrics.proposals_shed._value.get() == 1
    assert metrics.proposals_in_flight._value.get() == 2
    budget.release(10)
    budget.acquire(10)  # room again
    assert (budget.count, budget.bytes) == (2, 20)


def test_past_the_bytes_a_write_is_refused_but_one_large_write_passes_alone() -> None:
    budget = ProposalBudget(max_count=100, max_bytes=1000)
    budget.acquire(5000)  # alone: admitted, or it could never pass
    with pytest.raises(Refused):
        budget.acquire(1)
    budget.release(5000)
    budget.acquire(600)
    with pytest.raises(Refused):
        budget.acquire(600)
    budget.acquire(400)
    assert (budget.count, budget.bytes) == (2, 1000)


def test_the_controllers_own_decisions_are_never_shed() -> None:
    budget = ProposalBudget(max_count=1, max_bytes=1000)
    budget.acquire(10)
    budget.acquire(10, shed=False)
    assert budget.count == 2
