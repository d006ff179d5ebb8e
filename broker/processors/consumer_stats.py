"""Consumer progress and group members for operators: GET_CONSUME_STATS (rmqctl
consumerProgress) and GET_CONSUMER_CONNECTION_LIST (rmqctl consumerConnection).

GET_CONSUME_STATS opens at most :data:`CONSUME_STATS_QUEUE_OPENS` ConsumeQueues not opened since
the broker's start (the event loop handed back between every few), and answers for the topics
whose queues are all open; the others are listed in the answer's ``notOpened``, and the next
requests open them."""

from __future__ import annotations

from broker.consumer_stats import (
    CONSUME_STATS_QUEUE_OPENS,
    open_queues,
    progress,
    stats_topics,
)
from broker.context import BrokerContext
from protocol.broker_requests.consumer_stats import ConsumerConnectionsQuery, ConsumeStatsQuery
from protocol.codes import RequestCode, ResponseCode
from protocol.consume_stats import ConsumerConnection, ConsumeStats, encode_connections
from protocol.remoting import Frame, response
from remoting.server import Connection, RemotingServer


class ConsumerStatsProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    def register(self, server: RemotingServer) -> None:
        server.register(RequestCode.GET_CONSUME_STATS, self.consume_stats)
        server.register(RequestCode.GET_CONSUMER_CONNECTION_LIST, self.connections)

    async def consume_stats(self, conn: Connection, req: Frame) -> Frame:
        query = ConsumeStatsQuery.parse(req.header, req.body)
        group, topic = query.group, query.topic
        ctx = self.ctx
        wanted = sorted({t for ts in stats_topics(ctx, group, topic).values() for t in ts})
        await open_queues(ctx, wanted, CONSUME_STATS_QUEUE_OPENS)
        groups, not_opened = progress(ctx, group, topic, opened_only=True)
        stats = ConsumeStats(
            broker_name=ctx.cfg.broker_name,
            address=ctx.cfg.listen,
            role="MASTER" if ctx.role.is_master else "SLAVE",
            groups=groups,
            not_opened=not_opened,
        )
        return response(req, ResponseCode.SUCCESS, None, stats.encode())

    def connections(self, conn: Connection, req: Frame) -> Frame:
        group = ConsumerConnectionsQuery.parse(req.header, req.body).group
        members = [
            ConsumerConnection(
                m.client_id,
                m.address,
                m.topic,
                m.last_seen_ms,
                m.info.language,
                m.info.version,
                m.info.protocol,
                m.consume_type,
            )
            for m in self.ctx.groups.live(group, self.ctx.now_ms())
        ]
        return response(req, ResponseCode.SUCCESS, None, encode_connections(members))
