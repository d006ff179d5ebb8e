"""The transaction service: the broker's driver of :class:`TransactionState`
(docs/transactions.md).

* **State** lives in two CommitLog system topics: half records (``HALF_TOPIC``) and op records
  (``OP_TOPIC``), queue 0 of each. Only the master keeps the open transactions in memory; it
  builds them by reading both queues whole when it first needs them in its master epoch, and
  drops them when it stops being master. Slaves hold the same records (replicated like any
  message), so a new master checks back and commits what its predecessor left open.
* **Commit** appends the commit op, then the visible copy in the real topic (carrying the half's
  offset), in one synchronous step: nothing else can be appended between them. So only the last
  commit op of the log can lack its copy (a crash, or a failover that cut the log between the
  two); a new master looks at the record after that op and appends the copy when it is not there.
  A second commit of a committed half answers "already committed" and writes nothing.
* **Check-back** (a loop on the master, every ``transaction_check_interval_ms`` at most one
  second apart): an open half past its check time is pushed to a live producer of its group as
  CHECK_TRANSACTION_STATE (oneway; the producer answers with END_TRANSACTION) and a check op
  is appended; past ``transaction_check_max`` checks a discard op gives it up.

A loop over the open set rather than the timing wheel: the state is rebuilt from the op log
anyway, a wheel entry would be a second copy of the schedule to keep consistent with it, and
the next check time follows from the records (store time, last check op) alone.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import structlog

from broker.consumer_groups import ConnectionIndex, unindex
from broker.service_host import PerMasterEpoch
from broker.system_topic import read_system_topic
from broker.transaction.host import TransactionHost
from broker.transaction.state import Half, TransactionState
from daemon.tasks import cancel_and_wait, sleep_or_wake
from protocol.codes import RequestCode
from protocol.message import Message, MessageRecord, RecordError, message_copy
from protocol.remoting import Scalar, request
from protocol.transaction import (
    HALF_TOPIC,
    OP_TOPIC,
    PROP_HALF_OFFSET,
    PROP_PRODUCER_GROUP,
    PROP_TRANSACTION_ID,
    Op,
    OpKind,
    OpRecordError,
    decode_op,
    encode_op,
    half_properties,
    real_properties,
)
from storage.errors import StoreError
from storage.store import PutResult

if TYPE_CHECKING:
    from broker.trace.observer import BrokerTracer
    from remoting.server import Connection

__all__ = ["CheckRelay", "EndOutcome", "TransactionService"]

log = structlog.get_logger(__name__)

_CHECK_BATCH: Final = 256
_IDLE_S: Final = 1.0
_RETRY_LATER_MS: Final = 1000


@dataclass(frozen=True, slots=True)
class EndOutcome:
    """What END_TRANSACTION did: ``known`` False for an unknown transaction; ``resolution`` the
    half's state after the request (None: still open); ``already`` when it was resolved
    before; ``result`` the append to await (None: nothing written)."""

    known: bool
    resolution: OpKind | None = None
    already: bool = False
    result: PutResult | None = None
    group: str = ""


CheckRelay = Callable[[Half, bytes], None]
"""Sends the check-back of a half (and its record's bytes) to a producer that speaks another
door's protocol (the classic door's CHECK_TRANSACTION_STATE); without one, our own request."""


@dataclass(slots=True)
class _Producer:
    conn: Connection
    last_heartbeat_ms: int
    relay: CheckRelay | None = None


class TransactionService(PerMasterEpoch[TransactionState]):
    """Transactions of one broker. Loop thread only."""

    def __init__(self, host: TransactionHost) -> None:
        self.host: TransactionHost = host
        self.state: TransactionState | None = None
        self._epoch = -1
        self._producers: dict[str, dict[str, _Producer]] = {}
        self._by_connection: ConnectionIndex = {}
        """id(conn) -> (group, client id) of the producers heard over it: a closed connection
        drops its producers without a scan over every group's (issue 34)."""
        """producer group -> client id -> its connection (from its heartbeats)."""
        self._opaque = itertools.count(1)
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self.tracer: BrokerTracer | None = None
        """With trace_enabled: told of each commit and rollback (:mod:`broker.trace`)."""

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.create_task(self._check_loop(), name="transaction-check")

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait([self._task])
            self._task = None

    def _drop(self) -> None:
        if self.state is not None:
            log.info("transaction state dropped (no longer master)", open=self.state.open_count())
        self.state = None

    # -- producers ---------------------------------------------------------------------------------
    def producer_heartbeat(
        self, group: str, client_id: str, conn: Connection, relay: CheckRelay | None = None
    ) -> None:
        members = self._producers.setdefault(group, {})
        old = members.get(client_id)
        if old is not None and old.conn is not conn:
            unindex(self._by_connection, id(old.conn), (group, client_id))
        members[client_id] = _Producer(conn, self.host.now_ms(), relay)
        self._by_connection.setdefault(id(conn), set()).add((group, client_id))

    def connection_closed(self, conn: Connection) -> None:
        """Forget the producers heard over ``conn`` (only those: no scan of the rest)."""
        for group, cid in self._by_connection.pop(id(conn), set()):
            members = self._producers.get(group)
            if members is not None and cid in members and members[cid].conn is conn:
                del members[cid]
                if not members:
                    del self._producers[group]

    def _live_producer(self, group: str, now: int) -> _Producer | None:
        members = self._producers.get(group)
        if not members:
            return None
        expiry = self.host.cfg.client_expiry_ms
        for _cid, p in sorted(members.items(), key=lambda kv: kv[0]):
            if now - p.last_heartbeat_ms <= expiry and not p.conn.closed:
                return p
        return None

    # -- rebuild -------------------------------------------------------------------------------------
    def _rebuild(self) -> TransactionState:
        cfg = self.host.cfg
        state = TransactionState(cfg.transaction_check_first_ms, cfg.transaction_check_interval_ms)
        halves = list(read_system_topic(self.host.store, HALF_TOPIC))
        for record in halves:
            half = _half_of(record)
            if half is None:
                log.error("transaction half record skipped", offset=record.physical_offset)
                continue
            state.half(half)
        ops = 0
        for record in read_system_topic(self.host.store, OP_TOPIC):
            try:
                state.op(record.physical_offset, decode_op(record.body))
                ops += 1
            except OpRecordError as exc:
                log.error(
                    "transaction op record skipped", offset=record.physical_offset, error=str(exc)
                )
        log.info(
            "transaction state built from the CommitLog",
            halves=len(halves),
            ops=ops,
            open=state.open_count(),
        )
        self._repair_last_commit(state)
        self.host.metrics.transactions_open_now(state.open_count())
        self._wake.set()
        return state

    def _repair_last_commit(self, state: TransactionState) -> None:
        """Append the visible copy of the log's last commit when the log ends (or went on)
        without it: a crash or failover between the op and the copy."""
        last = state.last_commit
        if last is None:
            return
        op_offset, half_offset = last
        after = self._record_after(op_offset)
        if after is not None:
            try:
                if after.properties.get(PROP_HALF_OFFSET) == str(half_offset):
                    return
            except RecordError:
                pass
        if not self.host.gate.role.is_master:
            return
        log.warning(
            "transaction commit without its visible copy: appending it",
            half_offset=half_offset,
            op_offset=op_offset,
        )
        try:
            # The commit op again, then the copy: the pair is adjacent once more, so the next
            # master finds the copy right after the log's last commit op.
            op = Op(OpKind.COMMIT, half_offset, self.host.now_ms())
            self.host.store.read_message(half_offset)
            state.op(self._append_op(op).physical_offsets[0], op)
            self._append_copy(half_offset)
        except (StoreError, ValueError) as exc:
            log.error("transaction copy not appended", half_offset=half_offset, error=str(exc))

    def _record_after(self, offset: int) -> MessageRecord | None:
        store = self.host.store
        try:
            nxt = offset + store.read_message(offset).record.size
        except StoreError:
            return None
        if nxt >= store.max_offset:
            return None
        try:
            return store.read_message(nxt).record
        except StoreError:
            pass  # the end of a segment: the next record starts the next segment
        for start, _end in store.commitlog_segments():
            if start > nxt:
                try:
                    return store.read_message(start).record
                except StoreError:
                    return None
        return None

    # -- writes ----------------------------------------------------------------------------------
    def put_half(self, topic: str, queue_id: int, msg: Message) -> PutResult:
        """Store a transactional send as a half record (master; raises :class:`ValueError` for
        a send without producer group or transaction id, :class:`StoreError`)."""
        props = half_properties(msg.properties, topic, queue_id)
        state = self.ready()
        host = self.host
        host.ensure_system_topic(HALF_TOPIC)
        half = message_copy(msg, HALF_TOPIC, props)
        result = host.appender.put(HALF_TOPIC, 0, [half], len(msg.body))
        state.half(
            Half(
                result.physical_offsets[0],
                props[PROP_TRANSACTION_ID],
                props[PROP_PRODUCER_GROUP],
                result.store_timestamp,
            )
        )
        host.metrics.transaction_opened()
        host.metrics.transactions_open_now(state.open_count())
        return result

    def _append_op(self, op: Op) -> PutResult:
        host = self.host
        host.ensure_system_topic(OP_TOPIC)
        body = encode_op(op)
        return host.appender.put(OP_TOPIC, 0, [Message(topic=OP_TOPIC, body=body)], len(body))

    def _append_copy(self, half_offset: int) -> PutResult:
        host = self.host
        record = host.store.read_message(half_offset).record
        topic, queue_id, props = real_properties(record.properties, half_offset)
        tc = host.topics.get(topic)
        if tc is None:
            tc = host.create_topic(topic, max(host.cfg.default_topic_queues, queue_id + 1))
        copy = message_copy(record, topic, props)
        return host.appender.put(topic, queue_id % tc.queues, [copy], len(record.body))

    def end(
        self,
        group: str,
        transaction_id: str,
        half_offset: int | None,
        kind: OpKind | None,
        *,
        from_check: bool = False,
    ) -> EndOutcome:
        """END_TRANSACTION (master): commit, roll back, or (``kind`` None) leave open."""
        state = self.ready()
        found = state.find(half_offset, transaction_id)
        if found is None:
            return EndOutcome(known=False)
        owner = state.group_of(found)
        if owner != group:
            return EndOutcome(known=False, group=owner or "")
        half = state.open_half(found)
        if half is None:
            return EndOutcome(True, state.resolution(found), already=True)
        if kind is None:
            return EndOutcome(True, None)
        host = self.host
        now = host.now_ms()
        op = Op(kind, found, now)
        if kind is OpKind.COMMIT:
            # Read the half before writing anything: a half lost to retention fails cleanly.
            host.store.read_message(found)
            op_result = self._append_op(op)
            state.op(op_result.physical_offsets[0], op)
            result = self._append_copy(found)
            host.metrics.transaction_resolved(kind)
        else:
            result = self._append_op(op)
            state.op(result.physical_offsets[0], op)
            host.metrics.transaction_resolved(kind)
        host.metrics.transactions_open_now(state.open_count())
        if self.tracer is not None and kind in (OpKind.COMMIT, OpKind.ROLLBACK):
            self.tracer.transaction_ended(
                group,
                lambda: host.store.read_message(found).record,
                "COMMIT_MESSAGE" if kind is OpKind.COMMIT else "ROLLBACK_MESSAGE",
                from_check=from_check,
            )
        return EndOutcome(True, kind, result=result)

    # -- check-back --------------------------------------------------------------------------------
    async def _check_loop(self) -> None:
        host = self.host
        while True:
            timeout = min(_IDLE_S, host.cfg.transaction_check_interval_ms / 1000)
            try:
                if not host.gate.role.is_master:
                    self._drop()
                else:
                    host.gate.check_writable()
                    self.check_due(self.ready(), host.now_ms())
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a refused write (fenced, disk full): try again later
                log.warning("transaction check round failed", error=f"{type(exc).__name__}: {exc}")
            self._wake.clear()
            await sleep_or_wake(self._wake, timeout)

    def check_due(self, state: TransactionState, now: int) -> int:
        """Check back (or discard) every open half past its check time; returns how many."""
        due = state.due(now, _CHECK_BATCH)
        done = 0
        try:
            for half in due:
                self._check_one(state, half, now)
                done += 1
        finally:
            for half in due[done:]:  # a write failed: try these again later
                state.later(half, now + _RETRY_LATER_MS)
            if due:
                self.host.metrics.transactions_open_now(state.open_count())
        return done

    def _check_one(self, state: TransactionState, half: Half, now: int) -> None:
        if half.checks >= self.host.cfg.transaction_check_max:
            op = Op(OpKind.DISCARD, half.offset, now)
            state.op(self._append_op(op).physical_offsets[0], op)
            self.host.metrics.transaction_resolved(OpKind.DISCARD)
            log.warning(
                "transaction discarded: unresolved after the maximum number of checks",
                half_offset=half.offset,
                transaction_id=half.transaction_id,
                producer_group=half.group,
                checks=half.checks,
            )
            return
        sent = self._send_check(half, now)
        op = Op(OpKind.CHECK, half.offset, now)
        state.op(self._append_op(op).physical_offsets[0], op)
        self.host.metrics.transaction_checked(sent)

    def _send_check(self, half: Half, now: int) -> bool:
        producer = self._live_producer(half.group, now)
        if producer is None:
            log.info(
                "transaction check due but no producer of the group is connected",
                producer_group=half.group,
                half_offset=half.offset,
            )
            return False
        try:
            raw = self.host.store.read_message(half.offset).raw
        except StoreError as exc:
            log.warning(
                "transaction half unreadable for a check", half_offset=half.offset, error=str(exc)
            )
            return False
        if producer.relay is not None:
            producer.relay(half, raw)
            return True
        header: dict[str, Scalar] = {
            "producerGroup": half.group,
            "transactionId": half.transaction_id,
            "commitLogOffset": half.offset,
            "brokerName": self.host.cfg.broker_name,
        }
        producer.conn.send(
            request(
                RequestCode.CHECK_TRANSACTION_STATE, next(self._opaque), header, raw, oneway=True
            )
        )
        return True


def _half_of(record: MessageRecord) -> Half | None:
    try:
        props = record.properties
    except RecordError:
        return None
    txn_id = props.get(PROP_TRANSACTION_ID)
    group = props.get(PROP_PRODUCER_GROUP)
    if not txn_id or not group:
        return None
    return Half(record.physical_offset, txn_id, group, record.store_timestamp)
