"""When the Raft driver's ticks fall due, how they are fed to the core, and the lease in time.

The driver (``controller/raft_driver.py``) wakes every tick interval and tells
:class:`TickSchedule` the loop time it woke at (:meth:`~TickSchedule.fell_due`); the ticks that
fell due since are fed to the core later, interleaved with the messages that arrived meanwhile
in the order of their times (:meth:`~TickSchedule.feed` up to a message's arrival, then the
message). A wake-up more than :data:`LATE_TICK_S` late means the process (or the whole machine)
stood still: all but the latest of the ticks it missed are fed as one stall
(``RaftNode.tick_after_stall``), which shortens a leader's lease but runs no follower's election
clock, so a stall of the whole host does not start an election.

:meth:`~TickSchedule.lease_end` turns the core's lease (in ticks) into loop time counted from
when the latest tick fed to the core fell due, so a leader that was frozen (SIGSTOP) or starved
knows at once, before the ticks it missed are fed, that its lease is gone.

Time is an input here (loop seconds, passed in): no asyncio, no clock.
"""

from __future__ import annotations

from typing import Protocol

LATE_TICK_S = 0.2
"""A tick that fell due this long before the loop ran it is late: the process stood still."""

LEASE_DRIFT_MARGIN = 0.05
"""The share of the lease given up for clock rate differences between controllers."""


class Ticked(Protocol):
    """What the ticks are fed to (``RaftNode``)."""

    def tick(self) -> None: ...

    def tick_after_stall(self, ticks: int) -> None: ...


class TickSchedule:
    def __init__(self, interval: float, start: float) -> None:
        """Ticks every ``interval`` seconds from loop time ``start`` (the first falls due one
        interval later)."""
        self.interval = interval
        self.last_due = start
        """Loop time at which the latest tick fed to the core fell due (``start`` before any)."""
        self.wake_at = start + interval
        """Loop time at which the next tick falls due: when the driver's ticker wakes next."""
        self._due = 0
        """Ticks that fell due and were not fed yet."""
        self._first_due = 0.0
        """Loop time at which the first of the ``_due`` ticks fell due."""
        self._stalled = 0
        """Ticks that fell due while the process stood still: fed to the core as one stall
        before the next tick."""

    def fell_due(self, now: float) -> float:
        """The ticker woke at loop time ``now``: count the ticks that fell due by then. Returns
        how late the first of them is (seconds); past :data:`LATE_TICK_S`, all but the latest
        are counted as a stall."""
        interval = self.interval
        wake_at = self.wake_at
        late = now - wake_at
        due = 1 + int(late // interval)
        if late > LATE_TICK_S:
            # The process stood still: all but the latest of these ticks are fed as one stall
            # (RaftNode.tick_after_stall), the latest as a tick falling due then.
            self._stalled += due - 1
            wake_at += (due - 1) * interval
            due = 1
        if not self._due:
            self._first_due = wake_at
        self.wake_at = wake_at + due * interval
        self._due += due
        return late

    def feed(self, node: Ticked, until: float | None) -> None:
        """Feed ``node`` the ticks that fell due up to loop time ``until`` (all of them: None),
        a stall first when there is one."""
        interval = self.interval
        while self._due and (until is None or self._first_due <= until):
            if self._stalled:
                node.tick_after_stall(self._stalled)
                self._stalled = 0
            else:
                node.tick()
            self.last_due = self._first_due
            self._first_due += interval
            self._due -= 1

    def lease_end(self, remaining_ticks: int, lease_ticks: int) -> float:
        """Loop time at which a lease with ``remaining_ticks`` left (of ``lease_ticks``) ends,
        counted from when the latest tick fed to the core fell due, less the drift margin."""
        interval = self.interval
        margin = lease_ticks * interval * LEASE_DRIFT_MARGIN
        return self.last_due + remaining_ticks * interval - margin
