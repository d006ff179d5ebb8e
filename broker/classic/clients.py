"""HEART_BEAT, UNREGISTER_CLIENT and GET_CONSUMER_LIST_BY_GROUP of classic clients: the
consumer groups the broker's own clients join (:func:`broker.processors.clients.
consumer_heartbeat`), so members of either door rebalance among one list.

A heartbeat's consumer entry joins its group once per subscribed topic that is not a retry
topic (the member's topic is the first of them); a member leaves when it unregisters, when its
connection closes (the server's ``on_close``, as for our clients) or when it falls silent.
Producer entries are accepted and not recorded: transaction check-backs to classic producers
(CHECK_TRANSACTION_STATE) are not served yet.
"""

from __future__ import annotations

from broker.context import BrokerContext
from broker.processors.clients import consumer_heartbeat
from protocol.retry import RETRY_GROUP_TOPIC_PREFIX
from protocol.rocketmq_remoting.bodies import decode_heartbeat, encode_consumer_list
from protocol.rocketmq_remoting.codes import RequestCode, ResponseCode
from protocol.rocketmq_remoting.frame import RemotingCommand, make_response
from protocol.rocketmq_remoting.headers import GroupHeader, UnregisterClientHeader
from remoting.classic_door import ClassicDoor, ClassicSession

__all__ = ["ClassicClients"]


class ClassicClients:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    def register(self, door: ClassicDoor) -> None:
        door.register(RequestCode.HEART_BEAT, self.heartbeat)
        door.register(RequestCode.UNREGISTER_CLIENT, self.unregister)
        door.register(RequestCode.GET_CONSUMER_LIST_BY_GROUP, self.members)

    def heartbeat(self, session: ClassicSession, req: RemotingCommand) -> RemotingCommand:
        beat = decode_heartbeat(req.body)
        for consumer in beat.consumers:
            topics = [
                s.topic
                for s in consumer.subscriptions
                if not s.topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
            ]
            consumer_heartbeat(
                self.ctx,
                consumer.group_name,
                beat.client_id,
                topics[0] if topics else "",
                session.conn,
            )
        return make_response(req, ResponseCode.SUCCESS)

    def unregister(self, session: ClassicSession, req: RemotingCommand) -> RemotingCommand:
        leave = UnregisterClientHeader.parse(req.ext_fields)
        if leave.consumer_group:
            self.ctx.groups.unregister(leave.consumer_group, leave.client_id)
        return make_response(req, ResponseCode.SUCCESS)

    def members(self, session: ClassicSession, req: RemotingCommand) -> RemotingCommand:
        group = GroupHeader.parse(req.ext_fields).consumer_group
        ids = self.ctx.groups.members(group, self.ctx.now_ms())
        return make_response(req, ResponseCode.SUCCESS, body=encode_consumer_list(ids))
