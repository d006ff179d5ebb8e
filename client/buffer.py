"""The bounded buffer between a consumer's pull tasks and the application.

It holds whole pulled batches (one list per pull response, all from one queue), counted in
messages. A pull task that finds it full waits, which stops that queue's pulls: backpressure
reaches the broker as fewer pull requests, and memory stays bounded by about ``capacity`` plus
one batch per queue.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
M = TypeVar("M")


class MessageBuffer(Generic[K, M]):
    """Batches of messages tagged with their queue (``K``), bounded by message count."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.capacity = capacity
        self._batches: deque[tuple[K, list[M]]] = deque()
        self._count = 0
        self._space = asyncio.Event()
        self._space.set()
        self._data = asyncio.Event()
        self.closed = False

    def __len__(self) -> int:
        """Messages buffered."""
        return self._count

    async def put(self, key: K, batch: list[M]) -> None:
        """Append a batch, first waiting while the buffer is full (it may overshoot by one batch)."""
        while self._count >= self.capacity and not self.closed:
            self._space.clear()
            await self._space.wait()
        if self.closed:
            return
        self._batches.append((key, batch))
        self._count += len(batch)
        self._data.set()

    async def wait(self, timeout: float | None) -> bool:
        """Wait until a batch is buffered or the buffer closes; True when there is data."""
        if not self._batches and not self.closed:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._data.wait()
            if not self._batches and not self.closed:
                self._data.clear()  # woken without data (:meth:`wake`)
        return bool(self._batches)

    def holds(self, key: K) -> bool:
        """Whether a batch of ``key`` is buffered."""
        return any(k is key for k, _ in self._batches)

    def wake(self) -> None:
        """End a :meth:`wait` now, with or without data (the consumer has an error to raise)."""
        self._data.set()

    def take(self, max_messages: int, keep: Callable[[K], bool]) -> list[tuple[K, list[M]]]:
        """Remove and return whole batches, up to ``max_messages`` messages (at least one batch,
        split if a single batch is larger). Batches whose key fails ``keep`` are discarded."""
        out: list[tuple[K, list[M]]] = []
        room = max_messages
        batches = self._batches
        while batches and room > 0:
            key, batch = batches[0]
            if not keep(key):
                batches.popleft()
                self._count -= len(batch)
                continue
            if len(batch) <= room:
                batches.popleft()
                out.append((key, batch))
                self._count -= len(batch)
                room -= len(batch)
            else:
                if out:
                    break
                out.append((key, batch[:room]))
                batches[0] = (key, batch[room:])
                self._count -= room
                room = 0
        if not batches:
            self._data.clear()
        if self._count < self.capacity:
            self._space.set()
        return out

    def discard(self, key: K) -> int:
        """Drop every buffered batch of ``key`` (its queue was given away); returns messages."""
        kept = [(k, b) for k, b in self._batches if k is not key]
        dropped = self._count - sum(len(b) for _, b in kept)
        if dropped:
            self._batches = deque(kept)
            self._count -= dropped
            if not self._batches:
                self._data.clear()
            if self._count < self.capacity:
                self._space.set()
        return dropped

    def close(self) -> None:
        """Wake every waiter; later puts are ignored."""
        self.closed = True
        self._space.set()
        self._data.set()
