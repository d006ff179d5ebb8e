"""VIEW_BROKER_STATS_DATA (315): this broker's recent rates per topic and consumer group
(:mod:`broker.broker_stats`; rmqctl statsAll). Needs get on the cluster."""

from __future__ import annotations

from broker.context import BrokerContext
from protocol.broker_requests.runtime import GroupStats, StatsData, StatsQuery, TopicStats
from protocol.codes import RequestCode, ResponseCode
from protocol.remoting import Frame, response
from remoting.server import Connection, RemotingServer


class BrokerStatsProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    def register(self, server: RemotingServer) -> None:
        server.register(RequestCode.VIEW_BROKER_STATS_DATA, self.stats)

    def stats(self, conn: Connection, req: Frame) -> Frame:
        StatsQuery.parse(req.header, req.body)
        return response(req, ResponseCode.SUCCESS, *stats_data(self.ctx).encode())


def stats_data(ctx: BrokerContext) -> StatsData:
    """The rates and totals of the topics this broker has now: a deleted topic's counters stay
    in the samples (they count since the broker started) but it is not listed."""
    rates, totals = ctx.stats.rates(), ctx.stats.latest

    def here(topic: str) -> bool:
        return ctx.topics.get(topic) is not None or bool(ctx.store.queue_ids(topic))

    return StatsData(
        window_ms=rates.window_ms,
        topics=tuple(
            TopicStats(
                topic,
                rates.put.get(topic, 0.0),
                rates.got.get(topic, 0.0),
                put,
                totals.got.get(topic, 0),
            )
            for topic, put in sorted(totals.put.items())
            if here(topic)
        ),
        groups=tuple(
            GroupStats(group, topic, rates.consumed.get((group, topic), 0.0))
            for group, topic in sorted(totals.consumed)
            if here(topic)
        ),
    )
