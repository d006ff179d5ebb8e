"""The SQL92 subscriptions classic consumers declare in their heartbeats.

RocketMQ's push consumers send their subscriptions (``subscriptionDataSet``: topic, subString,
expressionType) in HEART_BEAT and, by default (``postSubscriptionWhenPull`` false), pull without
them: the broker filters by the subscription the group's heartbeat declared. A tag filter needs
nothing here (the client checks tags itself); a SQL92 one is decided only on the broker, so the
classic pull looks it up here when the request does not carry it. The last heartbeat's wins.
"""

from __future__ import annotations

from protocol.filter import SQL92, TAG, FilterError, filter_type
from protocol.rocketmq_remoting.bodies import SubscriptionData

__all__ = ["ClassicSubscriptions"]

MAX_ENTRIES = 65_536
"""Most (group, topic) pairs remembered (a client cannot grow the table without bound)."""


class ClassicSubscriptions:
    def __init__(self) -> None:
        self._sql: dict[tuple[str, str], str] = {}

    def heard(self, group: str, subscriptions: list[SubscriptionData]) -> None:
        """A heartbeat of ``group`` declared ``subscriptions``: remember its SQL92 ones (and
        forget one that became a tag subscription)."""
        for sub in subscriptions:
            key = (group, sub.topic)
            try:
                kind = filter_type(sub.expression_type)
            except FilterError:
                kind = TAG
            if kind == SQL92:
                if key in self._sql or len(self._sql) < MAX_ENTRIES:
                    self._sql[key] = sub.sub_string
            else:
                self._sql.pop(key, None)

    def sql(self, group: str, topic: str) -> str | None:
        """The SQL92 expression ``group`` subscribed to ``topic`` with (None: none heard)."""
        return self._sql.get((group, topic))
