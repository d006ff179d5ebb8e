"""A daemon's background tasks: the pause between two rounds of a loop that may be woken early,
a schedule at a fixed rate, and ending the tasks when the daemon stops."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any


async def sleep_or_wake(wake: asyncio.Event, seconds: float) -> None:
    """Return after ``seconds``, or as soon as ``wake`` is set, whichever comes first. ``wake``
    is left as it is: the caller clears it where its loop needs (before the pause, so that only
    a new wake-up ends it early; or after, once it has read what the wake-up announced)."""
    try:
        async with asyncio.timeout(seconds):
            await wake.wait()
    except TimeoutError:
        pass


def next_due(due: float, period: float, now: float) -> float:
    """The first time after ``now`` of a schedule at a fixed rate, ``due`` + k * ``period``: a
    loop that wakes late (or waited past its next turn for an answer) skips the turns it missed
    and keeps its phase, where sleeping ``period`` after each turn takes the phase of whatever
    delayed it (after a stall of a peer, every loop that waited on it would go on in step)."""
    if now < due:
        return due
    return due + period * ((now - due) // period + 1)


def turn_after(due: float, period: float, now: float) -> float:
    """The turn of a fixed-rate schedule to wait for once the turn ``due`` was taken: the next
    one, or the first after ``now`` when the loop is late (:func:`next_due`)."""
    return next_due(due, period, max(due, now))


async def cancel_and_wait(tasks: Iterable[asyncio.Future[Any]]) -> None:
    """Cancel ``tasks`` and return once every one has ended; what they raised (their
    cancellation included) is dropped: a stopping daemon does not act on it."""
    ending = list(tasks)
    for task in ending:
        task.cancel()
    await asyncio.gather(*ending, return_exceptions=True)
