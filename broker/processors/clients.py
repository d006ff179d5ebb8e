"""Consumer group membership for client-side rebalance: HEART_BEAT, UNREGISTER_CLIENT and
GET_CONSUMER_LIST_BY_GROUP."""

from __future__ import annotations

import msgpack

from broker.context import BrokerContext
from protocol.codes import RequestCode, ResponseCode
from protocol.fields import opt_str, req_str
from protocol.remoting import Frame, response
from remoting.server import Connection, RemotingServer


class ClientProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    def register(self, server: RemotingServer) -> None:
        server.register(RequestCode.HEART_BEAT, self.heartbeat)
        server.register(RequestCode.UNREGISTER_CLIENT, self.unregister)
        server.register(RequestCode.GET_CONSUMER_LIST_BY_GROUP, self.members)
        server.on_close.append(self._connection_closed)

    def heartbeat(self, conn: Connection, req: Frame) -> Frame:
        h = req.header
        self.ctx.groups.heartbeat(
            req_str(h, "consumerGroup"),
            req_str(h, "clientId"),
            opt_str(h, "topic"),
            self.ctx.now_ms(),
            id(conn),
            conn.peer,
        )
        return response(req, ResponseCode.SUCCESS)

    def unregister(self, conn: Connection, req: Frame) -> Frame:
        self.ctx.groups.unregister(
            req_str(req.header, "consumerGroup"), req_str(req.header, "clientId")
        )
        return response(req, ResponseCode.SUCCESS)

    def members(self, conn: Connection, req: Frame) -> Frame:
        group = req_str(req.header, "consumerGroup")
        return response(
            req,
            ResponseCode.SUCCESS,
            None,
            msgpack.packb(self.ctx.groups.members(group, self.ctx.now_ms())),
        )

    def _connection_closed(self, conn: Connection) -> None:
        self.ctx.groups.connection_closed(id(conn))
