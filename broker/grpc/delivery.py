"""POP consumption over gRPC, the pure part: requests checked and turned into the broker's POP
arguments, stored records turned into the ``Message`` the official clients read, per-entry
answers mapped onto the protocol's codes, and the consumer settings a Telemetry answer carries.

No I/O here: :mod:`broker.grpc.consume` drives it (docs/protocol.md, "POP consumption over
gRPC").
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from broker.grpc.translate import RESERVED_PROPERTIES, Refused, no_namespace
from protocol.codes import ResponseCode
from protocol.fifo import PROP_MESSAGE_GROUP
from protocol.filter import SQL92, TAG, FilterError, parse_filter
from protocol.message import PROP_KEYS, PROP_PRODUCER_SEQ, PROP_TAGS, MessageRecord, RecordError
from protocol.pop import MAX_POP_BATCH
from protocol.retry import (
    PROP_DLQ_ORIGIN_MESSAGE_ID,
    PROP_DLQ_ORIGIN_TOPIC,
    PROP_DLQ_RESENT_FROM,
    PROP_FAILURE_REASON,
    PROP_MAX_RECONSUME_TIMES,
    PROP_ORIGIN_MESSAGE_ID,
    PROP_RECONSUME_TIME,
    PROP_RETRY_TOPIC,
    SubscriptionGroupConfig,
    group_error,
    origin_message_id,
    retry_topic,
)
from protocol.rocketmq_v2 import definition_pb2 as pb
from protocol.rocketmq_v2 import service_pb2 as rpc
from protocol.timer import (
    PROP_REAL_QUEUE_ID,
    PROP_REAL_TOPIC,
    PROP_START_DELIVER_TIME,
    PROP_TIMER_DEL_UNIQKEY,
    PROP_TIMER_DEQUEUE_MS,
    PROP_TIMER_ENQUEUE_MS,
    PROP_TIMER_OUT_MS,
    PROP_TIMER_SOURCE_OFFSET,
)
from protocol.trace import PROP_TRACE_CONTEXT
from protocol.transaction import (
    PROP_HALF_OFFSET,
    PROP_PRODUCER_GROUP,
    PROP_TRANSACTION_ID,
    PROP_TRANSACTION_PREPARED,
)

MIN_INVISIBLE_MS: Final = 1_000
"""The shortest time the broker hides a message (POP_MESSAGE's and the change's bound)."""
MAX_INVISIBLE_MS: Final = 12 * 3600 * 1000
AUTO_RENEW_INVISIBLE_MS: Final = 30_000
"""A push consumer's receive (``auto_renew``) hides its messages this long; the endpoint then
renews the time while the client lives (:mod:`broker.grpc.consumers`)."""
DEFAULT_LONG_POLLING_MS: Final = 20_000
"""Long polling of a receive that names none, and what Telemetry tells consumers to use."""
RECEIVE_BATCH_SIZE: Final = 32
"""What Telemetry tells push consumers to ask for per receive."""
CONSUMER_TYPES: Final = frozenset({pb.PUSH_CONSUMER, pb.SIMPLE_CONSUMER})

#: Properties the broker keeps for itself or shows as system properties: never user properties
#: of a message a client receives.
SYSTEM_PROPERTIES: Final = RESERVED_PROPERTIES | {
    PROP_PRODUCER_SEQ,  # an idempotent producer's request (docs/idempotence.md)
    PROP_TRACE_CONTEXT,  # system_properties.trace_context
    PROP_TIMER_OUT_MS,
    PROP_TIMER_SOURCE_OFFSET,
    PROP_TIMER_ENQUEUE_MS,
    PROP_TIMER_DEQUEUE_MS,
    PROP_TIMER_DEL_UNIQKEY,
    PROP_REAL_TOPIC,
    PROP_REAL_QUEUE_ID,
    PROP_PRODUCER_GROUP,
    PROP_TRANSACTION_ID,
    PROP_HALF_OFFSET,
    PROP_RETRY_TOPIC,
    PROP_ORIGIN_MESSAGE_ID,
    PROP_RECONSUME_TIME,
    PROP_MAX_RECONSUME_TIMES,
    PROP_FAILURE_REASON,
    PROP_DLQ_ORIGIN_TOPIC,
    PROP_DLQ_ORIGIN_MESSAGE_ID,
    PROP_DLQ_RESENT_FROM,
}


def millis(d: Duration) -> int:
    return int(d.seconds) * 1000 + int(d.nanos) // 1_000_000


def _timestamp(ms: int) -> Timestamp:
    return Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def check_group(group: pb.Resource) -> str:
    """The consumer group's name; :class:`Refused` when it cannot name one (or names a
    namespace: RocketMQ's namespaces are not served, and ignoring one would mix two
    applications' groups)."""
    no_namespace(group, "consumer group")
    bad = group_error(group.name)
    if bad is not None:
        raise Refused(pb.ILLEGAL_CONSUMER_GROUP, bad)
    return group.name


