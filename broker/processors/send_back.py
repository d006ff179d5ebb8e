"""CONSUMER_SEND_MSG_BACK (36): a consumer nacks a message; the broker re-publishes it to the
group's retry topic after its back-off, or to the group's DLQ once its retries are used up.

Request header (RocketMQ's ConsumerSendMsgBackRequestHeader, the fields we use):
``group``, ``offset`` (the message's CommitLog offset), ``originTopic`` (the topic the
application consumed it from: its first topic, also for a retry copy), ``originMsgId``,
``maxReconsumeTimes`` (optional, lowers the group's setting) and ``reason`` (ours).

The message at ``offset`` must be a visible message of ``originTopic`` (or a retry copy in the
group's retry topic whose ``RETRY_TOPIC`` is ``originTopic``), and the request must come over a
connection a live member of ``group`` heart-beats on; else MESSAGE_NOT_FOUND or
NOT_GROUP_MEMBER, and nothing is stored. For a FIFO group (``consumeMessageOrderly``) or a group
that does not consume retries, the message goes to the DLQ at once: FIFO members retry in place
and send a message back only once its retries are used up. The answer comes once the copy is as durable as a send
(flush, all-ack replicas). Its header: ``topic`` (retry or DLQ topic), ``msgId`` (the copy's
id), ``reconsumeTimes``, ``deadLetter`` and, for a retry, ``deliverAtMs``.
"""

from __future__ import annotations

import structlog

from broker.context import BrokerContext
from broker.durable_wait import wait_durable
from broker.stored_record import visible_record_at
from broker.write_gate import WriteRefused
from protocol.broker_requests.send_back import SendBack, SentBack
from protocol.codes import RequestCode, ResponseCode
from protocol.message import MsgIdMaker, message_copy
from protocol.remoting import Frame, response
from protocol.retry import (
    DLQ_GROUP_TOPIC_PREFIX,
    PROP_RETRY_TOPIC,
    RETRY_GROUP_TOPIC_PREFIX,
    DeadLetter,
    Retry,
    clip_reason,
    dlq_topic,
    next_step,
    origin_message_id,
    reconsume_times,
    retry_topic,
    sent_back_properties,
)
from protocol.timer import TIMER_TOPIC
from remoting.server import Connection, RemotingServer, error_response
from storage.errors import StoreError
from storage.store import DiskFullError, MessageTooLargeError, PutResult
from storage.timer.wheel import InvalidDeliveryTimeError

log = structlog.get_logger(__name__)


class SendBackProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self._msg_id = MsgIdMaker(ctx.cfg.listen)

    def register(self, server: RemotingServer) -> None:
        server.register(RequestCode.CONSUMER_SEND_MSG_BACK, self.send_back)

    async def send_back(self, conn: Connection, req: Frame) -> Frame:
        ctx = self.ctx
        back = SendBack.parse(req.header, req.body)
        group, offset, origin_topic = back.group, back.offset, back.origin_topic
        reason = clip_reason(back.reason)
        if ctx.groups.member_on(group, id(conn), ctx.now_ms()) is None:
            return error_response(
                req,
                ResponseCode.NOT_GROUP_MEMBER,
                f"no member of consumer group {group} heart-beats on this connection: only a "
                "member of the group may send its messages back",
            )
        try:
            ctx.check_writable()
        except WriteRefused as refused:
            return error_response(req, refused.code, refused.remark)
        record = visible_record_at(ctx, offset)
        if record is None:
            return error_response(
                req,
                ResponseCode.MESSAGE_NOT_FOUND,
                f"no message at commitlog offset {offset} on {ctx.cfg.broker_name}",
            )
        stored_origin = _origin_topic(record.topic, record.properties, group)
        if stored_origin != origin_topic:
            return error_response(
                req,
                ResponseCode.MESSAGE_NOT_FOUND,
                f"the message at commitlog offset {offset} is not one of topic {origin_topic} "
                f"consumed by group {group} (it is in {record.topic})",
            )
        config = ctx.sub_groups.get(group)
        reconsumed = reconsume_times(record.properties)
        step: Retry | DeadLetter = (
            next_step(config, reconsumed, back.max_reconsume_times)
            if config.consume_retry and not config.consume_orderly
            # Nobody reads the retry topic, or a FIFO group (its members retry in place and
            # send a message back only past its retries): park it at once.
            else DeadLetter(reconsumed)
        )
        props = sent_back_properties(
            record.properties,
            origin_topic=origin_topic,
            origin_id=origin_message_id(record.properties, record.msg_id),
            step=step,
            reason=reason,
        )
        deliver_ms: int | None = None
        try:
            if isinstance(step, DeadLetter):
                topic = dlq_topic(group)
                ctx.ensure_system_topic(topic)
                result = ctx.appender.put(
                    topic, 0, [message_copy(record, topic, props)], len(record.body)
                )
            else:
                topic = retry_topic(group)
                ctx.ensure_system_topic(topic)
                deliver_ms = ctx.now_ms() + step.delay_ms
                result = ctx.timer.put_at(message_copy(record, topic, props), topic, 0, deliver_ms)
        except InvalidDeliveryTimeError as exc:  # timer_enable = false, or a short max delay
            return error_response(
                req,
                ResponseCode.SERVICE_NOT_AVAILABLE,
                f"retry of group {group} not scheduled: {exc}",
            )
        except DiskFullError as exc:
            log.error("send back failed: disk full", group=group, error=str(exc))
            return error_response(req, ResponseCode.DISK_FULL, f"not stored: disk full: {exc}")
        except MessageTooLargeError as exc:
            return error_response(req, ResponseCode.MESSAGE_ILLEGAL, f"not stored: {exc}")
        except StoreError as exc:
            log.error("send back failed", group=group, error=str(exc))
            return error_response(req, ResponseCode.SYSTEM_ERROR, f"not stored: {exc}")
        return await self._answer(req, result, step, deliver_ms, topic, group, origin_topic)

    async def _answer(
        self,
        req: Frame,
        result: PutResult,
        step: Retry | DeadLetter,
        deliver_ms: int | None,
        topic: str,
        group: str,
        origin: str,
    ) -> Frame:
        ctx = self.ctx
        code, remark = await wait_durable(ctx, result)
        if code != ResponseCode.SUCCESS:
            return error_response(req, code, remark)
        dead = isinstance(step, DeadLetter)
        if dead:
            ctx.metrics.dead_letter(group, origin)
        else:
            ctx.metrics.consumer_retry(group, origin)
        sent = SentBack(
            reconsume_times=step.count,
            dead_letter=dead,
            deliver_at_ms=deliver_ms,
            topic=topic,
            msg_id=self._msg_id(result.physical_offsets[0]),
        )
        return response(req, ResponseCode.SUCCESS, *sent.encode())


def _origin_topic(stored_topic: str, properties: dict[str, str], group: str) -> str | None:
    """The topic a consumer of ``group`` got the stored message from; None for a message no
    member of the group consumes (another group's retry copy, a DLQ, a system topic)."""
    if stored_topic == retry_topic(group):
        return properties.get(PROP_RETRY_TOPIC)
    if stored_topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
        return None
    if stored_topic == TIMER_TOPIC:
        return None
    return stored_topic
