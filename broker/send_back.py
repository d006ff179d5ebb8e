"""Sending a consumed message back for any front: CONSUMER_SEND_MSG_BACK's processor
(:mod:`broker.processors.send_back`) and the classic door's (:mod:`broker.classic.send_back`)
call :func:`send_back`.

The message at ``offset`` must be a visible message of ``origin_topic`` (or a retry copy in the
group's retry topic whose ``RETRY_TOPIC`` is ``origin_topic``), and the request must come over a
connection a live member of ``group`` heart-beats on; else MESSAGE_NOT_FOUND or
NOT_GROUP_MEMBER, and nothing is stored. It is re-published to the group's retry topic after its
back-off, or to the group's DLQ once its retries are used up (at once for a FIFO group, a group
that does not consume retries, or when ``dead_letter`` asks). Every refusal is a
:class:`SendBackRefused` with the answer's code and remark; :func:`send_back` returns once the
copy is as durable as a send (flush, all-ack replicas).
"""

from __future__ import annotations

import structlog

from broker.context import BrokerContext
from broker.durable_wait import wait_durable
from broker.stored_record import visible_record_at
from broker.write_gate import WriteRefused
from protocol.broker_requests.send_back import SentBack
from protocol.codes import ResponseCode
from protocol.message import message_copy
from protocol.refusal import RequestRefused
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
from storage.errors import StoreError
from storage.store import DiskFullError, MessageTooLargeError
from storage.timer.wheel import InvalidDeliveryTimeError

__all__ = ["SendBackRefused", "origin_topic_of", "send_back"]

log = structlog.get_logger(__name__)


class SendBackRefused(RequestRefused):
    """A send-back not stored (or not durable in time): the code and remark to answer."""


async def send_back(
    ctx: BrokerContext,
    *,
    group: str,
    offset: int,
    origin_topic: str,
    connection_id: int,
    max_reconsume_times: int | None = None,
    reason: str = "",
    dead_letter: bool = False,
) -> SentBack:
    """Re-publish the message at CommitLog ``offset`` for ``group`` (see the module docstring);
    raises :class:`SendBackRefused`."""
    reason = clip_reason(reason)
    if ctx.groups.member_on(group, connection_id, ctx.now_ms()) is None:
        raise SendBackRefused(
            ResponseCode.NOT_GROUP_MEMBER,
            f"no member of consumer group {group} heart-beats on this connection: only a "
            "member of the group may send its messages back",
        )
    try:
        ctx.check_writable()
    except WriteRefused as refused:
        raise SendBackRefused(refused.code, refused.remark) from None
    record = visible_record_at(ctx, offset)
    if record is None:
        raise SendBackRefused(
            ResponseCode.MESSAGE_NOT_FOUND,
            f"no message at commitlog offset {offset} on {ctx.cfg.broker_name}",
        )
    stored_origin = origin_topic_of(record.topic, record.properties, group)
    if stored_origin != origin_topic:
        raise SendBackRefused(
            ResponseCode.MESSAGE_NOT_FOUND,
            f"the message at commitlog offset {offset} is not one of topic {origin_topic} "
            f"consumed by group {group} (it is in {record.topic})",
        )
    config = ctx.sub_groups.get(group)
    reconsumed = reconsume_times(record.properties)
    step: Retry | DeadLetter = (
        next_step(config, reconsumed, max_reconsume_times)
        if config.consume_retry and not config.consume_orderly and not dead_letter
        # Nobody reads the retry topic, or a FIFO group (its members retry in place and
        # send a message back only past its retries), or the consumer asked: park it at once.
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
        raise SendBackRefused(
            ResponseCode.SERVICE_NOT_AVAILABLE, f"retry of group {group} not scheduled: {exc}"
        ) from None
    except DiskFullError as exc:
        log.error("send back failed: disk full", group=group, error=str(exc))
        raise SendBackRefused(ResponseCode.DISK_FULL, f"not stored: disk full: {exc}") from None
    except MessageTooLargeError as exc:
        raise SendBackRefused(ResponseCode.MESSAGE_ILLEGAL, f"not stored: {exc}") from None
    except StoreError as exc:
        log.error("send back failed", group=group, error=str(exc))
        raise SendBackRefused(ResponseCode.SYSTEM_ERROR, f"not stored: {exc}") from None
    code, remark = await wait_durable(ctx, result)
    if code != ResponseCode.SUCCESS:
        raise SendBackRefused(code, remark)
    dead = isinstance(step, DeadLetter)
    if dead:
        ctx.metrics.dead_letter(group, origin_topic)
    else:
        ctx.metrics.consumer_retry(group, origin_topic)
    return SentBack(
        reconsume_times=step.count,
        dead_letter=dead,
        deliver_at_ms=deliver_ms,
        topic=topic,
        msg_id=ctx.sends.msg_id(result.physical_offsets[0]),
    )


def origin_topic_of(stored_topic: str, properties: dict[str, str], group: str) -> str | None:
    """The topic a consumer of ``group`` got the stored message from; None for a message no
    member of the group consumes (another group's retry copy, a DLQ, a system topic)."""
    if stored_topic == retry_topic(group):
        return properties.get(PROP_RETRY_TOPIC)
    if stored_topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
        return None
    if stored_topic == TIMER_TOPIC:
        return None
    return stored_topic
