"""Consumer group membership for client-side rebalance: HEART_BEAT, UNREGISTER_CLIENT and
GET_CONSUMER_LIST_BY_GROUP (the members that hold queues: POP members left out). A heartbeat
with ``producerGroup`` (and no ``consumerGroup``) registers a transactional producer's
connection for check-backs (docs/transactions.md).

A heartbeat to a master also creates the group's retry topic (``%RETRY%<group>``, one queue)
when the group consumes retries, as RocketMQ does, so its members find a route to it; the
answer's ``consumeRetry`` tells the member whether to read it. For a FIFO group
(``consumeMessageOrderly``) the answer also carries ``consumeOrderly``, ``retryMaxTimes`` and
``retryDelays``: its members retry failed messages in place with them."""

from __future__ import annotations

import structlog

from broker.consumer_groups import REMOTING_CLIENT, ClientInfo
from broker.context import BrokerContext
from protocol.broker_requests.clients import (
    ConsumerList,
    ConsumerListQuery,
    Heartbeat,
    HeartbeatAnswer,
    UnregisterClient,
    consume_type,
)
from protocol.codes import RequestCode, ResponseCode
from protocol.remoting import Frame, Header, response
from protocol.retry import SubscriptionGroupConfig, format_delay_levels, group_error, retry_topic
from remoting.server import Connection, RemotingServer
from storage.errors import StoreError

log = structlog.get_logger(__name__)

MAX_CACHED_LISTS = 4096
"""Encoded member lists kept (one per group asked for); all dropped when full."""


class ClientProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self._answers: dict[str, tuple[tuple[str, ...], tuple[Header, bytes | None]]] = {}
        """group -> its member list and that list's encoded answer: every member asks for it
        at each rebalance (issue 34)."""

    def register(self, server: RemotingServer) -> None:
        server.register(RequestCode.HEART_BEAT, self.heartbeat)
        server.register(RequestCode.UNREGISTER_CLIENT, self.unregister)
        server.register(RequestCode.GET_CONSUMER_LIST_BY_GROUP, self.members)
        server.on_close.append(self._connection_closed)

    def heartbeat(self, conn: Connection, req: Frame) -> Frame:
        beat = Heartbeat.parse(req.header, req.body)
        ctx = self.ctx
        info = ClientInfo(beat.language, beat.version, beat.protocol or "remoting")
        address = beat.client_address or conn.peer
        if beat.producer:
            # A transactional producer: its connection is where check-backs go.
            ctx.transactions.producer_heartbeat(beat.group, beat.client_id, conn)
            ctx.producers.heartbeat(
                beat.group, beat.client_id, ctx.now_ms(), id(conn), address, info
            )
            return response(req, ResponseCode.SUCCESS)
        answer = consumer_heartbeat(
            ctx,
            beat.group,
            beat.client_id,
            beat.topic,
            conn,
            info,
            address,
            consume_type(beat.consume_type),
        )
        return response(req, ResponseCode.SUCCESS, *answer.encode())

    def unregister(self, conn: Connection, req: Frame) -> Frame:
        leave = UnregisterClient.parse(req.header, req.body)
        self.ctx.groups.unregister(leave.group, leave.client_id)
        return response(req, ResponseCode.SUCCESS)

    def members(self, conn: Connection, req: Frame) -> Frame:
        group = ConsumerListQuery.parse(req.header, req.body).group
        ids = self.ctx.groups.member_ids(group, self.ctx.now_ms())
        last = self._answers.get(group)
        if last is None or last[0] is not ids:  # the list changed: encoded once more
            if len(self._answers) >= MAX_CACHED_LISTS:
                self._answers.clear()
            last = self._answers[group] = (ids, ConsumerList(client_ids=ids).encode())
        return response(req, ResponseCode.SUCCESS, *last[1])

    def _connection_closed(self, conn: Connection) -> None:
        self.ctx.groups.connection_closed(id(conn))
        self.ctx.producers.connection_closed(id(conn))
        self.ctx.transactions.connection_closed(conn)


def ensure_retry_topic(ctx: BrokerContext, group: str, config: SubscriptionGroupConfig) -> bool:
    """Whether the group's members read its retry topic (a FIFO group retries in place: they
    do not); on a master such a group's retry topic is created when missing, so that its members
    find a route to it. Called at a member's heartbeat and when updateSubGroup stores the
    group's settings: a classic client (ali-ons) looks the retry topic's route up before its
    first heartbeat, and found none until its next poll of the routes (30 s by default)."""
    consume_retry = config.consume_retry and not config.consume_orderly
    if (
        consume_retry
        and ctx.role.is_master
        and ctx.topics.get(retry_topic(group)) is None
        and group_error(group) is None
    ):
        try:
            ctx.ensure_system_topic(retry_topic(group))
        except StoreError as exc:
            log.error("creating the retry topic failed", group=group, error=str(exc))
    return consume_retry


def consumer_heartbeat(
    ctx: BrokerContext,
    group: str,
    client_id: str,
    topic: str,
    conn: Connection,
    info: ClientInfo = REMOTING_CLIENT,
    address: str | None = None,
    consume: str = "",
) -> HeartbeatAnswer:
    """A consumer's heartbeat, whichever front it came through: the member recorded (who it
    is, its address: the connection's unless a front relays it, how it consumes: ``consume``,
    pop, push, pull or "" not said), the group's retry topic
    created on a master when the group consumes retries; what the member is told (retries,
    orderly)."""
    ctx.groups.heartbeat(
        group, client_id, topic, ctx.now_ms(), id(conn), address or conn.peer, info, consume
    )
    config = ctx.sub_groups.get(group)
    consume_retry = ensure_retry_topic(ctx, group, config)
    orderly = config.consume_orderly
    return HeartbeatAnswer(
        consume_retry=consume_retry,
        orderly=orderly,
        retry_max_times=config.retry_max_times if orderly else None,
        retry_delays=format_delay_levels(config.retry_delays_ms) if orderly else None,
    )
