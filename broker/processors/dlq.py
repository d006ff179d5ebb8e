"""A consumer group's dead-letter queue: QUERY_DLQ_MESSAGES (5200) lists it, RESEND_DLQ_MESSAGES
(5201) re-sends its messages to their original topic. Both are our own codes.

The DLQ is ``%DLQ%<group>``, one queue, readable like any topic. QUERY_DLQ_MESSAGES (header
``consumerGroup``, optional ``offset`` and ``maxCount``) answers a msgpack map
``{"messages": [...], "nextOffset", "maxOffset"}``, each message
``{"msgId", "queueOffset", "originTopic", "originMsgId", "reconsumeTimes", "reason",
"storeTimestamp", "bodySize", "resent"}``; it reads only what consumers may see, on master and
slave alike.

RESEND_DLQ_MESSAGES (header ``consumerGroup`` and either ``msgId`` or ``all = true``; master
only) appends each message not re-sent before to its original topic as a fresh message (the
application's properties kept, the reconsume count reset, ``DLQ_RESENT_FROM`` naming the DLQ
message), waits until they are as durable as a send, then records them in the resend ledger
(``config/dlqResent.json``, copied by slaves) and answers
``{"resent": [{"dlqMsgId", "topic", "msgId"}], "skipped": [{"dlqMsgId", "why"}]}``.
A crash between the append and the ledger write sends those messages again on the next
request: re-sending is at least once, like every delivery.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import msgpack

from broker.context import BrokerContext
from broker.durable_wait import wait_durable
from broker.stored_record import visible_record_at
from broker.write_gate import WriteRefused
from protocol.broker_requests.dlq import MAX_QUERY, DlqQuery, DlqResend
from protocol.codes import RequestCode, ResponseCode
from protocol.fields import FieldError
from protocol.message import MessageRecord, MsgIdMaker, RecordError, iter_records, message_copy
from protocol.message import parse_msg_id as parse_id
from protocol.remoting import Frame, response
from protocol.retry import (
    PROP_FAILURE_REASON,
    dlq_origin_topic,
    dlq_topic,
    origin_message_id,
    reconsume_times,
    resent_properties,
)
from remoting.server import Connection, RemotingServer, error_response
from storage.errors import StoreError
from storage.store import GetStatus, PutResult

_READ_BATCH = 256
_READ_BYTES = 4 * 1024 * 1024


class DeadLetterProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self._msg_id = MsgIdMaker(ctx.cfg.listen)
        self._resend_lock = asyncio.Lock()

    def register(self, server: RemotingServer) -> None:
        server.register(RequestCode.QUERY_DLQ_MESSAGES, self.query)
        server.register(RequestCode.RESEND_DLQ_MESSAGES, self.resend)

    # -- QUERY_DLQ_MESSAGES --------------------------------------------------------------------
    def query(self, conn: Connection, req: Frame) -> Frame:
        query = DlqQuery.parse(req.header, req.body)
        group, start, max_count = query.group, query.offset, query.max_count
        topic = dlq_topic(group)
        store = self.ctx.store
        if start < 0:
            start = store.queue_min_offset(topic, 0)
        out: list[dict[str, Any]] = []
        next_offset = start
        for record in self._records(topic, start, max_count):
            out.append(self._describe(group, record))
            next_offset = record.queue_offset + 1
        body = {
            "messages": out,
            "nextOffset": next_offset,
            "maxOffset": store.queue_max_offset(topic, 0),
        }
        return response(req, ResponseCode.SUCCESS, None, msgpack.packb(body))

    def _describe(self, group: str, r: MessageRecord) -> dict[str, Any]:
        props = r.properties
        return {
            "msgId": r.msg_id,
            "queueOffset": r.queue_offset,
            "originTopic": dlq_origin_topic(props),
            "originMsgId": origin_message_id(props, ""),
            "reconsumeTimes": reconsume_times(props),
            "reason": props.get(PROP_FAILURE_REASON, ""),
            "storeTimestamp": r.store_timestamp,
            "bodySize": len(r.body),
            "resent": self.ctx.dlq_resent.was_resent(group, r.queue_offset),
        }

    def _records(self, topic: str, offset: int, limit: int) -> Iterator[MessageRecord]:
        """Up to ``limit`` visible records of the DLQ queue from queue ``offset``."""
        ctx = self.ctx
        left = limit
        while left > 0:
            res = ctx.store.get(
                topic, 0, offset, min(left, _READ_BATCH), _READ_BYTES, ctx.visible_offset()
            )
            if res.status is GetStatus.OFFSET_TOO_SMALL:
                offset = res.next_offset
                continue
            if res.status is not GetStatus.FOUND:
                return
            for record in iter_records(res.body):
                yield record
                left -= 1
                if left == 0:
                    return
            offset = res.next_offset

    # -- RESEND_DLQ_MESSAGES -------------------------------------------------------------------
    async def resend(self, conn: Connection, req: Frame) -> Frame:
        resend = DlqResend.parse(req.header, req.body)
        group, msg_id = resend.group, resend.msg_id
        ctx = self.ctx
        try:
            ctx.check_writable()
        except WriteRefused as refused:
            return error_response(req, refused.code, refused.remark)
        topic = dlq_topic(group)
        async with self._resend_lock:  # two requests never both resend one message
            if msg_id:
                record = self._by_id(topic, msg_id)
                if record is None:
                    return error_response(
                        req,
                        ResponseCode.MESSAGE_NOT_FOUND,
                        f"{msg_id} is not a message of {topic} on {ctx.cfg.broker_name}",
                    )
                records = [record]
            else:
                start = ctx.store.queue_min_offset(topic, 0)
                records = list(self._records(topic, start, MAX_QUERY))
            return await self._resend(req, group, records)

    def _by_id(self, topic: str, msg_id: str) -> MessageRecord | None:
        try:
            _host, offset = parse_id(msg_id)
        except RecordError as exc:
            raise FieldError(str(exc)) from None
        record = visible_record_at(self.ctx, offset)
        if record is None or record.topic != topic:
            return None
        return record

    async def _resend(self, req: Frame, group: str, records: list[MessageRecord]) -> Frame:
        ctx = self.ctx
        resent: list[dict[str, Any]] = []
        skipped: list[dict[str, str]] = []
        offsets: list[int] = []
        last: PutResult | None = None
        by_topic: dict[str, int] = {}
        for r in records:
            if ctx.dlq_resent.was_resent(group, r.queue_offset):
                skipped.append({"dlqMsgId": r.msg_id, "why": "re-sent before"})
                continue
            topic = dlq_origin_topic(r.properties)
            tc = ctx.topics.get(topic) if topic else None
            if tc is None:
                why = f"its topic {topic} does not exist" if topic else "it names no topic"
                skipped.append({"dlqMsgId": r.msg_id, "why": why})
                continue
            msg = message_copy(r, topic, resent_properties(r.properties, r.msg_id))
            try:
                last = ctx.appender.put(topic, ctx.next_queue(topic, tc.queues), [msg], len(r.body))
            except StoreError as exc:
                skipped.append({"dlqMsgId": r.msg_id, "why": f"not stored: {exc}"})
                break
            offsets.append(r.queue_offset)
            by_topic[topic] = by_topic.get(topic, 0) + 1
            resent.append(
                {
                    "dlqMsgId": r.msg_id,
                    "topic": topic,
                    "msgId": self._msg_id(last.physical_offsets[0]),
                }
            )
        if last is not None:
            # The last append is durable only when every earlier one is (one CommitLog).
            code, remark = await wait_durable(ctx, last)
            if code != ResponseCode.SUCCESS:
                return error_response(req, code, f"re-sent messages not durable: {remark}")
            try:
                ctx.dlq_resent.mark(group, offsets)
            except StoreError as exc:
                return error_response(
                    req, ResponseCode.SYSTEM_ERROR, f"re-sent, but not recorded: {exc}"
                )
            for topic, count in by_topic.items():
                ctx.metrics.resent_from_dlq(group, topic, count)
        body = {"resent": resent, "skipped": skipped}
        return response(req, ResponseCode.SUCCESS, None, msgpack.packb(body))
