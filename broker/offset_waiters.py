"""Callbacks waiting for a log offset to be reached (flushed, acknowledged by the replicas), each
with a deadline, for the sends parked until their bytes are durable.

Cheap per waiter, because there is one per parked send: a heap entry keyed by offset, a place in
a deadline queue, and *one* timer for all of them (armed at the earliest deadline), instead of a
future, a task and a timer each. When the offset advances, :meth:`OffsetWaiters.release` calls
every callback up to it in one pass, in offset order, on the caller's stack.

    waiters = OffsetWaiters("replicas")
    waiters.add(end_offset, timeout_s, done)   # done(True) once released, done(False) on timeout
    waiters.release(confirm_offset)           # done(True) for every waiter at or below it
    waiters.fail_all()                        # done(False) for every waiter (e.g. lost mastership)

Every callback is called exactly once. A callback that raises is logged and the others still run.
Waiters are usually added with the same timeout in offset order, so the deadline queue is a
deque appended at its end; a shorter timeout is inserted in order.
"""

from __future__ import annotations

import asyncio
import bisect
import heapq
import itertools
from collections import deque
from collections.abc import Callable

import structlog

__all__ = ["Done", "OffsetWaiters", "future_waiter"]

log = structlog.get_logger(__name__)

Done = Callable[[bool], None]
"""Called once: True when the offset was reached, False on timeout or :meth:`fail_all`."""


class _Waiter:
    __slots__ = ("deadline", "done")

    def __init__(self, deadline: float, done: Done | None) -> None:
        self.deadline = deadline
        self.done = done  # None once called


def _deadline(w: _Waiter) -> float:
    return w.deadline


class OffsetWaiters:
    """See the module docstring. Use on the event-loop thread only."""

    __slots__ = (
        "_by_deadline",
        "_by_offset",
        "_live",
        "_loop",
        "_name",
        "_seq",
        "_timer",
        "_timer_at",
    )

    def __init__(self, name: str) -> None:
        self._name = name
        # Expired waiters stay in the offset heap (called already) until popped or compacted.
        self._by_offset: list[tuple[int, int, _Waiter]] = []
        self._by_deadline: deque[_Waiter] = deque()
        self._live = 0
        self._seq = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None  # the running loop, at first use

    def __len__(self) -> int:
        """Waiters not called yet."""
        return self._live

    def add(self, offset: int, timeout: float, done: Done) -> None:
        """Call ``done(True)`` once :meth:`release` reaches ``offset``, ``done(False)`` after
        ``timeout`` seconds (or at :meth:`fail_all`), whichever comes first."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        w = _Waiter(loop.time() + timeout, done)
        heapq.heappush(self._by_offset, (offset, next(self._seq), w))
        self._live += 1
        dq = self._by_deadline
        if not dq or dq[-1].deadline <= w.deadline:
            dq.append(w)
        else:  # a shorter timeout than an earlier waiter's: keep the queue in deadline order
            dq.insert(bisect.bisect_right(dq, w.deadline, key=_deadline), w)
        if self._timer is None or w.deadline < self._timer_at:
            self._arm(loop, w.deadline)

    def release(self, reached: int) -> None:
        """``done(True)`` for every waiter whose offset is at most ``reached``."""
        heap = self._by_offset
        if not heap or heap[0][0] > reached:
            return
        pop = heapq.heappop
        name = self._name
        while heap and heap[0][0] <= reached:
            w = pop(heap)[2]
            if w.done is not None:
                self._live -= 1
                _call(w, True, name)
        dq = self._by_deadline
        while dq and dq[0].done is None:
            dq.popleft()

    def fail_all(self) -> None:
        """``done(False)`` for every waiter."""
        waiters = [w for _, _, w in self._by_offset]
        self._by_offset.clear()
        self._by_deadline.clear()
        self._live = 0
        self._loop = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for w in waiters:
            _call(w, False, self._name)

    def _arm(self, loop: asyncio.AbstractEventLoop, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = at
        self._timer = loop.call_at(at, self._expire)

    def _expire(self) -> None:
        self._timer = None
        loop = asyncio.get_running_loop()
        self._loop = loop
        now = loop.time()
        dq = self._by_deadline
        while dq and (dq[0].done is None or dq[0].deadline <= now):
            w = dq.popleft()
            if w.done is not None:
                self._live -= 1
                _call(w, False, self._name)
        heap = self._by_offset
        if len(heap) > 2 * self._live + 64:  # mostly expired entries: compact (amortised O(1))
            heap[:] = [e for e in heap if e[2].done is not None]
            heapq.heapify(heap)
        if dq:
            # Not sooner than 2 ms from now: waiters expiring together go in one pass.
            self._arm(loop, max(dq[0].deadline, now + 0.002))


def _call(w: _Waiter, ok: bool, name: str) -> None:
    done = w.done
    if done is None:
        return
    w.done = None
    try:
        done(ok)
    except Exception as exc:  # one bad callback must not strand the others
        log.error(
            "offset waiter callback failed", waiters=name, error=f"{type(exc).__name__}: {exc}"
        )


def future_waiter(add: Callable[[Done], None]) -> asyncio.Future[bool]:
    """A future for a callback-style wait: ``future_waiter(lambda done: w.add(o, t, done))``."""
    fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

    def done(ok: bool) -> None:
        if not fut.done():
            fut.set_result(ok)

    add(done)
    return fut
