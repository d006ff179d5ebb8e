"""Offsets an operator reset, waiting for the group's next read of each queue (RocketMQ 5's
``resetOffsetTable``, its ``useServerSideResetOffset``): the way a reset reaches members that
keep their own position and are not told (RocketMQ's classic clients, ali-ons: it ignores
RESET_CONSUMER_CLIENT_OFFSET) and the POP path.

The next pull of the queue by the group, at another offset, is answered PULL_OFFSET_MOVED to
the reset offset (a classic client goes on from there); the next POP of the queue by the group
reads from it. Each reset is taken once. Pure: held in memory by the master that took the
reset (a new master does not have them; the committed offsets it copied do).
"""

from __future__ import annotations

__all__ = ["PendingResets"]

Key = tuple[str, str, int]
"""(group, topic, queue id)."""


class PendingResets:
    def __init__(self) -> None:
        self._offsets: dict[Key, int] = {}

    def assign(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """``group``'s next read of the queue starts at ``offset`` (a later reset replaces it)."""
        self._offsets[(group, topic, queue_id)] = offset

    def take(self, group: str, topic: str, queue_id: int) -> int | None:
        """The reset waiting for ``group``'s next read of the queue, erased (None: none)."""
        if not self._offsets:
            return None
        return self._offsets.pop((group, topic, queue_id), None)

    def peek(self, group: str, topic: str, queue_id: int) -> int | None:
        return self._offsets.get((group, topic, queue_id))

    def __len__(self) -> int:
        return len(self._offsets)
