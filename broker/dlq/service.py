"""A consumer group's dead-letter queue for any front: QUERY_DLQ_MESSAGES' and
RESEND_DLQ_MESSAGES' processor (:mod:`broker.processors.dlq`) calls :meth:`DeadLetterService.query`
and :meth:`DeadLetterService.resend` with the typed requests' fields and encodes their typed
results.

The DLQ is ``%DLQ%<group>``, one queue. A query reads only what consumers may see, on master
and slave alike, and says of each message whether it was re-sent. A resend (master only)
appends each message not re-sent before to its original topic as a fresh message (the
application's properties kept, the reconsume count reset, ``DLQ_RESENT_FROM`` naming the DLQ
message), waits until they are as durable as a send, then records them in the resend ledger
(``config/dlqResent.json``, copied by slaves with the CommitLog offset it covers).

The copies in the CommitLog are the record the ledger indexes: the first time a master needs
the ledger in its epoch it looks through the CommitLog from the ledger's ``covered`` offset
(what the slave it was had copied, about ``slave_config_sync_interval_ms`` behind its old
master, or what this broker wrote itself before a restart) to its end, and marks each copy's
DLQ message. So neither a failover right after a resend nor a crash between the append and
the ledger write sends a message again; a copy that did not reach the new master's CommitLog
(the resend was not answered) is sent again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Iterator
from dataclasses import dataclass

import structlog

from broker.dlq.host import DeadLetterHost
from broker.durable_wait import wait_durable
from broker.service_host import PerMasterEpoch
from broker.write_gate import WriteRefused
from protocol.broker_requests.dlq import MAX_QUERY
from protocol.codes import ResponseCode
from protocol.fields import FieldError
from protocol.message import (
    MessageRecord,
    MsgIdMaker,
    RecordError,
    decode_record,
    iter_records,
    message_copy,
)
from protocol.message import parse_msg_id as parse_id
from protocol.refusal import RequestRefused
from protocol.retry import (
    DLQ_GROUP_TOPIC_PREFIX,
    PROP_DLQ_RESENT_FROM,
    PROP_FAILURE_REASON,
    dlq_origin_topic,
    dlq_topic,
    origin_message_id,
    reconsume_times,
    resent_properties,
)
from storage.config_files import DlqResendLedger
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

log = structlog.get_logger(__name__)

_READ_BATCH = 256
_READ_BYTES = 4 * 1024 * 1024
_SCAN_BYTES = 8 * 1024 * 1024
_RESENT_MARK = PROP_DLQ_RESENT_FROM.encode() + b"\x01"
"""How a re-sent copy's property starts in its record: a chunk without it holds none."""
_NO_DAMAGE = 1 << 62
REBUILD_LIMIT = 128 * 1024 * 1024
"""The most of the CommitLog's end a build reads (synchronously, on the loop thread: at disk
speed a few hundred milliseconds at most, within a heartbeat timeout). A failover leaves about
one config copy interval (1 s) of log to read; a ledger from before ``covered`` existed, or a
lone master's after a restart, could leave much more: the copies older than this many bytes
before the end are not looked for (their marks are the ledger file's, as before)."""


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


