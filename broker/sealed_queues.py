"""Which physical queues of a static topic take no more sends: pure code, time is an input.

A static topic's physical queue stops taking sends when its mapping item is sealed
(docs/static-topics.md). The broker learns that two ways:

- **sealed**: the (topic, physical queue) pairs of this group whose items the controllers have
  committed sealed, from every group metadata answer (CONTROLLER_GET_REPLICA_INFO, REGISTER).
  Sealed items are never unsealed, so what was heard is kept (a union): an older answer read
  after a newer one cannot reopen a queue. A broker learns them before it takes writes as a
  new master (the answer naming it master reflects every seal committed before its election);
- **fenced**: a re-map in progress asked this master to stop taking sends to one queue before
  the controllers commit the seal (FENCE_STATIC_QUEUE). A fence lives in memory until its
  deadline: by then the seal is committed (and heard as sealed) or the move failed and the
  queue takes sends again.
"""

from __future__ import annotations

from collections.abc import Iterable

QueueKey = tuple[str, int]


class SealedQueues:
    __slots__ = ("_fences", "_sealed", "_topics")

    def __init__(self) -> None:
        self._sealed: frozenset[QueueKey] = frozenset()
        self._fences: dict[QueueKey, float] = {}
        self._topics: frozenset[str] = frozenset()
        """Topics with a queue sealed or fenced: any other send passes on one set lookup."""

    def _retopic(self) -> None:
        self._topics = frozenset(t for t, _ in self._sealed) | {t for t, _ in self._fences}

    def learn(self, sealed: Iterable[QueueKey]) -> None:
        """The controllers say these queues are sealed (added to what was heard before)."""
        added = frozenset(sealed) - self._sealed
        if added:
            self._sealed = self._sealed | added
            for key in added:
                self._fences.pop(key, None)
            self._retopic()

    def fence(self, topic: str, queue_id: int, until: float) -> None:
        """Refuse sends to the queue until ``until`` (a move is committing its seal)."""
        key = (topic, queue_id)
        if key not in self._sealed:
            self._fences[key] = max(until, self._fences.get(key, until))
            self._retopic()

    def unfence(self, topic: str, queue_id: int) -> None:
        if self._fences.pop((topic, queue_id), None) is not None:
            self._retopic()

    def sealed(self) -> frozenset[QueueKey]:
        return self._sealed

    def closed(self, topic: str, queue_id: int, now: float) -> bool:
        """Whether a send to the queue must be refused at ``now``."""
        if topic not in self._topics:
            return False
        key = (topic, queue_id)
        if key in self._sealed:
            return True
        until = self._fences.get(key)
        if until is None:
            return False
        if now < until:
            return True
        del self._fences[key]  # the deadline passed: the move did not commit in time
        self._retopic()
        return False

    def has_closed(self, topic: str) -> bool:
        """Whether some queue of ``topic`` may be closed (one set lookup)."""
        return topic in self._topics
