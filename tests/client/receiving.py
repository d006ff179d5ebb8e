"""Receiving with a deadline, for the consumer tests."""

from __future__ import annotations

from collections.abc import Callable

from client import Consumer
from client.message import ReceivedMessage
from tests.support.wait import wait_until_async


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