def filter_expression(expression: pb.FilterExpression) -> tuple[str, str]:
    """The broker's filter type (TAG or SQL92) and expression for a receive's or pull's filter
    (``*`` of TAG when none is given). A malformed expression, or one of an unknown type, is
    ILLEGAL_FILTER_EXPRESSION (a SQL92 one with its position and reason); whether the broker
    serves SQL92 (``enable_property_filter``) the broker's answer says (UNSUPPORTED)."""
    if expression.type == pb.SQL:
        kind, text = SQL92, expression.expression
    elif expression.type in (pb.FILTER_TYPE_UNSPECIFIED, pb.TAG):
        kind, text = TAG, expression.expression.strip() or "*"
    else:
        raise Refused(pb.ILLEGAL_FILTER_EXPRESSION, f"unknown filter type {expression.type}")
    try:
        parse_filter(kind, text)
    except FilterError as exc:
        what = "" if kind == SQL92 else f"tag expression {text!r}: "
        raise Refused(pb.ILLEGAL_FILTER_EXPRESSION, f"{what}{exc}") from None
    return kind, text


@dataclass(frozen=True, slots=True)
class ReceivePlan:
    """A checked ReceiveMessageRequest: what the POP asks for."""

    group: str
    topic: str
    expression_type: str
    expression: str
    batch: int
    invisible_ms: int
    poll_ms: int
    auto_renew: bool


def receive_plan(request: rpc.ReceiveMessageRequest, time_remaining: float | None) -> ReceivePlan:
    """Check a receive; ``time_remaining`` is the gRPC deadline (seconds from now, None for
    none): long polling ends early enough for the answer to reach the client before it."""
    group = check_group(request.group)
    topic = request.message_queue.topic.name
    if not topic:
        raise Refused(pb.ILLEGAL_TOPIC, "message_queue.topic is empty")
    no_namespace(request.message_queue.topic, "topic")
    expression_type, expression = filter_expression(request.filter_expression)
    if not 0 < request.batch_size <= MAX_POP_BATCH:
        raise Refused(
            pb.BAD_REQUEST, f"batch_size must be 1..{MAX_POP_BATCH}, not {request.batch_size}"
        )
    if request.HasField("invisible_duration"):
        invisible = millis(request.invisible_duration)
        if not MIN_INVISIBLE_MS <= invisible <= MAX_INVISIBLE_MS:
            raise Refused(
                pb.ILLEGAL_INVISIBLE_TIME,
                f"invisible_duration must be {MIN_INVISIBLE_MS}..{MAX_INVISIBLE_MS} ms, "
                f"not {invisible}",
            )
    elif request.auto_renew:
        invisible = AUTO_RENEW_INVISIBLE_MS
    else:
        raise Refused(
            pb.ILLEGAL_INVISIBLE_TIME, "invisible_duration is required without auto_renew"
        )
    poll = DEFAULT_LONG_POLLING_MS
    if request.HasField("long_polling_timeout"):
        poll = millis(request.long_polling_timeout)
        if poll < 0:
            raise Refused(pb.ILLEGAL_POLLING_TIME, f"long_polling_timeout {poll} ms is negative")
    if time_remaining is not None:
        margin = min(2.0, 0.2 * max(0.0, time_remaining))
        poll = min(poll, max(0, int((time_remaining - margin) * 1000)))
    return ReceivePlan(
        group,
        topic,
        expression_type,
        expression,
        request.batch_size,
        invisible,
        poll,
        request.auto_renew,
    )


