"""The controllers' side of re-balancing: the static topics' queues with their measured rates
(the planner's input, :mod:`protocol.rebalance`) and the automatic mode's timing. Pure: time is
an input.
"""

from __future__ import annotations

from collections.abc import Mapping

from controller.metadata.static_topics import StaticTopicMapping
from controller.metadata.traffic import GroupTraffic
from protocol.rebalance import QueueTraffic


def queue_traffic(
    topic: str, mapping: StaticTopicMapping, traffic: Mapping[str, GroupTraffic]
) -> list[QueueTraffic]:
    """A static topic's logical queues where their newest items are, each at the rate its
    group reports for that physical queue (0 when the group did not name the topic: not among
    its busiest); a queue whose newest item is sealed is moving already."""
    out = []
    for queue_id, items in enumerate(mapping):
        last = items[-1]
        group = traffic.get(last.broker_name)
        rates = group.queues.get(topic, {}) if group is not None else {}
        out.append(
            QueueTraffic(
                topic,
                queue_id,
                last.broker_name,
                rates.get(last.physical_queue, 0.0),
                movable=last.logical_end is None,
            )
        )
    return out


class ImbalanceWatch:
    """The automatic mode's timing: acts once the spread stayed above the threshold for
    ``hold_ms`` without a break, and after each action waits ``quiet_ms`` (the brokers' window:
    until their figures show the move) before holding again."""

    __slots__ = ("_quiet_until", "_since", "hold_ms")

    def __init__(self, hold_ms: int) -> None:
        self.hold_ms = hold_ms
        self._since: int | None = None
        self._quiet_until = 0

    def observe(self, now_ms: int, over: bool) -> bool:
        """Is it time to act? ``over``: the spread is above the threshold now."""
        if now_ms < self._quiet_until or not over:
            self._since = None
            return False
        if self._since is None:
            self._since = now_ms
        return now_ms - self._since >= self.hold_ms

    def acted(self, now_ms: int, quiet_ms: int) -> None:
        self._since = None
        self._quiet_until = now_ms + quiet_ms

    def reset(self) -> None:
        self._since = None
        self._quiet_until = 0
