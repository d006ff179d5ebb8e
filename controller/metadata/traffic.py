"""TrafficTable: the brokers' traffic reports, as the active controller heard them.

Soft state like liveness (:mod:`controller.metadata.heartbeat`): the newest report per broker,
kept in memory only. Every heartbeat carries one, so a newly active controller knows the
cluster's traffic within a heartbeat interval; a report older than ``max_age_ms`` (its broker
stopped heart-beating) no longer counts. A group's traffic is the sum of its brokers' reports:
only the master puts messages, and a broker starts its window again when its role changes
(broker.traffic_meter), so a master that stepped down reports nothing more; a killed master's
last report counts until it is ``max_age_ms`` old.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from protocol.traffic import TrafficReport


@dataclass(slots=True)
class GroupTraffic:
    """One broker group's messages put per second: in all, per topic, per topic and queue (for
    the topics its brokers named: their busiest)."""

    msg_per_sec: float = 0.0
    topics: dict[str, float] = field(default_factory=dict)
    queues: dict[str, dict[int, float]] = field(default_factory=dict)
    window_ms: int = 0
    """The longest window any of its brokers measures over."""

    def add(self, report: TrafficReport) -> None:
        self.msg_per_sec += report.msg_per_sec
        self.window_ms = max(self.window_ms, report.window_ms)
        for topic, rate in report.topics.items():
            self.topics[topic] = self.topics.get(topic, 0.0) + rate.msg_per_sec
            queues = self.queues.setdefault(topic, {})
            for queue_id, r in rate.queues.items():
                queues[queue_id] = queues.get(queue_id, 0.0) + r


class TrafficTable:
    __slots__ = ("_reports",)

    def __init__(self) -> None:
        self._reports: dict[tuple[str, int], tuple[int, TrafficReport]] = {}

    def on_report(
        self, broker_name: str, broker_id: int, report: TrafficReport, now_ms: int
    ) -> None:
        self._reports[(broker_name, broker_id)] = (now_ms, report)

    def forget(self, broker_name: str, broker_ids: frozenset[int] | None = None) -> None:
        """A group's brokers (all of them with None) were cleaned from the metadata."""
        for key in [k for k in self._reports if k[0] == broker_name]:
            if broker_ids is None or key[1] in broker_ids:
                del self._reports[key]

    def clear(self) -> None:
        """This controller stopped being active: the next active one hears its own reports."""
        self._reports.clear()

    def groups(self, now_ms: int, max_age_ms: int) -> dict[str, GroupTraffic]:
        """Per broker group, the sum of its brokers' reports heard in the last ``max_age_ms``
        (groups without one are absent: read them as 0)."""
        out: dict[str, GroupTraffic] = {}
        for (name, _), (heard_ms, report) in sorted(self._reports.items()):
            if now_ms - heard_ms <= max_age_ms:
                out.setdefault(name, GroupTraffic()).add(report)
        return out


def loads(groups: Mapping[str, GroupTraffic], names: list[str]) -> dict[str, float]:
    """msg/s of each of ``names`` (0 without a report)."""
    return {n: groups[n].msg_per_sec if n in groups else 0.0 for n in names}
