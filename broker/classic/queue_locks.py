"""Which client of a consumer group holds each queue: the locks of classic orderly consumers
(LOCK_BATCH_MQ / UNLOCK_BATCH_MQ), as RocketMQ's RebalanceLockManager keeps them.

A lock lasts :data:`LOCK_TTL_MS` after its holder last locked it (the clients lock their queues
again every 20 s); past that anyone may take it. Pure: time is an argument, nothing persists
(a broker that restarts, or a new master, starts with no locks and the clients lock again).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

__all__ = ["LOCK_TTL_MS", "QueueLocks"]

LOCK_TTL_MS: Final = 60_000
"""RocketMQ's ``rocketmq.broker.rebalance.lockMaxLiveTime`` default."""

Queue = tuple[str, int]
"""(topic, queue id)."""


class QueueLocks:
    def __init__(self, ttl_ms: int = LOCK_TTL_MS) -> None:
        self.ttl_ms = ttl_ms
        self._locks: dict[str, dict[Queue, tuple[str, int]]] = {}  # group -> queue -> holder, at

    def lock(self, group: str, client_id: str, queues: Iterable[Queue], now_ms: int) -> list[Queue]:
        """Lock what ``client_id`` may hold of ``queues`` (free, expired or its own, renewed);
        the queues it holds now, in the order asked."""
        table = self._locks.setdefault(group, {})
        held = []
        for queue in queues:
            holder = table.get(queue)
            if holder is None or holder[0] == client_id or now_ms - holder[1] > self.ttl_ms:
                table[queue] = (client_id, now_ms)
                held.append(queue)
        return held

    def unlock(self, group: str, client_id: str, queues: Iterable[Queue]) -> None:
        """Release those of ``queues`` that ``client_id`` holds."""
        table = self._locks.get(group)
        if table is None:
            return
        for queue in queues:
            holder = table.get(queue)
            if holder is not None and holder[0] == client_id:
                del table[queue]
        if not table:
            del self._locks[group]

    def holder(self, group: str, queue: Queue, now_ms: int) -> str | None:
        """The client that holds ``queue`` for ``group`` now (None: free or expired)."""
        held = self._locks.get(group, {}).get(queue)
        if held is None or now_ms - held[1] > self.ttl_ms:
            return None
        return held[0]
