"""What changed in a consumer offset table since a counter, so a slave copies only that from its
master (broker/replicas/config_sync.py) instead of the whole table every second (issue 34: at
10,000 groups the master built and encoded the whole table on its event loop, 40-60 ms a copy).

Every change of the table takes the next value of a counter: a group's commit marks the group
changed at that value, a deleted group or topic leaves a tombstone at it. The counter belongs to
one incarnation of the table (a random id chosen when the process starts): a restarted master
counts from its loaded table again, so a slave's counter from another incarnation, or one older
than the oldest tombstone kept (:data:`MAX_TOMBSTONES` of each kind), gets no delta (None:
copy the whole table). Pure: no clock, no I/O; the caller holds its table's lock.
"""

from __future__ import annotations

import secrets
from bisect import bisect_right
from dataclasses import dataclass
from typing import Final

__all__ = ["MAX_TOMBSTONES", "OffsetChangeLog", "OffsetChanges"]

MAX_TOMBSTONES: Final = 4096
"""Deleted groups (and deleted topics) remembered; an older counter gets the whole table."""


@dataclass(frozen=True, slots=True)
class OffsetChanges:
    """The groups changed after the asked counter (their whole tables are the caller's to
    read), the groups and topics deleted after it, oldest first, and the counter they bring the
    asker to: the counter now, or with ``more`` an earlier one (a page: ask again from it)."""

    counter: int
    groups: list[str]
    deleted_groups: list[str]
    deleted_topics: list[str]
    more: bool = False


class OffsetChangeLog:
    """The counter, the counter at each group's last change and the tombstones.

    The groups' marks are also kept in counter order in a list (``_order``, each change
    appended; an entry a later change of its group outdated is skipped, and the list is rebuilt
    once the outdated entries outnumber the live ones), so a page of changes after a counter is
    found by a binary search and read forward: a page costs what it holds, not every group
    changed since the counter (at 10,000 changed groups, the pages of one copy used to cost
    O(groups) each).
    """

    __slots__ = (
        "_changed",
        "_deleted_groups",
        "_deleted_topics",
        "_floor",
        "_order",
        "counter",
        "incarnation",
    )

    def __init__(self, incarnation: str | None = None) -> None:
        self.incarnation = incarnation if incarnation is not None else secrets.token_hex(8)
        self.counter = 0
        self._changed: dict[str, int] = {}
        self._order: list[tuple[int, str]] = []
        """(mark, group) in counter order; an entry whose mark is not the group's is outdated."""
        # Insertion order is counter order: a change moves its key to the end.
        self._deleted_groups: dict[str, int] = {}
        self._deleted_topics: dict[str, int] = {}
        self._floor = 0
        """A counter below this may miss a trimmed tombstone: no delta for it."""

    def group_changed(self, group: str) -> None:
        self.counter += 1
        self._mark(group)

    def group_deleted(self, group: str) -> None:
        self.counter += 1
        self._changed.pop(group, None)
        self._tombstone(self._deleted_groups, group)

    def topic_deleted(self, topic: str, groups: list[str]) -> None:
        """``topic`` deleted from ``groups`` (the groups left with no topic are deleted)."""
        self.counter += 1
        self._tombstone(self._deleted_topics, topic)
        for group in groups:
            self._mark(group)

    def _mark(self, group: str) -> None:
        self._changed[group] = self.counter
        order = self._order
        order.append((self.counter, group))
        if len(order) > 2 * len(self._changed) + 64:
            self._order = sorted((mark, name) for name, mark in self._changed.items())

    def _tombstone(self, stones: dict[str, int], name: str) -> None:
        stones.pop(name, None)
        stones[name] = self.counter
        if len(stones) > MAX_TOMBSTONES:
            oldest = next(iter(stones))
            self._floor = max(self._floor, stones.pop(oldest))

    def since(self, incarnation: str, counter: int, limit: int = 0) -> OffsetChanges | None:
        """What changed after ``counter`` of ``incarnation``; None when that cannot be told
        (another incarnation, a counter ahead of this one or older than a trimmed tombstone).
        ``limit`` > 0: about that many groups, the oldest changes first (the groups one change
        marked together are never split across pages), and only the tombstones up to the last
        of them (``more`` then: the rest from the answer's counter)."""
        if incarnation != self.incarnation or counter > self.counter or counter < self._floor:
            return None
        changed = self._changed
        order = self._order
        groups: list[str] = []
        upto = self.counter
        for i in range(bisect_right(order, counter, key=_mark_of), len(order)):
            mark, group = order[i]
            if changed.get(group) != mark:
                continue
            if 0 < limit <= len(groups) and mark != upto:
                break
            groups.append(group)
            upto = mark
        else:
            upto = self.counter
        return OffsetChanges(
            counter=upto,
            groups=groups,
            deleted_groups=_after(self._deleted_groups, counter, upto),
            deleted_topics=_after(self._deleted_topics, counter, upto),
            more=upto < self.counter,
        )


def _mark_of(entry: tuple[int, str]) -> int:
    return entry[0]


def _after(marks: dict[str, int], counter: int, upto: int | None = None) -> list[str]:
    """The keys marked after ``counter`` (and at or before ``upto``), oldest first (walks back
    from the newest only)."""
    found: list[str] = []
    for key in reversed(marks):
        mark = marks[key]
        if mark <= counter:
            break
        if upto is None or mark <= upto:
            found.append(key)
    found.reverse()
    return found
