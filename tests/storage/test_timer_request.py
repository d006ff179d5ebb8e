"""Which delivery time a message's properties ask for, and the refusals."""

from __future__ import annotations

import pytest

from protocol.timer import (
    PROP_START_DELIVER_TIME,
    PROP_TIMER_DELAY_MS,
    PROP_TIMER_DELAY_SEC,
    PROP_TIMER_DELIVER_MS,
)
from storage.timer.request import requested_delivery_ms
from storage.timer.wheel import InvalidDeliveryTimeError

NOW = 1_700_000_000_000


@pytest.mark.parametrize(
    ("properties", "expected"),
    [
        ({}, None),
        ({"KEYS": "k"}, None),
        ({PROP_TIMER_DELIVER_MS: str(NOW + 5)}, NOW + 5),
        ({PROP_START_DELIVER_TIME: "12"}, 12),  # in the past: the wheel delivers it at once
        ({PROP_TIMER_DELAY_MS: "1500"}, NOW + 1500),
        ({PROP_TIMER_DELAY_SEC: "30"}, NOW + 30_000),
        ({PROP_TIMER_DELAY_MS: "0"}, NOW),
        ({PROP_TIMER_DELIVER_MS: "7", PROP_TIMER_DELAY_SEC: "30"}, 7),
        ({PROP_TIMER_DELAY_MS: "5", PROP_TIMER_DELAY_SEC: "30"}, NOW + 5),
    ],
)
def test_requested_time(properties: dict[str, str], expected: int | None) -> None:
    assert requested_delivery_ms(properties, NOW) == expected


@pytest.mark.parametrize(
    ("properties", "message"),
    [
        ({PROP_TIMER_DELAY_SEC: "-1"}, "TIMER_DELAY_SEC=-1 is negative"),
        ({PROP_TIMER_DELAY_MS: "-30000"}, "TIMER_DELAY_MS=-30000 is negative"),
        ({PROP_TIMER_DELIVER_MS: "-5"}, "TIMER_DELIVER_MS=-5 is negative"),
        ({PROP_TIMER_DELIVER_MS: "soon"}, "TIMER_DELIVER_MS='soon' is not an integer"),
        ({PROP_TIMER_DELAY_SEC: "1.5"}, "is not an integer"),
    ],
)
def test_bad_values_are_refused_with_their_name(properties: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidDeliveryTimeError, match=message.replace("(", r"\(")):
        requested_delivery_ms(properties, NOW)