class DeadLetterService(PerMasterEpoch[DlqResendLedger]):
    """Listing and re-sending a group's DLQ (see the module docstring). Loop thread only."""

    def __init__(self, host: DeadLetterHost) -> None:
        self.host: DeadLetterHost = host
        self.state: DlqResendLedger | None = None
        self._epoch = -1
        self._msg_id = MsgIdMaker(host.cfg.listen)
        self._resend_lock = asyncio.Lock()
        self._unmarked: dict[int, tuple[str, int]] = {}
        """CommitLog offset of each copy this master appended and has not marked yet (its
        resend waits, or its wait failed) -> (group, DLQ queue offset)."""
        self._rescan_from = _NO_DAMAGE
        """Where the last build passed over damaged CommitLog bytes (it is built again once they
        are repaired, from there)."""
        self.rebuild_limit = REBUILD_LIMIT
        """The most of the CommitLog's end a build reads (:data:`REBUILD_LIMIT`; tests lower it)."""

    # -- the ledger and the CommitLog ------------------------------------------------------------
    def covered(self) -> int:
        """The CommitLog offset below which every re-sent copy is in the ledger (what slaves
        copy with it): on a master that marked its predecessor's copies, up to its log's end
        or its first copy not marked yet, handed to the ledger too (its file takes it every
        :data:`~storage.config_files.COVERED_STEP`); else the ledger's own."""
        host = self.host
        role = host.gate.role
        if self.state is None or not role.is_master or self._epoch != role.master_epoch:
            return host.dlq_resent.covered
        covered = self._covered_without(())
        try:
            host.dlq_resent.mark_all({}, covered)
        except StoreError as exc:
            log.error("resend ledger: covered offset not written", error=str(exc))
        return covered

    def _covered_without(self, copies: Collection[int]) -> int:
        """:meth:`covered` on this master once ``copies`` are marked."""
        rest = (o for o in self._unmarked if o not in copies)
        return min(self._rescan_from, min(rest, default=self.host.store.max_offset))

    def _ledger(self) -> DlqResendLedger:
        """The ledger, with the copies of the CommitLog marked first on a master."""
        return self.ready() if self.host.gate.role.is_master else self.host.dlq_resent

    def _rebuild(self) -> DlqResendLedger:
        """Mark the DLQ message of every re-sent copy from the ledger's ``covered`` offset to
        the CommitLog's end (what a master before this epoch wrote after the ledger this
        broker holds was written or copied), at most :attr:`rebuild_limit` bytes. Costs a read
        of those bytes; only chunks that hold the property's name are decoded."""
        host = self.host
        ledger = host.dlq_resent
        store = host.store
        end = store.max_offset
        limit = self.rebuild_limit
        start = max(ledger.covered, store.min_offset, end - limit)
        if start > max(ledger.covered, store.min_offset):
            log.warning(
                "resend ledger: only the CommitLog's last bytes are looked through",
                covered=ledger.covered,
                scanned_from=start,
                limit=limit,
            )
        marks: dict[str, list[int]] = {}
        found = 0
        rescan_from = _NO_DAMAGE
        pos = start
        while pos < end:
            try:
                view, damage = store.read_checked(pos, min(_SCAN_BYTES, end - pos))
            except StoreError as exc:
                nxt = next((s for s, _e in store.commitlog_segments() if s > pos), end)
                log.warning("resend ledger: CommitLog unreadable", offset=pos, error=str(exc))
                pos = nxt
                continue
            if not len(view):
                if not damage:
                    break
                # Made known to the store: the ledger is built again from here once repaired.
                rescan_from = min(rescan_from, pos)
                pos += damage
                continue
            chunk = bytes(view)
            if _RESENT_MARK in chunk:
                try:
                    for record in iter_records(chunk):
                        dlq = record.properties.get(PROP_DLQ_RESENT_FROM)
                        origin = self._origin(dlq) if dlq else None
                        if origin is not None:
                            marks.setdefault(origin[0], []).append(origin[1])
                            found += 1
                except RecordError as exc:
                    log.error(
                        "resend ledger: bad bytes in the CommitLog", offset=pos, error=str(exc)
                    )
            pos += len(view)
        self._unmarked.clear()
        self._rescan_from = rescan_from
        try:
            ledger.mark_all(marks, min(end, rescan_from))
        except StoreError as exc:
            log.error("resend ledger: marks not written", error=str(exc))
        log.info(
            "resend ledger built from the CommitLog",
            scanned_from=start,
            scanned_bytes=end - start,
            copies=found,
        )
        return ledger

    def _origin(self, dlq_msg_id: str) -> tuple[str, int] | None:
        """(group, DLQ queue offset) of the DLQ message a copy names; None when it is gone."""
        store = self.host.store
        try:
            _host, offset = parse_id(dlq_msg_id)
            if not store.min_offset <= offset < store.max_offset:
                return None
            record = decode_record(bytes(store.read_raw(offset, 1)))
        except (RecordError, StoreError):
            return None
        if record.physical_offset != offset or not record.topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
            return None
        return record.topic[len(DLQ_GROUP_TOPIC_PREFIX) :], record.queue_offset

    def _settle(self, ledger: DlqResendLedger) -> None:
        """Mark the copies of a resend whose wait failed that consumers may see now."""
        done: dict[str, list[int]] = {}
        for offset, (group, queue_offset) in list(self._unmarked.items()):
            if self.host.record_at(offset) is not None:
                done.setdefault(group, []).append(queue_offset)
                del self._unmarked[offset]
        if done:
            ledger.mark_all(done)

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
        ledger = self._ledger()
        for record in self._records(topic, start, max_count):
            out.append(self._describe(ledger, group, record))
            next_offset = record.queue_offset + 1
        return DlqPage(out, next_offset, store.queue_max_offset(topic, 0))

    def _describe(self, ledger: DlqResendLedger, group: str, r: MessageRecord) -> DlqEntry:
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
            resent=ledger.was_resent(group, r.queue_offset),
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
        ledger = self.ready()
        self._settle(ledger)
        resent: list[ResentMessage] = []
        skipped: list[SkippedMessage] = []
        offsets: list[int] = []
        copies: list[int] = []
        last: PutResult | None = None
        by_topic: dict[str, int] = {}
        for r in records:
            if ledger.was_resent(group, r.queue_offset):
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
            copies.append(last.physical_offsets[0])
            self._unmarked[copies[-1]] = (group, r.queue_offset)
            by_topic[topic] = by_topic.get(topic, 0) + 1
            resent.append(ResentMessage(r.msg_id, topic, self._msg_id(last.physical_offsets[0])))
        if last is not None:
            # The last append is durable only when every earlier one is (one CommitLog).
            code, remark = await wait_durable(host, last)
            if code != ResponseCode.SUCCESS:
                raise DlqRefused(code, f"re-sent messages not durable: {remark}")
            try:
                ledger.mark(group, offsets, self._covered_without(copies))
            except StoreError as exc:
                raise DlqRefused(
                    ResponseCode.SYSTEM_ERROR, f"re-sent, but not recorded: {exc}"
                ) from None
            for copy in copies:
                self._unmarked.pop(copy, None)
            for topic, count in by_topic.items():
                host.metrics.resent_from_dlq(group, topic, count)
        return Resent(resent, skipped)
