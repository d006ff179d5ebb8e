"""The wait helpers every test uses: they return the condition's value, and past the deadline
fail naming what was awaited, the last value and the caller's context."""

from __future__ import annotations

import itertools

import pytest

from tests.support.wait import wait_until, wait_until_async


def test_wait_until_returns_the_first_truthy_value() -> None:
    counter = itertools.count()
    assert wait_until(lambda: next(counter) >= 3 and "ready", "the counter", 5, interval=0) == (
        "ready"
    )


def test_wait_until_fails_past_the_deadline_with_what_the_last_value_and_the_context() -> None:
    with pytest.raises(AssertionError) as err:
        wait_until(lambda: [], "a list", 0.05, interval=0.01, on_timeout=lambda: "daemon log")
    assert str(err.value) == "timed out after 0.05s waiting for a list (last: [])\ndaemon log"


async def test_wait_until_async_awaits_a_coroutine_condition() -> None:
    counter = itertools.count()

    async def probe() -> int:
        return max(0, next(counter) - 2)

    assert await wait_until_async(probe, "the probe", 5, interval=0) == 1


async def test_wait_until_async_fails_past_the_deadline() -> None:
    with pytest.raises(AssertionError, match=r"waiting for never \(last: False\)\nwhy"):
        await wait_until_async(lambda: False, "never", 0.05, on_timeout=lambda: "why")
