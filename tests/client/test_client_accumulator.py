"""The adaptive batching core (client/accumulator.py): what leaves now, what waits, and when."""

from __future__ import annotations

import pytest

from client.accumulator import Accumulator


def acc(
    max_count: int = 100, max_bytes: int = 10_000, max_in_flight: int = 1, linger: bool = False
) -> Accumulator[str]:
    return Accumulator(max_count, max_bytes, max_in_flight=max_in_flight, linger=linger)


def test_a_send_to_an_idle_group_leaves_alone_at_once() -> None:
    a = acc()
    assert a.add("m1", 10) == [["m1"]]
    assert a.in_flight == 1


def test_sends_made_while_one_is_in_flight_leave_together_when_it_returns() -> None:
    a = acc()
    a.add("m1", 10)
    assert a.add("m2", 10) == []
    assert a.add("m3", 10) == []
    assert a.done(1) is True  # gathered meanwhile: a drain is due
    assert a.drain() == [["m2", "m3"]]
    assert a.in_flight == 1


def test_try_alone_takes_a_free_slot_only_when_nothing_waits() -> None:
    a = acc(max_in_flight=2)
    assert a.try_alone() and a.try_alone()
    assert not a.try_alone()  # both slots taken
    assert a.add("m1", 10) == []
    a.done(1)
    assert not a.try_alone()  # m1 waits for the drain: a new send joins it
    assert a.drain() == [["m1"]]
    assert not acc(linger=True).try_alone()


def test_a_lone_sender_is_never_held() -> None:
    a = acc()
    for i in range(5):
        assert a.add(f"m{i}", 10) == [[f"m{i}"]]
        assert a.done(1) is False  # nothing gathered, one sender woken: no drain
    assert a.idle


def test_senders_woken_by_a_batch_gather_before_the_drain() -> None:
    a = acc()
    a.add("m1", 10)
    a.add("m2", 10)
    a.add("m3", 10)
    a.done(1)
    assert a.drain() == [["m2", "m3"]]
    assert a.done(2) is True  # two senders woken: their next sends gather
    assert a.add("m4", 10) == []
    assert a.add("m5", 10) == []
    assert a.drain() == [["m4", "m5"]]


def test_a_full_count_leaves_at_once_whatever_is_in_flight() -> None:
    a = acc(max_count=3)
    a.add("m0", 10)
    assert a.add("m1", 10) == []
    assert a.add("m2", 10) == []
    assert a.add("m3", 10) == [["m1", "m2", "m3"]]
    assert a.in_flight == 2
    assert a.pending == []


def test_a_batch_never_exceeds_max_bytes() -> None:
    a = acc(max_bytes=100)
    a.add("m0", 10)
    assert a.add("m1", 60) == []
    assert a.add("m2", 60) == [["m1"]]  # m2 would overflow: m1 leaves, m2 starts the next
    assert a.pending == ["m2"]
    assert a.add("m3", 40) == [["m2", "m3"]]  # exactly full


def test_a_message_of_max_bytes_or_more_leaves_alone_even_while_others_gather() -> None:
    a = acc(max_bytes=100)
    a.add("m0", 10)
    a.add("m1", 10)
    assert a.add("big", 100) == [["big"]]
    assert a.pending == ["m1"]
    assert a.in_flight == 2


def test_up_to_max_in_flight_sends_leave_alone_before_gathering_starts() -> None:
    a = acc(max_in_flight=2)
    assert a.add("m1", 10) == [["m1"]]
    assert a.add("m2", 10) == [["m2"]]
    assert a.add("m3", 10) == []
    assert a.done(1) is True
    assert a.drain() == [["m3"]]


def test_a_drain_with_every_slot_taken_leaves_the_rest_for_the_next_answer() -> None:
    a = acc(max_count=2)
    a.add("m0", 10)  # in flight (not full)
    a.add("m1", 10)
    a.add("m2", 10)  # full: in flight too, 2 in all
    a.add("m3", 10)
    assert a.done(2) is True  # m1, m2 answered; m0 still in flight
    assert a.drain() == []  # the one slot for a partial batch is m0's
    assert a.pending == ["m3"]
    assert a.done(1) is True
    assert a.drain() == [["m3"]]


def test_linger_holds_the_first_send_until_the_drain() -> None:
    a = acc(linger=True)
    assert a.add("m1", 10) == []
    assert a.needs_linger
    a.hold()
    assert not a.needs_linger  # armed once
    assert a.add("m2", 10) == []
    assert a.drain() == [["m1", "m2"]]
    assert not a.needs_linger


def test_linger_ends_early_when_the_batch_fills() -> None:
    a = acc(max_count=2, linger=True)
    a.add("m1", 10)
    a.hold()
    assert a.add("m2", 10) == [["m1", "m2"]]
    assert a.drain() == []  # the linger's drain finds nothing left


@pytest.mark.parametrize(("count", "nbytes", "flight"), [(0, 1, 1), (1, 0, 1), (1, 1, 0)])
def test_limits_below_one_are_refused(count: int, nbytes: int, flight: int) -> None:
    with pytest.raises(ValueError):
        Accumulator[str](count, nbytes, max_in_flight=flight)
