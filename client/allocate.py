"""Queue allocation among a consumer group's members (pure functions, no I/O)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

Q = TypeVar("Q")


def allocate_averagely(queues: Sequence[Q], members: Sequence[str], me: str) -> list[Q]:
    """RocketMQ's AllocateMessageQueueAveragely: contiguous, near-equal slices.

    ``queues`` and ``members`` are sorted by the caller, identically on every member, so the
    slices partition the queues. The first ``len(queues) % len(members)`` members get one queue
    more; with more members than queues the extra members get none. A consumer that is not (yet)
    in ``members`` gets nothing, as in RocketMQ.
    """
    if not queues or me not in members:
        return []
    n, m = len(queues), len(members)
    index = members.index(me)
    mod = n % m
    if n <= m:
        size = 1
    elif mod > 0 and index < mod:
        size = n // m + 1
    else:
        size = n // m
    start = index * size if mod > 0 and index < mod else index * size + mod
    count = min(size, n - start)
    return [queues[(start + i) % n] for i in range(max(count, 0))]
