"""Receiving with a deadline, for the consumer tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from client import Consumer
from client.message import ReceivedMessage
from tests.support.wait import wait_until_async

FAST: dict[str, Any] = {
    "heartbeat_interval": 0.2,
    "commit_interval": 0.2,
    "route_refresh_interval": 1.0,
}
"""Keyword arguments of :class:`client.consumer.Consumer` for the tests against a lone broker:
heartbeats, offset commits and route refreshes within a second."""


async def receive_until(
    consumer: Consumer,
    done: Callable[[list[ReceivedMessage]], bool],
    timeout: float = 10,
    poll: float = 0.05,
) -> list[ReceivedMessage]:
    """Everything ``consumer`` receives until ``done(received)`` holds; fails at ``timeout``
    naming how many arrived."""
    got: list[ReceivedMessage] = []

    async def arrived() -> bool:
        if not done(got):
            got.extend(await consumer.receive(poll))
        return done(got)

    await wait_until_async(
        arrived,
        "the messages",
        timeout,
        interval=0,
        on_timeout=lambda: f"only {len(got)} messages arrived",
    )
    return got


async def consume(address: str, topic: str, n: int) -> list[ReceivedMessage]:
    """The first ``n`` (or more) messages of ``topic`` a consumer of the group ``checker``
    receives from ``address`` (30 s at most)."""
    async with Consumer(address, "checker", topic, **FAST) as c:
        return await receive_until(c, lambda got: len(got) >= n, 30, poll=0.1)
