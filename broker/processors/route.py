"""Topic routes and cluster lists served by a broker, so a lone broker (no controllers) can be
the bootstrap address of clients and rmqctl. In controller mode the controllers serve these."""

from __future__ import annotations

import msgpack

from broker.context import BrokerContext
from protocol.codes import RequestCode, ResponseCode
from protocol.controller_requests.topics import RouteQuery
from protocol.remoting import Frame, response
from protocol.topic_attrs import put_attrs
from remoting.server import Connection, RemotingServer, error_response


class RouteProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    def register(self, server: RemotingServer) -> None:
        server.register(RequestCode.GET_ROUTEINFO_BY_TOPIC, self.route)
        server.register(RequestCode.GET_BROKER_CLUSTER_INFO, self.cluster)

    def route(self, conn: Connection, req: Frame) -> Frame:
        topic = RouteQuery.parse(req.header, req.body).topic
        tc = self.ctx.topics.get(topic)
        if tc is None:
            return error_response(req, ResponseCode.TOPIC_NOT_EXIST, f"no route for topic {topic}")
        role = self.ctx.role
        broker: dict[str, object] = {
            "brokerName": self.ctx.cfg.broker_name,
            "masterAddress": role.master_address,
            "slaves": [] if role.is_master else [self.ctx.cfg.listen],
            "queues": tc.queues,
        }
        put_attrs(broker, tc.attrs)  # perm and messageType, when not 6, NORMAL
        return response(
            req, ResponseCode.SUCCESS, None, msgpack.packb({"topic": topic, "brokers": [broker]})
        )

    def cluster(self, conn: Connection, req: Frame) -> Frame:
        ctx = self.ctx
        role = ctx.role
        entry = {
            "brokerName": ctx.cfg.broker_name,
            "brokerId": role.broker_id,
            "address": ctx.cfg.listen,
            "role": "MASTER" if role.is_master else "SLAVE",
        }
        return response(
            req, ResponseCode.SUCCESS, None, msgpack.packb({"clusters": {ctx.cfg.cluster: [entry]}})
        )
