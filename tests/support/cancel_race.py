"""Stopping a task in each of the loop turns around its wake-up, to catch a lost cancellation.

On Python 3.11 ``asyncio.wait_for`` returns the inner result when the waiting task is cancelled
in the loop turn in which the inner call completed, and the cancellation is gone: a loop stopped
at that moment runs on, and a ``stop()`` that waits for it does not return. Which turn that is
depends on the path, so a test wakes the task and stops it after 0, 1, 2, ... turns.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

Stop = Callable[[], Awaitable[object]]


async def stops_that_hung(
    wake: Callable[[], Awaitable[Stop]], turns: int, rounds: int, within: float = 1.0
) -> list[int]:
    """For each ``n`` below ``turns``, ``rounds`` times over: ``wake()`` starts a task and
    wakes it, returning how to stop it; after ``n`` turns of the loop that stop must return
    within ``within`` seconds. Returns each ``n`` after which it did not. On such a hang the
    deadline's cancel reaches the task through the stop's own wait for it, which ends it."""
    hung: list[int] = []
    for _ in range(rounds):
        for n in range(turns):
            stop = await wake()
            for _ in range(n):
                await asyncio.sleep(0)
            async with asyncio.timeout(within) as bound:
                await stop()
            if bound.expired():
                hung.append(n)
    return hung
