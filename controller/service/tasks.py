"""The service's background tasks (elections, pushes): kept until done, cancelled on stop."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable


class BackgroundTasks:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, coro: Awaitable[None], name: str) -> None:
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def running(self) -> list[asyncio.Task[None]]:
        return list(self._tasks)
