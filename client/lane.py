"""Ordered lanes: the sends of FIFO message groups to one queue, one request at a time (pure).

A producer keeps one :class:`OrderedLane` per (topic, queue) that message groups hash to. Sends
leave in the order they were made, and a lane has at most one request in flight: the next
request leaves only when the one before it was answered (stored, or failed for good), so a
message of a group that is being retried through a failover is never overtaken by a later one
of the same group. Sends made meanwhile gather and leave together as the next request, at most
``max_count`` messages and ``max_bytes`` bytes (a send of ``max_bytes`` or more alone).

The driver (``client/producer.py``) sends what :meth:`OrderedLane.add` and
:meth:`OrderedLane.done` return and calls :meth:`OrderedLane.done` once per request it sent,
whatever its outcome.
"""

from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


class OrderedLane(Generic[T]):
    """The gathered sends of one (topic, queue) of message groups, and whether one is in flight."""

    __slots__ = ("in_flight", "max_bytes", "max_count", "pending")

    def __init__(self, max_count: int, max_bytes: int) -> None:
        if max_count < 1 or max_bytes < 1:
            raise ValueError("max_count and max_bytes must be >= 1")
        self.max_count = max_count
        self.max_bytes = max_bytes
        self.pending: deque[tuple[T, int]] = deque()
        self.in_flight = False

    @property
    def idle(self) -> bool:
        """Nothing gathered or in flight (the producer may forget this lane)."""
        return not self.in_flight and not self.pending

    def add(self, item: T, size: int) -> list[T]:
        """A new send of ``size`` bytes: the request to send now (``[item]`` when the lane was
        idle; it is then in flight), else empty (``item`` waits for :meth:`done`)."""
        if not self.in_flight and not self.pending:
            self.in_flight = True
            return [item]
        self.pending.append((item, size))
        return []

    def done(self) -> list[T]:
        """The request in flight ended: the next request, in order (empty: the lane is idle).
        It takes the oldest gathered sends, as many as fit ``max_count`` and ``max_bytes``
        (always at least one)."""
        self.in_flight = False
        if not self.pending:
            return []
        batch: list[T] = []
        total = 0
        while self.pending and len(batch) < self.max_count:
            item, size = self.pending[0]
            if batch and total + size > self.max_bytes:
                break
            self.pending.popleft()
            batch.append(item)
            total += size
            if total >= self.max_bytes:
                break
        self.in_flight = True
        return batch
