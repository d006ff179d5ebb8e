"""Decision.settle: the answer once a decision's events were applied in order."""

from __future__ import annotations

import pytest

from controller.metadata import Applied, ApplyBrokerId, Decision
from protocol.codes import ResponseCode as RC


def two_events() -> Decision[str]:
    events = tuple(
        ApplyBrokerId(cluster="c", broker_name="g", broker_id=i, register_code=f"code-{i}")
        for i in (1, 2)
    )
    return Decision(events=events, response="both")


def test_every_event_applied_answers_the_decision() -> None:
    settled = two_events().settle([Applied(), Applied()])
    assert settled.ok and settled.response == "both" and settled.events == ()


def test_outcomes_may_stop_at_the_first_rejection() -> None:
    rejected = Applied(code=RC.CONTROLLER_BROKER_ID_INVALID, remark="taken")
    for outcomes in ([rejected], [Applied(), rejected]):
        settled = two_events().settle(outcomes)
        assert settled.code == RC.CONTROLLER_BROKER_ID_INVALID
        assert settled.remark == "taken"
        assert settled.response is None


@pytest.mark.parametrize("count", [0, 1, 3])
def test_every_event_needs_an_outcome_unless_one_was_rejected(count: int) -> None:
    with pytest.raises(ValueError):
        two_events().settle([Applied()] * count)
