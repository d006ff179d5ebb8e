"""What this broker deleted (topics, consumer groups) and when, in a count of deletes, so a
slave's copy of its master's tables (:mod:`broker.replicas.config_sync`) does not bring back a
name deleted while the copy was on its way: an answer the master gave before it deleted the
name may arrive after the delete reached this slave.

In memory only: a name deleted before a restart is no longer in the master's tables by the time
this broker copies them again.
"""

from __future__ import annotations

__all__ = ["Deletions"]


class Deletions:
    """A counter of deletes and, per topic and per group, the count at its last delete."""

    __slots__ = ("_groups", "_topics", "count")

    def __init__(self) -> None:
        self.count = 0
        self._topics: dict[str, int] = {}
        self._groups: dict[str, int] = {}

    def topic_deleted(self, topic: str) -> None:
        self.count += 1
        self._topics[topic] = self.count

    def group_deleted(self, group: str) -> None:
        self.count += 1
        self._groups[group] = self.count

    def topic_since(self, topic: str, mark: int) -> bool:
        """Was ``topic`` deleted after the count was ``mark``?"""
        return self._topics.get(topic, 0) > mark

    def group_since(self, group: str, mark: int) -> bool:
        """Was ``group`` deleted after the count was ``mark``?"""
        return self._groups.get(group, 0) > mark
