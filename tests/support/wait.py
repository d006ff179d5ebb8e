"""The one way tests wait: poll a condition until it holds or a deadline passes, or hold that it
keeps holding for a stated time.

``wait_until`` blocks the calling thread (for tests that drive subprocesses); ``wait_until_async``
polls on the running event loop and accepts a condition that is a plain function or a coroutine
function. Both return the condition's first truthy value, and past the deadline raise
AssertionError naming what was awaited, the last value seen and, when ``on_timeout`` is given, the
context it returns (daemon log tails, for instance).

``stays`` and ``stays_async`` are the opposite check, for "nothing happens": the condition (say,
"no message arrived") is polled for ``seconds`` and must be truthy every time; the first falsy
value fails at once, naming what should have held, the value and when it stopped. A test that
slept and then asserted once passed when the bad thing came after the assertion; this one states
how long it watched and fails as soon as the bad thing shows.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar, overload

T = TypeVar("T")


def _timed_out(
    what: str, timeout: float, last: object, on_timeout: Callable[[], str] | None
) -> str:
    message = f"timed out after {timeout:g}s waiting for {what} (last: {last!r})"
    if on_timeout is not None:
        message += "\n" + on_timeout()
    return message


def wait_until(
    condition: Callable[[], T],
    what: str,
    timeout: float = 10.0,
    *,
    interval: float = 0.02,
    on_timeout: Callable[[], str] | None = None,
) -> T:
    """Call ``condition`` every ``interval`` s until it returns something truthy, and return it."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(_timed_out(what, timeout, value, on_timeout))
        time.sleep(interval)


@overload
async def wait_until_async(
    condition: Callable[[], Awaitable[T]],
    what: str,
    timeout: float = ...,
    *,
    interval: float = ...,
    on_timeout: Callable[[], str] | None = ...,
) -> T: ...


@overload
async def wait_until_async(
    condition: Callable[[], T],
    what: str,
    timeout: float = ...,
    *,
    interval: float = ...,
    on_timeout: Callable[[], str] | None = ...,
) -> T: ...


async def wait_until_async(
    condition: Callable[[], object],
    what: str,
    timeout: float = 10.0,
    *,
    interval: float = 0.01,
    on_timeout: Callable[[], str] | None = None,
) -> object:
    """Evaluate ``condition`` (awaiting it when it returns an awaitable) every ``interval`` s on
    the running loop until it is truthy, and return that value."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if loop.time() >= deadline:
            raise AssertionError(_timed_out(what, timeout, value, on_timeout))
        await asyncio.sleep(interval)


def _stopped(
    what: str, seconds: float, after: float, value: object, on_failure: Callable[[], str] | None
) -> str:
    message = f"{what} stopped holding after {after:.2f}s of {seconds:g}s (value: {value!r})"
    if on_failure is not None:
        message += "\n" + on_failure()
    return message


def stays(
    condition: Callable[[], T],
    seconds: float,
    what: str,
    *,
    interval: float = 0.02,
    on_failure: Callable[[], str] | None = None,
) -> T:
    """Call ``condition`` every ``interval`` s for ``seconds`` (first at once, last at the end);
    the first falsy value raises AssertionError at once. Returns the last value."""
    start = time.monotonic()
    deadline = start + seconds
    while True:
        value = condition()
        if not value:
            raise AssertionError(
                _stopped(what, seconds, time.monotonic() - start, value, on_failure)
            )
        now = time.monotonic()
        if now >= deadline:
            return value
        time.sleep(min(interval, deadline - now))


@overload
async def stays_async(
    condition: Callable[[], Awaitable[T]],
    seconds: float,
    what: str,
    *,
    interval: float = ...,
    on_failure: Callable[[], str] | None = ...,
) -> T: ...


@overload
async def stays_async(
    condition: Callable[[], T],
    seconds: float,
    what: str,
    *,
    interval: float = ...,
    on_failure: Callable[[], str] | None = ...,
) -> T: ...


async def stays_async(
    condition: Callable[[], object],
    seconds: float,
    what: str,
    *,
    interval: float = 0.01,
    on_failure: Callable[[], str] | None = None,
) -> object:
    """:func:`stays` on the running loop; ``condition`` may return an awaitable (awaited)."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    deadline = start + seconds
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if not value:
            raise AssertionError(_stopped(what, seconds, loop.time() - start, value, on_failure))
        now = loop.time()
        if now >= deadline:
            return value
        await asyncio.sleep(min(interval, deadline - now))
