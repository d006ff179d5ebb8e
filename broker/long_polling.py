"""Long polling: pulls that found nothing wait here until a message lands in their queue."""

from __future__ import annotations

import asyncio
import contextlib


class PullWaiters:
    """Futures keyed by (topic, queue id), woken when that queue grows."""

    def __init__(self) -> None:
        self._waiters: dict[tuple[str, int], list[asyncio.Future[None]]] = {}
        self.waiting = 0

    async def wait(self, topic: str, queue_id: int, timeout: float) -> bool:
        """Wait until :meth:`notify` for this queue or ``timeout``; True when woken."""
        return await self.wait_any([(topic, queue_id)], timeout)

    async def wait_any(self, keys: list[tuple[str, int]], timeout: float) -> bool:
        """Wait until :meth:`notify` for any of ``keys`` or ``timeout``; True when woken (a POP
        of a whole topic waits on all its queues)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for key in keys:
            self._waiters.setdefault(key, []).append(fut)
        self.waiting += 1
        try:
            async with asyncio.timeout(timeout):
                await fut
            return True
        except TimeoutError:
            return False
        finally:
            self.waiting -= 1
            for key in keys:
                waiters = self._waiters.get(key)
                if waiters is not None:
                    with contextlib.suppress(ValueError):
                        waiters.remove(fut)
                    if not waiters:
                        del self._waiters[key]

    def notify(self, topic: str, queue_id: int) -> None:
        waiters = self._waiters.pop((topic, queue_id), None)
        if waiters:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    def notify_all(self) -> None:
        """Wake every waiter (visibility moved, e.g. the confirm offset advanced)."""
        keys = list(self._waiters)
        for topic, queue_id in keys:
            self.notify(topic, queue_id)
