"""Awaiting a write's durability from a coroutine (the broker's own writers: retries, DLQ)."""

from __future__ import annotations

import asyncio

from broker.context import BrokerContext
from broker.durable import SUCCESS
from storage.store import PutResult


async def wait_durable(ctx: BrokerContext, result: PutResult) -> tuple[int, str]:
    """(SUCCESS code, "") once ``result`` is as durable as a send must be (flush, replicas),
    else the error code and remark a send would be answered with."""
    if not ctx.needs_wait(result):
        return SUCCESS
    fut: asyncio.Future[tuple[int, str]] = asyncio.get_running_loop().create_future()

    def done(code: int, remark: str) -> None:
        if not fut.done():
            fut.set_result((code, remark))

    ctx.when_durable(result, done)
    return await fut
