"""CONSUME_MESSAGE_DIRECTLY (309): deliver one stored message to a consumer group again
(``rmqctl resendMessage``; codec in :mod:`protocol.broker_requests.consume_directly`).

RocketMQ's broker forwards this request to one live member, whose listener consumes the message
and answers with its result. Our fronts' consumers have no listener the broker could call (the
SDK hands messages to the application through ``receive()``; the official gRPC clients and POP
consumers pull), so the broker delivers the message to the group the way every one of its
members already reads: a copy is appended to the group's retry topic (``%RETRY%<group>``,
queue 0) at once, with the message's own reconsume count and its first topic and id, and the
answer names the copy. The SDK's consumers, POP consumers (SimpleConsumer, gRPC clients) and
classic push consumers all read that topic, so the member that holds its queue receives the
message within a pull; rmqctl then watches the group's offset on that queue to say when it was
consumed.

Checks, in order, each a refusal that stores nothing: this broker must take writes (NOT_MASTER
and the like); the group must exist here (SUBSCRIPTION_GROUP_NOT_EXIST: configured, a member,
committed offsets or its retry topic; ``force`` does not skip this); the group must have a live
member here (CONSUMER_NOT_ONLINE; ``clientId``, when given, must be one, and some member must
subscribe to the message's topic; ``force`` skips this: the copy then waits in the retry topic
for the group's next member); the
offset id must name a visible message of a topic the group consumes here (MESSAGE_NOT_FOUND);
the group must read its retry topic (GROUP_READS_NO_RETRY: a FIFO group, whose order a copy
would break, or consumeRetry off). The answer comes once the copy is as durable as a send.
"""

from __future__ import annotations

from broker.context import BrokerContext
from broker.durable_wait import wait_durable
from broker.send_back import origin_topic_of
from broker.stored_record import visible_record_at
from broker.write_gate import WriteRefused
from protocol.broker_requests.consume_directly import ConsumedDirectly, ConsumeMessageDirectly
from protocol.codes import RequestCode, ResponseCode
from protocol.message import RecordError, message_copy, parse_msg_id
from protocol.refusal import RequestRefused
from protocol.remoting import Frame, response
from protocol.retry import (
    Retry,
    origin_message_id,
    reconsume_times,
    retry_topic,
    sent_back_properties,
)
from remoting.server import Connection, RemotingServer, error_response
from storage.errors import StoreError


class Refused(RequestRefused):
    """A CONSUME_MESSAGE_DIRECTLY refused: the code and remark to answer with."""


def _known(ctx: BrokerContext, group: str) -> bool:
    """Whether ``group`` exists on this broker: it is configured (updateSubGroup), has a member
    (live or not yet expired), committed offsets or a retry topic here. ``force`` stores a copy
    for a group's next member, never for a group that does not exist (a typo would store a copy
    nobody reads and create its retry topic)."""
    topic = retry_topic(group)
    return (
        ctx.sub_groups.configured(group) is not None
        or group in ctx.groups.groups()
        or group in ctx.offsets.groups()
        or ctx.topics.get(topic) is not None
        or bool(ctx.store.queue_ids(topic))
    )


class ConsumeDirectlyProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    def register(self, server: RemotingServer) -> None:
        server.register(RequestCode.CONSUME_MESSAGE_DIRECTLY, self.consume_directly)

    async def consume_directly(self, conn: Connection, req: Frame) -> Frame:
        ask = ConsumeMessageDirectly.parse(req.header, req.body)
        try:
            done = await self._resend(ask)
        except Refused as refused:
            return error_response(req, refused.code, refused.remark)
        return response(req, ResponseCode.SUCCESS, *done.encode())

    async def _resend(self, ask: ConsumeMessageDirectly) -> ConsumedDirectly:
        ctx = self.ctx
        group, name = ask.group, ctx.cfg.broker_name
        try:
            ctx.check_writable()
        except WriteRefused as refused:
            raise Refused(refused.code, refused.remark) from None
        live = ctx.groups.live(group, ctx.now_ms())
        if ask.client_id and ask.client_id not in {m.client_id for m in live}:
            raise Refused(
                ResponseCode.CONSUMER_NOT_ONLINE,
                f"client {ask.client_id} is not a live member of consumer group {group} on {name}",
            )
        if not live and not _known(ctx, group):
            raise Refused(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"consumer group {group} does not exist on {name} (not configured, no member, "
                "no offset, no retry topic here): nothing resent",
            )
        if not live and not ask.force:
            raise Refused(
                ResponseCode.CONSUMER_NOT_ONLINE,
                f"consumer group {group} has no live member on {name} (resend with --force to "
                "store the copy for its next member)",
            )
        try:
            _, offset = parse_msg_id(ask.msg_id)
        except RecordError as exc:
            raise Refused(ResponseCode.BAD_REQUEST, f"not an offset message id: {exc}") from None
        record = visible_record_at(ctx, offset) if offset >= 0 else None
        if record is None or record.msg_id != ask.msg_id:
            raise Refused(
                ResponseCode.MESSAGE_NOT_FOUND,
                f"no message {ask.msg_id} on {name} (commitlog offset {offset}: deleted, not "
                "committed yet, or another message)",
            )
        origin = origin_topic_of(record.topic, record.properties, group)
        if origin is None or (ask.topic and ask.topic != origin):
            raise Refused(
                ResponseCode.MESSAGE_NOT_FOUND,
                f"message {ask.msg_id} is in {record.topic}: not a message of "
                f"{ask.topic or 'a topic'} consumed by group {group}",
            )
        if live and not ask.force and origin not in {m.topic for m in live}:
            raise Refused(
                ResponseCode.CONSUMER_NOT_ONLINE,
                f"no live member of consumer group {group} on {name} subscribes to {origin}",
            )
        config = ctx.sub_groups.get(group)
        if config.consume_orderly or not config.consume_retry:
            why = (
                "a FIFO group: a copy would break its order"
                if config.consume_orderly
                else ("consumeRetry is off")
            )
            raise Refused(
                ResponseCode.GROUP_READS_NO_RETRY,
                f"consumer group {group} does not read its retry topic ({why}): nothing resent",
            )
        topic = retry_topic(group)
        props = sent_back_properties(
            record.properties,
            origin_topic=origin,
            origin_id=origin_message_id(record.properties, record.msg_id),
            step=Retry(delay_ms=0, count=reconsume_times(record.properties)),
            reason="",
        )
        try:
            ctx.ensure_system_topic(topic)
            result = ctx.appender.put(
                topic, 0, [message_copy(record, topic, props)], len(record.body)
            )
        except StoreError as exc:
            raise Refused(ResponseCode.SYSTEM_ERROR, f"not stored: {exc}") from None
        code, remark = await wait_durable(ctx, result)
        if code != ResponseCode.SUCCESS:
            raise Refused(code, remark)
        return ConsumedDirectly(
            topic=topic,
            msg_id=ctx.sends.msg_id(result.physical_offsets[0]),
            queue_offset=result.first_queue_offset,
            origin_topic=origin,
            members=len(live),
        )
