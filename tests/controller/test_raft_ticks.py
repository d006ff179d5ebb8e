"""The Raft driver's tick schedule (controller/raft_ticks.py): which ticks fall due when the
ticker wakes, how a stall is counted, how ticks interleave with messages, and the lease in time.
Times are passed in; the interval and times are binary fractions, so the arithmetic is exact."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from controller.raft_ticks import LATE_TICK_S, LEASE_DRIFT_MARGIN, TickSchedule

INTERVAL = 0.125


class Node:
    """What a RaftNode is fed: ("tick",) or ("stall", n) for tick_after_stall(n)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def tick(self) -> None:
        self.calls.append(("tick", 1))

    def tick_after_stall(self, ticks: int) -> None:
        self.calls.append(("stall", ticks))

    def elapsed(self) -> int:
        """Ticks of time the node saw: a stall of n is n ticks, then one ordinary tick."""
        return sum(n + 1 if kind == "stall" else 1 for kind, n in self.calls)


def test_a_tick_on_time_is_one_tick_and_the_next_falls_due_an_interval_later() -> None:
    ticks, node = TickSchedule(INTERVAL, 10.0), Node()
    assert ticks.wake_at == 10.125
    assert ticks.fell_due(10.125) == 0.0
    assert ticks.wake_at == 10.25
    ticks.feed(node, None)
    assert node.calls == [("tick", 1)]
    assert ticks.last_due == 10.125


def test_ticks_a_busy_loop_missed_are_all_fed_as_ticks_when_not_a_stall() -> None:
    ticks, node = TickSchedule(INTERVAL, 0.0), Node()
    late = ticks.fell_due(0.125 + 0.1875)  # 1.5 intervals late, under LATE_TICK_S
    assert late == 0.1875 < LATE_TICK_S
    ticks.feed(node, None)
    assert node.calls == [("tick", 1), ("tick", 1)]
    assert ticks.last_due == 0.25
    assert ticks.wake_at == 0.375


def test_a_wake_up_past_late_tick_s_feeds_the_missed_ticks_as_one_stall() -> None:
    ticks, node = TickSchedule(INTERVAL, 0.0), Node()
    late = ticks.fell_due(1.0)  # due at 0.125 .. 1.0: eight ticks, seven missed
    assert late == 0.875 > LATE_TICK_S
    ticks.feed(node, None)
    assert node.calls == [("stall", 7)]
    assert node.elapsed() == 8
    assert ticks.last_due == 1.0  # the latest falls due when the process ran again
    assert ticks.wake_at == 1.125


def test_ticks_are_fed_before_a_message_only_up_to_its_arrival() -> None:
    ticks, node = TickSchedule(INTERVAL, 0.0), Node()
    ticks.fell_due(0.125)
    ticks.fell_due(0.25)
    ticks.fell_due(0.375)
    ticks.feed(node, 0.25)  # a message arrived at 0.25: the ticks due by then go first
    assert node.calls == [("tick", 1), ("tick", 1)]
    assert ticks.last_due == 0.25
    ticks.feed(node, 0.3)
    assert len(node.calls) == 2
    ticks.feed(node, None)
    assert len(node.calls) == 3
    assert ticks.last_due == 0.375
    ticks.feed(node, None)  # nothing more due
    assert len(node.calls) == 3


def test_the_lease_ends_counted_from_the_latest_tick_fed_less_the_drift_margin() -> None:
    ticks, node = TickSchedule(INTERVAL, 0.0), Node()
    assert ticks.lease_end(4, 8) == 4 * INTERVAL - 8 * INTERVAL * LEASE_DRIFT_MARGIN
    ticks.fell_due(0.125)
    ticks.fell_due(0.25)
    # Ticks fallen due but not fed do not extend the lease: it counts from the last fed.
    assert ticks.lease_end(4, 8) == 4 * INTERVAL - 8 * INTERVAL * LEASE_DRIFT_MARGIN
    ticks.feed(node, None)
    assert ticks.lease_end(4, 8) == 0.25 + 4 * INTERVAL - 8 * INTERVAL * LEASE_DRIFT_MARGIN


@given(
    st.lists(st.integers(min_value=0, max_value=512), min_size=1, max_size=40),
    st.lists(st.booleans(), min_size=40, max_size=40),
)
def test_no_tick_is_lost_or_counted_twice_whatever_the_wake_ups(
    delays: list[int], feed_after: list[bool]
) -> None:
    """Each wake-up comes ``delay`` 1/256 s after the tick it waited for fell due; fed at any
    points, the node has seen exactly the ticks that fell due by the last wake-up. The lease
    counts from the latest of them when every wake-up was fed before the next, and never from
    later: a stall counted while earlier ticks wait unfed is fed first, and the time of the
    tick after it is then taken as the time of those earlier ones (a shorter lease)."""
    ticks, node = TickSchedule(INTERVAL, 0.0), Node()
    now = 0.0
    fed_each = True
    for delay, feed in zip(delays, feed_after, strict=False):
        now = ticks.wake_at + delay / 256
        ticks.fell_due(now)
        if feed:
            ticks.feed(node, None)
        else:
            fed_each = False
        assert ticks.wake_at > now
    ticks.feed(node, None)
    latest = int(now // INTERVAL)
    assert node.elapsed() == latest
    assert ticks.last_due <= latest * INTERVAL
    if fed_each or len(delays) == 1:
        assert ticks.last_due == latest * INTERVAL
