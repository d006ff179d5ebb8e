"""OrderedLane (client/lane.py): one request in flight per lane, sends leave in order."""

from __future__ import annotations

import pytest

from client.lane import OrderedLane


def test_an_idle_lane_lets_a_send_go_alone_and_holds_the_next() -> None:
    lane: OrderedLane[int] = OrderedLane(10, 1000)
    assert lane.idle
    assert lane.add(1, 10) == [1]
    assert lane.add(2, 10) == [] and lane.add(3, 10) == []
    assert not lane.idle
    assert lane.done() == [2, 3]  # in the order added, together
    assert lane.add(4, 10) == []  # [2, 3] is in flight: 4 waits
    assert lane.done() == [4]
    assert lane.done() == []
    assert lane.idle


def test_never_two_requests_in_flight_even_when_full() -> None:
    lane: OrderedLane[int] = OrderedLane(3, 1000)
    lane.add(0, 1)
    for i in range(1, 8):
        assert lane.add(i, 1) == []  # a full batch waits too
    assert lane.done() == [1, 2, 3]
    assert lane.done() == [4, 5, 6]
    assert lane.done() == [7]
    assert lane.done() == []


def test_bytes_limit_cuts_requests_and_a_big_send_goes_alone() -> None:
    lane: OrderedLane[str] = OrderedLane(100, 100)
    lane.add("first", 10)
    lane.add("a", 40)
    lane.add("b", 40)
    lane.add("c", 40)
    lane.add("big", 500)
    lane.add("d", 10)
    assert lane.done() == ["a", "b"]
    assert lane.done() == ["c"]  # "big" would pass the limit: it starts the next request
    assert lane.done() == ["big"]
    assert lane.done() == ["d"]


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError):
        OrderedLane(0, 1)
    with pytest.raises(ValueError):
        OrderedLane(1, 0)
