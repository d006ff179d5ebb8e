"""GET_PRODUCER_CONNECTION_LIST (204): a producer group's live clients on this broker
(:mod:`broker.producer_groups`; rmqctl producerConnection). Needs get on the group."""

from __future__ import annotations

from broker.context import BrokerContext
from protocol.broker_requests.producers import ProducerConnections, ProducerConnectionsQuery
from protocol.codes import RequestCode, ResponseCode
from protocol.remoting import Frame, response
from remoting.server import Connection, RemotingServer


class ProducerProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    def register(self, server: RemotingServer) -> None:
        server.register(RequestCode.GET_PRODUCER_CONNECTION_LIST, self.connections)

    def connections(self, conn: Connection, req: Frame) -> Frame:
        group = ProducerConnectionsQuery.parse(req.header, req.body).group
        ctx = self.ctx
        live = ctx.producers.live(group, ctx.now_ms())
        return response(req, ResponseCode.SUCCESS, *ProducerConnections(tuple(live)).encode())
