"""A consumer group's dead-letter queue for any front: QUERY_DLQ_MESSAGES' and
RESEND_DLQ_MESSAGES' processor (:mod:`broker.processors.dlq`) calls :meth:`DeadLetterService.query`
and :meth:`DeadLetterService.resend` with the typed requests' fields and encodes their typed
results.

The DLQ is ``%DLQ%<group>``, one queue. A query reads only what consumers may see, on master
and slave alike, and says of each message whether it was re-sent. A resend (master only)
appends each message not re-sent before to its original topic as a fresh message (the
application's properties kept, the reconsume count reset, ``DLQ_RESENT_FROM`` naming the DLQ
message), waits until they are as durable as a send, then records them in the resend ledger
(``config/dlqResent.json``, copied by slaves). A crash between the append and the ledger write
sends those messages again on the next request: re-sending is at least once, like every
delivery.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass

from broker.dlq.host import DeadLetterHost
from broker.durable_wait import wait_durable
from broker.write_gate import WriteRefused
from protocol.broker_requests.dlq import MAX_QUERY
from protocol.codes import ResponseCode
from protocol.fields import FieldError
from protocol.message import MessageRecord, MsgIdMaker, RecordError, iter_records, message_copy
from protocol.message import parse_msg_id as parse_id
from protocol.refusal import RequestRefused
from protocol.retry import (
    PROP_FAILURE_REASON,
    dlq_origin_topic,
    dlq_topic,
    origin_message_id,
    reconsume_times,
    resent_properties,
)
from storage.errors import StoreError
from storage.store import GetStatus, PutResult

__all__ = [
    "DeadLetterService",
    "DlqEntry",
    "DlqPage",
    "DlqRefused",
    "Resent",
    "ResentMessage",
    "SkippedMessage",
]

_READ_BATCH = 256
_READ_BYTES = 4 * 1024 * 1024


class DlqRefused(RequestRefused):
    """A resend refused (or not durable, or not recorded): ``code`` and ``remark`` go into
    the answer."""


@dataclass(frozen=True, slots=True)
class DlqEntry:
    """One message of a DLQ: where it came from, why it was parked, whether it was re-sent."""

    msg_id: str
    queue_offset: int
    origin_topic: str
    origin_msg_id: str
    reconsume_times: int
    reason: str
    store_timestamp: int
    body_size: int
    resent: bool


@dataclass(frozen=True, slots=True)
class DlqPage:
    """A query's messages, the offset to ask from next, and the DLQ's end."""

    messages: list[DlqEntry]
    next_offset: int
    max_offset: int


@dataclass(frozen=True, slots=True)
class ResentMessage:
    dlq_msg_id: str
    topic: str
    msg_id: str


@dataclass(frozen=True, slots=True)
class SkippedMessage:
    dlq_msg_id: str
    why: str


@dataclass(frozen=True, slots=True)
class Resent:
    """What a resend sent (the copies' topics and message ids) and what it passed over, why."""

    resent: list[ResentMessage]
    skipped: list[SkippedMessage]


class DeadLetterService:
    """Listing and re-sending a group's DLQ (see the module docstring). Loop thread only."""

    def __init__(self, host: DeadLetterHost) -> None:
        self.host = host
        self._msg_id = MsgIdMaker(host.cfg.listen)
        self._resend_lock = asyncio.Lock()

    # -- query ---------------------------------------------------------------------------------
    def query(self, group: str, start: int, max_count: int) -> DlqPage:
        """Up to ``max_count`` visible messages of ``group``'s DLQ from queue offset ``start``
        (negative: its first retained offset)."""
        topic = dlq_topic(group)
        store = self.host.store
        if start < 0:
            start = store.queue_min_offset(topic, 0)
        out: list[DlqEntry] = []
        next_offset = start
        for record in self._records(topic, start, max_count):
            out.append(self._describe(group, record))
            next_offset = record.queue_offset + 1
        return DlqPage(out, next_offset, store.queue_max_offset(topic, 0))

    def _describe(self, group: str, r: MessageRecord) -> DlqEntry:
        props = r.properties
        return DlqEntry(
            msg_id=r.msg_id,
            queue_offset=r.queue_offset,
            origin_topic=dlq_origin_topic(props),
            origin_msg_id=origin_message_id(props, ""),
            reconsume_times=reconsume_times(props),
            reason=props.get(PROP_FAILURE_REASON, ""),
            store_timestamp=r.store_timestamp,
            body_size=len(r.body),
            resent=self.host.dlq_resent.was_resent(group, r.queue_offset),
        )

    def _records(self, topic: str, offset: int, limit: int) -> Iterator[MessageRecord]:
        """Up to ``limit`` visible records of the DLQ queue from queue ``offset``."""
        host = self.host
        left = limit
        while left > 0:
            res = host.store.get(
                topic, 0, offset, min(left, _READ_BATCH), _READ_BYTES, host.visible_offset()
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

    # -- resend --------------------------------------------------------------------------------
    async def resend(self, group: str, msg_id: str | None) -> Resent:
        """Re-send the DLQ message ``msg_id`` names (None or "": every message of the DLQ, up to
        :data:`~protocol.broker_requests.dlq.MAX_QUERY`); raises :class:`DlqRefused`, and
        :class:`~protocol.fields.FieldError` for a malformed ``msg_id``."""
        host = self.host
        try:
            host.gate.check_writable()
        except WriteRefused as refused:
            raise DlqRefused(refused.code, refused.remark) from None
        topic = dlq_topic(group)
        async with self._resend_lock:  # two requests never both resend one message
            if msg_id:
                record = self._by_id(topic, msg_id)
                if record is None:
                    raise DlqRefused(
                        ResponseCode.MESSAGE_NOT_FOUND,
                        f"{msg_id} is not a message of {topic} on {host.cfg.broker_name}",
                    )
                records = [record]
            else:
                start = host.store.queue_min_offset(topic, 0)
                records = list(self._records(topic, start, MAX_QUERY))
            return await self._resend(group, records)

    def _by_id(self, topic: str, msg_id: str) -> MessageRecord | None:
        try:
            _host, offset = parse_id(msg_id)
        except RecordError as exc:
            raise FieldError(str(exc)) from None
        record = self.host.record_at(offset)
        if record is None or record.topic != topic:
            return None
        return record

    async def _resend(self, group: str, records: list[MessageRecord]) -> Resent:
        host = self.host
        resent: list[ResentMessage] = []
        skipped: list[SkippedMessage] = []
        offsets: list[int] = []
        last: PutResult | None = None
        by_topic: dict[str, int] = {}
        for r in records:
            if host.dlq_resent.was_resent(group, r.queue_offset):
                skipped.append(SkippedMessage(r.msg_id, "re-sent before"))
                continue
            topic = dlq_origin_topic(r.properties)
            tc = host.topics.get(topic) if topic else None
            if tc is None:
                why = f"its topic {topic} does not exist" if topic else "it names no topic"
                skipped.append(SkippedMessage(r.msg_id, why))
                continue
            msg = message_copy(r, topic, resent_properties(r.properties, r.msg_id))
            try:
                last = host.appender.put(
                    topic, host.next_queue(topic, tc.queues), [msg], len(r.body)
                )
            except StoreError as exc:
                skipped.append(SkippedMessage(r.msg_id, f"not stored: {exc}"))
                break
            offsets.append(r.queue_offset)
            by_topic[topic] = by_topic.get(topic, 0) + 1
            resent.append(ResentMessage(r.msg_id, topic, self._msg_id(last.physical_offsets[0])))
        if last is not None:
            # The last append is durable only when every earlier one is (one CommitLog).
            code, remark = await wait_durable(host, last)
            if code != ResponseCode.SUCCESS:
                raise DlqRefused(code, f"re-sent messages not durable: {remark}")
            try:
                host.dlq_resent.mark(group, offsets)
            except StoreError as exc:
                raise DlqRefused(
                    ResponseCode.SYSTEM_ERROR, f"re-sent, but not recorded: {exc}"
                ) from None
            for topic, count in by_topic.items():
                host.metrics.resent_from_dlq(group, topic, count)
        return Resent(resent, skipped)
