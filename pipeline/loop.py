"""A private event loop for Spark's Python workers, driven from synchronous code.

Spark calls data source methods from plain threads, and a ``read()`` is a generator Spark pulls
batches from, so each task drives a private event loop (:class:`SyncLoop`) step by step:
connections live inside one task and are never pickled.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


class SyncLoop:
    """An event loop in a daemon thread, driven from synchronous code.

    :meth:`run` blocks until a coroutine finishes on the loop; :meth:`submit` does not. Between
    calls the loop keeps running, so responses to requests already sent (pulls asked for ahead,
    batches in flight) are received while the caller works on the previous chunk.
    """

    def __init__(self) -> None:
        try:
            import uvloop

            self._loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
        except ImportError:  # pragma: no cover - uvloop is a dependency, but stay usable
            self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="rmq-pipeline-loop", daemon=True
        )
        self._thread.start()

    def submit(self, awaitable: Awaitable[T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(_awaited(awaitable), self._loop)

    def run(self, awaitable: Awaitable[T]) -> T:
        return self.submit(awaitable).result()

    def close(self) -> None:
        """Cancel what is still pending, stop the loop and its thread."""
        if self._loop.is_closed():
            return
        if self._thread.is_alive():
            with contextlib.suppress(Exception):
                self.run(_cancel_others())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> SyncLoop:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _awaited(awaitable: Awaitable[T]) -> T:
    return await awaitable


async def _cancel_others() -> None:
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
