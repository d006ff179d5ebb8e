"""OffsetWaiters (the sends parked until their flush or their replicas' acks) and the join of the
two waits (BothDone)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from broker.config import BrokerConfig
from broker.durable import BothDone
from broker.offset_waiters import OffsetWaiters, future_waiter
from protocol.codes import ResponseCode
from tests.support.wait import wait_until_async


class Calls:
    def __init__(self) -> None:
        self.calls: list[tuple[str, bool]] = []

    def cb(self, name: str) -> Callable[[bool], None]:
        return lambda ok: self.calls.append((name, ok))


async def test_release_calls_every_waiter_up_to_the_offset_in_offset_order() -> None:
    w = OffsetWaiters("test")
    c = Calls()
    for name, offset in (("c", 300), ("a", 100), ("b", 200), ("d", 400)):
        w.add(offset, 10.0, c.cb(name))
    assert len(w) == 4
    w.release(99)
    assert c.calls == []
    w.release(250)
    assert c.calls == [("a", True), ("b", True)]
    assert len(w) == 2
    w.release(250)  # nothing new
    w.release(1_000)
    assert c.calls == [("a", True), ("b", True), ("c", True), ("d", True)]
    assert len(w) == 0
    w.fail_all()  # nobody is called twice
    assert len(c.calls) == 4


@pytest.mark.parametrize("short_first", [True, False])
async def test_a_waiter_times_out_once_and_is_not_released_later(short_first: bool) -> None:
    """Also when a shorter timeout is added after a longer one: it still expires first."""
    w = OffsetWaiters("test")
    c = Calls()
    waiters = [(100, 0.02, "short"), (200, 5.0, "long")]
    for offset, timeout, name in waiters if short_first else waiters[::-1]:
        w.add(offset, timeout, c.cb(name))
    await wait_until_async(lambda: c.calls, "the short waiter to expire", 5)
    assert c.calls == [("short", False)]
    assert len(w) == 1
    w.release(1_000)
    assert c.calls == [("short", False), ("long", True)]


async def test_fail_all_answers_everybody_false() -> None:
    w = OffsetWaiters("test")
    c = Calls()
    w.add(100, 5.0, c.cb("a"))
    w.add(200, 5.0, c.cb("b"))
    w.release(100)
    w.fail_all()
    assert c.calls == [("a", True), ("b", False)]
    assert len(w) == 0
    w.add(300, 0.01, c.cb("c"))  # usable again afterwards
    await wait_until_async(lambda: len(c.calls) == 3, "the third waiter to expire", 5)
    assert c.calls[-1] == ("c", False)


async def test_a_failing_callback_does_not_strand_the_others() -> None:
    w = OffsetWaiters("test")
    c = Calls()

    def boom(ok: bool) -> None:
        raise RuntimeError("boom")

    w.add(100, 5.0, boom)
    w.add(200, 5.0, c.cb("b"))
    w.release(200)
    assert c.calls == [("b", True)]
    assert len(w) == 0


async def test_a_callback_may_add_a_waiter_during_release() -> None:
    w = OffsetWaiters("test")
    c = Calls()

    def chain(ok: bool) -> None:
        c.calls.append(("first", ok))
        w.add(150, 5.0, c.cb("inner-reached"))
        w.add(500, 5.0, c.cb("inner-later"))

    w.add(100, 5.0, chain)
    w.release(200)
    assert c.calls == [("first", True), ("inner-reached", True)]
    assert len(w) == 1


async def test_expired_waiters_do_not_pile_up() -> None:
    w = OffsetWaiters("test")
    c = Calls()
    for i in range(2_000):  # the replicas never get there: all expire
        w.add(10_000 + i, 0.01, c.cb("x"))
    await wait_until_async(lambda: len(c.calls) == 2_000, "every waiter to expire", 5)
    assert len(w) == 0
    assert len(c.calls) == 2_000 and not any(ok for _, ok in c.calls)
    assert len(w._by_offset) < 100  # compacted, not 2000 dead entries
    w.add(5, 5.0, c.cb("y"))
    w.release(5)
    assert c.calls[-1] == ("y", True)


async def test_future_waiter() -> None:
    w = OffsetWaiters("test")
    fut = future_waiter(lambda done: w.add(100, 5.0, done))
    assert not fut.done()
    w.release(100)
    assert await fut is True
    assert await future_waiter(lambda done: w.add(100, 0.01, done)) is False
    assert await future_waiter(lambda done: done(True)) is True


def test_both_done_answers_once_both_ended_and_a_flush_timeout_first() -> None:
    cfg = BrokerConfig()
    for flushed, replicated, expected in (
        (True, True, ResponseCode.SUCCESS),
        (False, True, ResponseCode.FLUSH_DISK_TIMEOUT),
        (True, False, ResponseCode.FLUSH_SLAVE_TIMEOUT),
        (False, False, ResponseCode.FLUSH_DISK_TIMEOUT),
    ):
        for flush_first in (True, False):
            got: list[tuple[int, str]] = []
            both = BothDone(cfg, lambda code, remark, got=got: got.append((code, remark)))
            if flush_first:
                both.flushed(flushed)
                assert got == []
                both.replicated(replicated)
            else:
                both.replicated(replicated)
                assert got == []
                both.flushed(flushed)
            assert [code for code, _ in got] == [expected]
