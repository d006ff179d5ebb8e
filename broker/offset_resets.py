"""Offsets an operator reset, waiting for the group's next read of each queue (RocketMQ 5's
``resetOffsetTable``, its ``useServerSideResetOffset``): the way a reset reaches members that
keep their own position and are not told (RocketMQ's classic clients, ali-ons: it ignores
RESET_CONSUMER_CLIENT_OFFSET). POP groups are moved through the revive log instead
(:meth:`broker.pop.service.PopService.reset`).

The next pull of the queue by the group, at another offset, is answered PULL_OFFSET_MOVED to
the reset offset (a classic client goes on from there). Each reset is taken once, and only in the master epoch it was made in: the
group may have read on another master since (a failover and back), and a reset left over from
then must not move it back. Held in memory by the master that took the reset (a new master does
not have them; the committed offsets it copied do). The epoch is read through a callable, so
this stays free of the broker's role machinery.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["PendingResets"]

Key = tuple[str, str, int]
"""(group, topic, queue id)."""


class PendingResets:
    def __init__(self, epoch: Callable[[], int] = lambda: 0) -> None:
        """``epoch``: the broker's master epoch now."""
        self._epoch = epoch
        self._offsets: dict[Key, tuple[int, int]] = {}

    def assign(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """``group``'s next read of the queue starts at ``offset`` (a later reset replaces it)."""
        self._offsets[(group, topic, queue_id)] = (offset, self._epoch())

    def take(self, group: str, topic: str, queue_id: int) -> int | None:
        """The reset waiting for ``group``'s next read of the queue, erased (None: none, or
        one made in another master epoch)."""
        if not self._offsets:
            return None
        found = self._offsets.pop((group, topic, queue_id), None)
        if found is None:
            return None
        offset, epoch = found
        return offset if epoch == self._epoch() else None

    def __len__(self) -> int:
        return len(self._offsets)
