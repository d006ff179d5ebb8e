"""The wait helpers every test uses: they return the condition's value, and past the deadline
fail naming what was awaited, the last value and the caller's context; ``stays`` holds for its
stated time and fails at once when the condition turns false."""

from __future__ import annotations

import itertools
import re
import time

import pytest

from tests.support.wait import stays, stays_async, wait_until, wait_until_async


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


def test_stays_holds_for_the_stated_time_and_returns_the_last_value() -> None:
    calls = itertools.count(1)
    started = time.monotonic()
    assert stays(lambda: next(calls), 0.1, "the counter", interval=0.01) >= 2
    assert time.monotonic() - started >= 0.1


def test_stays_fails_at_once_naming_what_and_the_value() -> None:
    counter = itertools.count()
    started = time.monotonic()
    with pytest.raises(AssertionError) as err:
        stays(lambda: next(counter) < 3 or [], 30, "no message", interval=0.01)
    assert time.monotonic() - started < 5  # not after the 30 s it would have watched
    assert re.fullmatch(
        r"no message stopped holding after \d+\.\d\ds of 30s \(value: \[\]\)", str(err.value)
    )


def test_stays_adds_the_callers_context() -> None:
    with pytest.raises(AssertionError, match=r"\(value: 0\)\nthe log"):
        stays(lambda: 0, 1, "x", on_failure=lambda: "the log")


async def test_stays_async_awaits_a_coroutine_condition_for_the_stated_time() -> None:
    calls = itertools.count(1)

    async def probe() -> int:
        return next(calls)

    started = time.monotonic()
    assert await stays_async(probe, 0.1, "the probe", interval=0.01) >= 2
    assert time.monotonic() - started >= 0.1


async def test_stays_async_fails_at_once() -> None:
    counter = itertools.count()
    started = time.monotonic()
    with pytest.raises(
        AssertionError, match=r"^quiet stopped holding after .* of 30s \(value: False\)$"
    ):
        await stays_async(lambda: next(counter) < 2, 30, "quiet", interval=0.01)
    assert time.monotonic() - started < 5
