"""What the broker sees of a message, as trace records (:mod:`protocol.trace`).

:class:`BrokerTracer` is told of every CommitLog put (an :class:`~broker.appender.Appender` put
listener) and of POP handouts, acks and changes of invisible time (:class:`~broker.pop.service.
PopService`), and of transaction ends; it offers records to a :class:`~broker.trace.writer.
TraceWriter`. It never raises into its caller: a record it cannot make is logged and skipped.

A message is traced by the id its producer was given (:func:`protocol.retry.origin_message_id`:
``UNIQ_KEY`` for the official clients, else its first stored id), so its retry and DLQ copies,
and its scheduled delivery, are found under the same id. What a put is, by its topic and
properties:

- the trace topic and the broker's own system topics (``rmq_sys_...``, the transaction op
  topic): nothing;
- the timer's topic: a scheduled send (Pub, msgType Delay_Msg), a recall (``TIMER_DEL_UNIQKEY``:
  Recall), or a retry with back-off (``REAL_TOPIC`` a ``%RETRY%`` topic: Retry);
- the transaction half topic: a transactional send (Pub, msgType Trans_Msg_Half);
- ``%RETRY%<group>``: Retry (unless it is the timer's delivery of one); ``%DLQ%<group>``: DLQ;
- any other topic: a scheduled message delivered (``TIMER_SOURCE_OFFSET``: Delay), a committed
  transaction (already traced by its end: nothing), else a send (Pub).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Final, Protocol

import structlog

from broker.trace.writer import TraceWriter
from protocol.message import Message, MessageRecord, MsgIdMaker, decode_record
from protocol.pop import ReceiptHandle
from protocol.retry import (
    DLQ_GROUP_TOPIC_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    origin_message_id,
    reconsume_times,
)
from protocol.timer import (
    PROP_REAL_TOPIC,
    PROP_TIMER_DEL_UNIQKEY,
    PROP_TIMER_OUT_MS,
    PROP_TIMER_SOURCE_OFFSET,
    TIMER_TOPIC,
)
from protocol.trace import (
    DEFAULT_REGION,
    PROP_TRACE_CONTEXT,
    SOURCE_BROKER,
    ConsumeReturn,
    EndRecord,
    EndTransactionRecord,
    MessageType,
    SubAfterRecord,
    SubBeforeRecord,
    TraceRecord,
    TraceType,
    encode_line,
    pub_fields,
)
from protocol.transaction import (
    HALF_TOPIC,
    OP_TOPIC,
    PROP_HALF_OFFSET,
    PROP_PRODUCER_GROUP,
    PROP_TRANSACTION_ID,
    PROP_TRANSACTION_PREPARED,
)
from storage.store import PutResult

__all__ = ["BrokerTracer"]

log = structlog.get_logger(__name__)

_HANDED_MAX: Final = 100_000
"""Handouts whose message id and keys are remembered until their ack (else it is read)."""


class Handed(Protocol):
    """A message handed out by POP (:class:`broker.pop.message.PopMessage`)."""

    @property
    def raw(self) -> bytes: ...
    @property
    def handle(self) -> str: ...
    @property
    def attempt(self) -> int: ...


class BrokerTracer:
    """Turns the broker's events into trace records. Loop thread only."""

    def __init__(
        self,
        writer: TraceWriter,
        store_host: str,
        now_ms: Callable[[], int],
        read: Callable[[str, int, int], MessageRecord | None],
    ) -> None:
        self.writer = writer
        self.store_host = store_host
        self._msg_id = MsgIdMaker(store_host)
        self._now_ms = now_ms
        self._read = read
        self._handed: OrderedDict[tuple[int, int], tuple[str, str]] = OrderedDict()

    def _offer(self, record: TraceRecord | tuple[str, str]) -> None:
        self.writer.offer(record)

    # -- puts --------------------------------------------------------------------------------------
    def on_put(
        self, topic: str, queue_id: int, messages: Sequence[Message], result: PutResult
    ) -> None:
        """An Appender put listener; never raises."""
        if topic in (self.writer.topic, OP_TOPIC) or (
            topic.lower().startswith("rmq_sys_") and topic not in (TIMER_TOPIC, HALF_TOPIC)
        ):
            return
        try:
            for i, message in enumerate(messages):
                offset = result.physical_offsets[i]
                record = self._record_of_put(topic, queue_id, message, offset, result, i)
                if record is not None:
                    self._offer(record)
        except Exception as exc:  # a trace is never worth a failed put
            log.warning("no trace record for a put", topic=topic, error=repr(exc))

    def _record_of_put(
        self,
        topic: str,
        queue_id: int,
        message: Message,
        offset: int,
        result: PutResult,
        i: int,
    ) -> TraceRecord | tuple[str, str] | None:
        props = message.properties
        stored_id = self._msg_id(offset)
        msg_id = origin_message_id(props, stored_id)
        now = result.store_timestamp
        if topic == TIMER_TOPIC:
            real = props.get(PROP_REAL_TOPIC, "")
            recalled = props.get(PROP_TIMER_DEL_UNIQKEY)
            if recalled:
                return EndRecord(
                    kind=TraceType.RECALL,
                    timestamp=now,
                    group="",
                    topic=real,
                    msg_id=recalled,
                    store_host=self.store_host,
                )
            if real.startswith(RETRY_GROUP_TOPIC_PREFIX):
                return self._retry(real, message, msg_id, now, props.get(PROP_TIMER_OUT_MS, ""))
            return self._pub(real, -1, -1, message, msg_id, stored_id, now, MessageType.DELAY)
        if topic == HALF_TOPIC:
            real = props.get(PROP_REAL_TOPIC, "")
            return self._pub(real, -1, -1, message, msg_id, stored_id, now, MessageType.TRANS_HALF)
        delivered = PROP_TIMER_SOURCE_OFFSET in props
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            if delivered:
                return None  # traced as Retry when it went into the timer
            return self._retry(topic, message, msg_id, now, topic)
        if topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
            return EndRecord(
                kind=TraceType.DLQ,
                timestamp=now,
                group=topic[len(DLQ_GROUP_TOPIC_PREFIX) :],
                topic=topic,
                msg_id=msg_id,
                keys=message.keys,
                store_host=self.store_host,
                attempt=reconsume_times(props) + 1,
                detail=topic,
            )
        if delivered:
            return EndRecord(
                kind=TraceType.DELAY,
                timestamp=now,
                group="",
                topic=topic,
                msg_id=msg_id,
                keys=message.keys,
                store_host=self.store_host,
                detail=f"{queue_id}:{result.first_queue_offset + i}",
            )
        if PROP_HALF_OFFSET in props:
            return None  # a committed transaction: traced by its end
        kind = MessageType.NORMAL
        if props.get(PROP_TRANSACTION_PREPARED) == "true":
            kind = MessageType.TRANS_HALF
        return self._pub(
            topic, queue_id, result.first_queue_offset + i, message, msg_id, stored_id, now, kind
        )

    def _pub(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        message: Message,
        msg_id: str,
        stored_id: str,
        now: int,
        kind: MessageType,
    ) -> tuple[str, str]:
        """A Pub record, encoded at once (one per message stored: no record object made)."""
        props = message.properties
        born = message.born_timestamp
        return msg_id, encode_line(
            pub_fields(
                now, DEFAULT_REGION, props.get(PROP_PRODUCER_GROUP, ""), topic, msg_id,
                message.tags, message.keys, self.store_host, len(message.body),
                max(0, now - born) if born else 0, kind, stored_id, True, message.born_host,
                queue_id, queue_offset, props.get(PROP_TRACE_CONTEXT, ""), SOURCE_BROKER,
            )
        )  # fmt: skip

    def _retry(self, topic: str, message: Message, msg_id: str, now: int, detail: str) -> EndRecord:
        return EndRecord(
            kind=TraceType.RETRY,
            timestamp=now,
            group=topic[len(RETRY_GROUP_TOPIC_PREFIX) :],
            topic=topic,
            msg_id=msg_id,
            keys=message.keys,
            store_host=self.store_host,
            attempt=reconsume_times(message.properties),
            detail=detail,
        )

    # -- POP ---------------------------------------------------------------------------------------
    def popped(
        self,
        group: str,
        handed: Sequence[Handed],
        decode: Callable[[str], ReceiptHandle],
    ) -> None:
        """Messages handed out to ``group`` (one SubBefore each; ``decode`` reads their
        handles); never raises."""
        try:
            now = self._now_ms()
            for m in handed:
                record = decode_record(m.raw)
                props = record.properties
                msg_id = origin_message_id(props, record.msg_id)
                handle = decode(m.handle)
                request_id = f"{handle.checkpoint}.{handle.queue_offset}"
                self._remember(handle.key, msg_id, record.keys)
                self._offer(
                    SubBeforeRecord(
                        timestamp=now,
                        group=group,
                        request_id=request_id,
                        msg_id=msg_id,
                        retry_times=max(0, m.attempt - 1),
                        keys=record.keys,
                        traceparent=props.get(PROP_TRACE_CONTEXT, ""),
                        source=SOURCE_BROKER,
                    )
                )
        except Exception as exc:
            log.warning("no trace record for a POP", group=group, error=repr(exc))

    def _remember(self, key: tuple[int, int], msg_id: str, keys: str) -> None:
        handed = self._handed
        handed[key] = (msg_id, keys)
        if len(handed) > _HANDED_MAX:
            handed.popitem(last=False)

    def settled(self, handle: ReceiptHandle, now: int, *, acked: bool) -> None:
        """A delivery acked (``acked``) or given back (its invisible time changed): one
        SubAfter; never raises."""
        try:
            key = handle.key
            known = self._handed.pop(key, None) if acked else self._handed.get(key)
            if known is None:
                record = self._read(handle.topic, handle.queue_id, handle.queue_offset)
                if record is None:
                    return
                known = (origin_message_id(record.properties, record.msg_id), record.keys)
            msg_id, keys = known
            self._offer(
                SubAfterRecord(
                    timestamp=now,
                    group=handle.group,
                    request_id=f"{handle.checkpoint}.{handle.queue_offset}",
                    msg_id=msg_id,
                    cost_ms=max(0, now - handle.pop_ms),
                    success=acked,
                    keys=keys,
                    context_code=ConsumeReturn.SUCCESS if acked else ConsumeReturn.FAILED,
                    source=SOURCE_BROKER,
                )
            )
        except Exception as exc:
            log.warning("no trace record for an ack", group=handle.group, error=repr(exc))

    # -- transactions ----------------------------------------------------------------------------
    def transaction_ended(
        self, group: str, read_half: Callable[[], MessageRecord], state: str, *, from_check: bool
    ) -> None:
        """A transaction committed (``COMMIT_MESSAGE``) or rolled back (``read_half`` reads
        its half message); never raises."""
        try:
            half = read_half()
            props = half.properties
            self._offer(
                EndTransactionRecord(
                    timestamp=self._now_ms(),
                    group=group,
                    topic=props.get(PROP_REAL_TOPIC, half.topic),
                    msg_id=origin_message_id(props, half.msg_id),
                    tags=half.tags,
                    keys=half.keys,
                    store_host=self.store_host,
                    msg_type=MessageType.TRANS_HALF,
                    transaction_id=props.get(PROP_TRANSACTION_ID, ""),
                    state=state,
                    from_check=from_check,
                )
            )
        except Exception as exc:
            log.warning("no trace record for a transaction end", group=group, error=repr(exc))
