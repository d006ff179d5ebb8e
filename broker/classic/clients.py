"""HEART_BEAT, UNREGISTER_CLIENT and GET_CONSUMER_LIST_BY_GROUP of classic clients: the
consumer groups the broker's own clients join (:func:`broker.processors.clients.
consumer_heartbeat`), so members of either door rebalance among one list.

A heartbeat's consumer entry joins its group once per subscribed topic that is not a retry
topic (the member's topic is the first of them), with its ``consumeType`` (CONSUME_PASSIVELY:
push, CONSUME_ACTIVELY: pull, CONSUME_POP: pop, which GET_CONSUMER_LIST_BY_GROUP leaves out as
it holds no queue); a member leaves when it unregisters, when its connection closes (the
server's ``on_close``, as for our clients, at once) or when it has been silent for 120 s (RocketMQ's channelExpiredTimeout: its clients heart-beat every 30 s;
:data:`broker.consumer_groups.CHANNEL_EXPIRED_MS`), not after our clients' ``client_expiry_ms``.
A producer entry registers the session with the transaction service as a producer of its group
(RocketMQ's CLIENT_INNER_PRODUCER excepted), so its group's check-backs reach it as
CHECK_TRANSACTION_STATE (:func:`broker.classic.transaction.send_check_back`).

When a classic member joins or leaves a group (a heartbeat of a new member, UNREGISTER_CLIENT,
its connection closing), the group's members on the classic door are told at once with a oneway
NOTIFY_CONSUMER_IDS_CHANGED (40), as RocketMQ's broker does, so they rebalance now rather than at
their next periodic rebalance (ali-ons ignores it and rebalances periodically; the Java and Go
clients act on it). Changes made by our own clients' members are not pushed: classic members see
them at their periodic rebalance.
"""

from __future__ import annotations

from functools import partial

from broker.classic.subscriptions import ClassicSubscriptions
from broker.classic.transaction import send_check_back
from broker.consumer_groups import CLASSIC, ClientInfo
from broker.context import BrokerContext
from broker.processors.clients import consumer_heartbeat
from protocol.retry import RETRY_GROUP_TOPIC_PREFIX
from protocol.rocketmq_remoting.bodies import (
    consume_kind,
    decode_heartbeat,
    encode_consumer_list,
)
from protocol.rocketmq_remoting.codes import LanguageCode, RequestCode, ResponseCode
from protocol.rocketmq_remoting.frame import RemotingCommand, make_response
from protocol.rocketmq_remoting.headers import GroupHeader, UnregisterClientHeader
from remoting.classic_door import ClassicDoor, ClassicSession

__all__ = ["ClassicClients"]


def language_name(code: int) -> str:
    """A classic frame's language as RocketMQ names it (the number when unknown)."""
    try:
        return LanguageCode(code).name
    except ValueError:
        return str(code)


INNER_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"
"""The group RocketMQ's clients send their consumers' retries with: no transactions."""


class ClassicClients:
    def __init__(
        self, ctx: BrokerContext, subscriptions: ClassicSubscriptions | None = None
    ) -> None:
        self.ctx = ctx
        self.subscriptions = ClassicSubscriptions() if subscriptions is None else subscriptions

    def register(self, door: ClassicDoor) -> None:
        self.door = door
        door.on_close.append(self._closed)
        door.register(RequestCode.HEART_BEAT, self.heartbeat)
        door.register(RequestCode.UNREGISTER_CLIENT, self.unregister)
        door.register(RequestCode.GET_CONSUMER_LIST_BY_GROUP, self.members)

    def heartbeat(self, session: ClassicSession, req: RemotingCommand) -> RemotingCommand:
        beat = decode_heartbeat(req.body)
        ctx = self.ctx
        info = ClientInfo(language_name(req.language), str(req.version), CLASSIC)
        for group in beat.producer_groups:
            if group != INNER_PRODUCER_GROUP:
                relay = partial(send_check_back, session)
                ctx.transactions.producer_heartbeat(group, beat.client_id, session.conn, relay)
                ctx.producers.heartbeat(
                    group, beat.client_id, ctx.now_ms(), id(session.conn), session.conn.peer, info
                )
        for consumer in beat.consumers:
            group = consumer.group_name
            self.subscriptions.heard(group, list(consumer.subscriptions))
            known = ctx.groups.is_member(group, beat.client_id, ctx.now_ms())
            topics = [
                s.topic
                for s in consumer.subscriptions
                if not s.topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
            ]
            consumer_heartbeat(
                ctx,
                group,
                beat.client_id,
                topics[0] if topics else "",
                session.conn,
                info,
                consume=consume_kind(consumer.consume_type),
            )
            if not known:
                self.notify(group)
        return make_response(req, ResponseCode.SUCCESS)

    def unregister(self, session: ClassicSession, req: RemotingCommand) -> RemotingCommand:
        leave = UnregisterClientHeader.parse(req.ext_fields)
        if leave.consumer_group and self.ctx.groups.unregister(
            leave.consumer_group, leave.client_id
        ):
            self.notify(leave.consumer_group)
        return make_response(req, ResponseCode.SUCCESS)

    def members(self, session: ClassicSession, req: RemotingCommand) -> RemotingCommand:
        group = GroupHeader.parse(req.ext_fields).consumer_group
        ids = self.ctx.groups.members(group, self.ctx.now_ms())
        return make_response(req, ResponseCode.SUCCESS, body=encode_consumer_list(ids))

    def notify(self, group: str) -> None:
        """Tell the group's members on the classic door that its member list changed."""
        sessions = {id(session.conn): session for session in self.door.sessions}
        header = GroupHeader(consumer_group=group).ext_fields()
        for member in self.ctx.groups.live(group, self.ctx.now_ms()):
            session = sessions.get(member.connection_id)
            if session is not None:
                session.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, header, oneway=True)

    def _closed(self, session: ClassicSession) -> None:
        # Before the server's own on_close (which finds nothing left then): the groups it left.
        self.ctx.producers.connection_closed(id(session.conn))
        for group in sorted({g for g, _ in self.ctx.groups.connection_closed(id(session.conn))}):
            self.notify(group)