def _kind(props: Mapping[str, str]) -> int:
    if PROP_MESSAGE_GROUP in props:
        return pb.FIFO
    if PROP_TIMER_OUT_MS in props or PROP_START_DELIVER_TIME in props:
        return pb.DELAY
    if PROP_TRANSACTION_PREPARED in props:
        return pb.TRANSACTION
    return pb.NORMAL


def _delivery_ms(props: Mapping[str, str]) -> int | None:
    for name in (PROP_TIMER_OUT_MS, PROP_START_DELIVER_TIME):
        try:
            return int(props[name])
        except (KeyError, ValueError):
            continue
    return None


def body_md5(body: bytes) -> str:
    """The body digest handed to consumers: MD5 as upper-case hex, as RocketMQ's proxy sends
    it. Not CRC32: the clients do not agree on its text (the Python client expects 8 upper-case
    hex digits, the Node.js client decimal) and would flag every message of the other form as
    corrupted; every client reads MD5 the same way."""
    return hashlib.md5(body, usedforsecurity=False).hexdigest().upper()


def received_message(
    record: MessageRecord, group: str, handle: str, attempt: int, invisible_ms: int
) -> pb.Message:
    """A popped record as the clients read it: the topic it was sent to (a retry copy's first
    topic), the body with its MD5 digest, the producer's message id (the same on every
    attempt), tag, keys, message group, delivery time, born/store time and host, queue and
    offset, the receipt handle, invisible duration and delivery attempt, and the application's
    properties (none of the broker's own)."""
    try:
        props = record.properties
    except RecordError:
        props = {}
    topic = record.topic
    if topic == retry_topic(group):
        topic = props.get(PROP_RETRY_TOPIC) or topic
    out = pb.Message(topic=pb.Resource(name=topic), body=record.body)
    sysp = out.system_properties
    tags = props.get(PROP_TAGS)
    if tags:
        sysp.tag = tags
    sysp.keys.extend(props.get(PROP_KEYS, "").split())
    sysp.message_id = origin_message_id(props, record.msg_id)
    sysp.body_digest.type = pb.MD5
    sysp.body_digest.checksum = body_md5(record.body)
    sysp.body_encoding = pb.IDENTITY
    sysp.message_type = _kind(props)  # type: ignore[assignment]
    sysp.born_timestamp.CopyFrom(_timestamp(record.born_timestamp))
    sysp.born_host = record.born_host
    sysp.store_timestamp.CopyFrom(_timestamp(record.store_timestamp))
    sysp.store_host = record.store_host
    deliver = _delivery_ms(props)
    if deliver is not None:
        sysp.delivery_timestamp.CopyFrom(_timestamp(deliver))
    sysp.receipt_handle = handle
    sysp.queue_id = record.queue_id
    sysp.queue_offset = record.queue_offset
    sysp.invisible_duration.CopyFrom(
        Duration(seconds=invisible_ms // 1000, nanos=(invisible_ms % 1000) * 1_000_000)
    )
    sysp.delivery_attempt = attempt
    message_group = props.get(PROP_MESSAGE_GROUP)
    if message_group:
        sysp.message_group = message_group
    trace_context = props.get(PROP_TRACE_CONTEXT)
    if trace_context:
        sysp.trace_context = trace_context
    if PROP_DLQ_ORIGIN_TOPIC in props:
        sysp.dead_letter_queue.topic = props[PROP_DLQ_ORIGIN_TOPIC]
        sysp.dead_letter_queue.message_id = props.get(PROP_DLQ_ORIGIN_MESSAGE_ID, "")
    for name, value in props.items():
        if name not in SYSTEM_PROPERTIES:
            out.user_properties[name] = value
    return out


# -- acks and changes ----------------------------------------------------------------------------

_HANDLE_CODES: Final[Mapping[int, int]] = {
    ResponseCode.SUCCESS: pb.OK,
    ResponseCode.RECEIPT_HANDLE_INVALID: pb.INVALID_RECEIPT_HANDLE,
    ResponseCode.RECEIPT_HANDLE_EXPIRED: pb.INVALID_RECEIPT_HANDLE,
    ResponseCode.BAD_REQUEST: pb.BAD_REQUEST,
}


def handle_code(remoting_code: int, otherwise: int) -> int:
    """The code of an ack or change answer: a refused handle (forged, another group's, no
    longer in flight) is INVALID_RECEIPT_HANDLE, as the clients expect."""
    return _HANDLE_CODES.get(remoting_code, otherwise)


_SPACE: Final = re.compile(r"\s")


def check_handle(text: str) -> str | None:
    """Why ``text`` cannot be a receipt handle this endpoint issued (None: it may be)."""
    if not text:
        return "receipt_handle is empty"
    if len(text) > 2048:
        return "receipt_handle is longer than 2048 characters"
    if _SPACE.search(text) is not None:
        return "receipt_handle holds white space"
    return None


def batch_remarks(remark: str, count: int) -> list[str]:
    """Per entry the reason of a BATCH_ACK_MESSAGE answer's ``remark`` (``#i: why; #j: why``)."""
    out = [""] * count
    for part in remark.split("; #"):
        index, sep, why = part.removeprefix("#").partition(": ")
        if sep and index.isdigit() and int(index) < count:
            out[int(index)] = why
    return out


def overall(statuses: Sequence[pb.Status]) -> pb.Status:
    """One status for several entries: theirs when they agree, MULTIPLE_RESULTS otherwise."""
    if not statuses:
        return pb.Status(code=pb.OK, message="OK")
    first = statuses[0]
    if all(s.code == first.code for s in statuses):
        return pb.Status(code=first.code, message=first.message)
    return pb.Status(code=pb.MULTIPLE_RESULTS, message="the entries had different results")


# -- settings ------------------------------------------------------------------------------------


def subscription_settings(
    out: pb.Settings, config: SubscriptionGroupConfig, language: int = pb.LANGUAGE_UNSPECIFIED
) -> None:
    """Fill a consumer's Telemetry answer from its group's settings: FIFO from
    ``consumeMessageOrderly``, at most ``retryMaxTimes`` + 1 delivery attempts, a nacked
    message hidden for the group's retry delay of its attempt (whole seconds, at least 1).
    The Node.js client (``language`` NODE_JS) reads no customized backoff: it would keep no
    retry policy and so take one delivery attempt as its limit (a FIFO push consumer sends a
    message it failed once to the DLQ and goes on with the message group's next); it gets an
    exponential backoff from the first delay to the longest instead, doubling while they grow."""
    sub = out.subscription
    sub.fifo = config.consume_orderly
    sub.receive_batch_size = RECEIVE_BATCH_SIZE
    sub.long_polling_timeout.CopyFrom(Duration(seconds=DEFAULT_LONG_POLLING_MS // 1000))
    policy = pb.RetryPolicy(max_attempts=config.retry_max_times + 1)
    seconds = [max(1, -(-ms // 1000)) for ms in config.retry_delays_ms]
    if language == pb.NODE_JS:
        first, longest = (seconds[0], max(seconds)) if seconds else (1, 1)
        policy.exponential_backoff.CopyFrom(
            pb.ExponentialBackoff(
                initial=Duration(seconds=first),
                max=Duration(seconds=longest),
                multiplier=2.0 if longest > first else 1.0,
            )
        )
    else:
        for s in seconds:
            policy.customized_backoff.next.add(seconds=s)
    out.backoff_policy.CopyFrom(policy)


def assignments(route: Sequence[pb.MessageQueue]) -> list[pb.Assignment]:
    """A push consumer's assignments from the topic's route: one per broker group, queue id -1
    (any queue of the group: a POP reads them all), as RocketMQ's proxy hands them out."""
    seen: dict[str, pb.Assignment] = {}
    for queue in route:
        name = queue.broker.name
        if name in seen:
            continue
        mq = pb.MessageQueue()
        mq.CopyFrom(queue)
        mq.id = -1
        seen[name] = pb.Assignment(message_queue=mq)
    return list(seen.values())
