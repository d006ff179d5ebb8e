"""The POP service: the broker's driver of the in-flight set (docs/pop.md).

* **State** lives in the revive log (:data:`~protocol.pop.REVIVE_TOPIC`, queue 0 of the
  CommitLog): the handle key, checkpoints, acks, changes of invisible time and revives. Only the
  master keeps the in-flight set in memory; it builds it by reading the revive log whole when it
  first needs it after becoming master, and drops it when it stops being master. A slave holds
  the same records (replicated like any message), so after a failover the new master builds the
  set its predecessor had, up to the last record replicated.
* **POP** (:meth:`PopService.pop`) reads from the group's POP offset of a queue, appends one
  checkpoint per queue read and applies it in the same synchronous step, then moves the group's
  consume offset to the end of what it read.
* **Ack / change** check the handle (signature, group, deadline) against the set, append the
  record and apply it in the same step.
* **Revive** (a task on the master): each in-flight entry whose deadline passed is read back,
  re-published to ``%RETRY%<group>`` (or ``%DLQ%<group>`` past the group's ``retryMaxTimes``)
  with its reconsume count + 1, and a ``REVIVED`` record follows the copy.
* **FIFO** consumer groups (``consumeMessageOrderly``) pop through
  :func:`~broker.pop.orderly_pop.pop_orderly`: a message group's next message only after the
  previous one is acked; an unacked one is handed out again in place and dead-lettered after
  the group's attempts (docs/fifo.md).

Every write is a CommitLog append through :class:`~broker.appender.Appender` on the master;
callers await its durability (:func:`~broker.durable_wait.wait_durable`) before answering.
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Final

import structlog

from broker.pop.host import PopHost
from broker.pop.inflight import Entry, PopRefused, PopState, Refusal
from broker.pop.message import PopMessage
from broker.pop.orderly_pop import exhausted, pop_orderly
from broker.service_host import PerMasterEpoch
from broker.system_topic import read_system_topic
from daemon.tasks import cancel_and_wait, sleep_or_wake
from protocol.filter import MessageFilter
from protocol.message import (
    DISPATCH_HEAD,
    Message,
    MessageRecord,
    RecordError,
    decode_record,
    iter_records,
    message_copy,
)
from protocol.pop import (
    HANDLE_KEY_BYTES,
    MAX_POP_BATCH,
    REVIVE_TOPIC,
    Ack,
    Change,
    Checkpoint,
    HandleKey,
    ReceiptHandle,
    Reset,
    Revived,
    ReviveRecord,
    ReviveRecordError,
    decode_handle,
    decode_revive_record,
    encode_handle,
    encode_revive_record,
)
from protocol.pop_snapshot import (
    SNAPSHOT_TOPIC,
    PopSnapshot,
    SnapshotPart,
    decode_snapshot,
    decode_snapshot_part,
    encode_snapshot,
)
from protocol.retry import (
    PROP_RETRY_TOPIC,
    DeadLetter,
    Retry,
    dlq_topic,
    next_step,
    origin_message_id,
    reconsume_times,
    retry_topic,
    sent_back_properties,
)
from storage.cold_read import ColdSpan
from storage.errors import MessageTooLargeError
from storage.store import GetStatus, PutResult

__all__ = ["PopMessage", "PopService"]

if TYPE_CHECKING:
    from broker.trace.observer import BrokerTracer

log = structlog.get_logger(__name__)

_REVIVE_BATCH: Final = 256
_REVIVE_IDLE_S: Final = 0.2
_RETRY_LATER_MS: Final = 1000
_BLOCKED_EVERY_MS: Final = 1000
_FILTER_READS: Final = 8
_FILTER_SCAN: Final = MAX_POP_BATCH
"""ConsumeQueue entries one filtered read looks at (at most a checkpoint's range)."""


def attempt_of(record: MessageRecord, group: str) -> int:
    """1 for a message read from its own topic; its reconsume count + 1 from the retry topic."""
    if record.topic == retry_topic(group):
        return reconsume_times(record.properties) + 1
    return 1


class PopService(PerMasterEpoch[PopState]):
    """POP deliveries of one broker. Loop thread only."""

    def __init__(self, host: PopHost) -> None:
        self.host: PopHost = host
        self.state: PopState | None = None
        self._epoch = -1
        """The master epoch the state was built in: a new term rebuilds it from the log."""
        self.key: HandleKey | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._wake = asyncio.Event()
        self._rotate = 0
        self._since_snapshot = 0
        """Revive-log records appended or replayed since the last snapshot."""
        self.built_from: int | None = None
        """The revive-log offset of the snapshot the set was last built from (None: none)."""
        self._blocked_at = 0
        self.acks = 0
        self.revived = 0
        self.dead_lettered = 0
        self.tracer: BrokerTracer | None = None
        """With trace_enabled: told of handouts, acks and changes (:mod:`broker.trace`)."""

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        self._tasks.append(asyncio.create_task(self._revive_loop(), name="pop-revive"))

    async def stop(self) -> None:
        await cancel_and_wait(self._tasks)
        self._tasks.clear()

    def _drop(self) -> None:
        if self.state is not None:
            log.info("pop state dropped (no longer master)", inflight=self.state.inflight())
        self.state = None
        self.key = None

    def _rebuild(self) -> PopState:
        """Take the last complete snapshot of the set, if any, and apply the revive log's
        records that follow it in order (the whole log without one)."""
        store = self.host.store
        snap = self._last_snapshot()
        if snap is None:
            state = PopState()
            self.key = None  # the first key record of the log is the group's
            start = 0
        else:
            state = PopState.restore(snap)
            self.key = None if snap.key is None else HandleKey(snap.key)
            start = snap.replay_from
        self.built_from = None if snap is None else start
        records = 0
        for record in read_system_topic(store, REVIVE_TOPIC, start):
            records += 1
            try:
                self._apply(state, record.physical_offset, decode_revive_record(record.body))
            except ReviveRecordError as exc:
                log.error(
                    "pop revive log record skipped",
                    offset=record.physical_offset,
                    error=str(exc),
                )
        log.info(
            "pop state built from the revive log",
            snapshot=None if snap is None else snap.replay_from,
            records=records,
            inflight=state.inflight(),
            key=self.key is not None,
        )
        self._since_snapshot = records
        self._wake.set()
        return state

    def _last_snapshot(self) -> PopSnapshot | None:
        """The last complete snapshot of the set (None: none, or it cannot be read: the
        whole revive log is replayed then)."""
        store = self.host.store
        end = store.queue_max_offset(SNAPSHOT_TOPIC, 0)
        if end == 0:
            return None
        try:
            last = self._snapshot_parts(end - 1, end)
            if not last:
                return None
            first = end - last[0].parts
            if last[0].part != last[0].parts - 1 or first < store.queue_min_offset(
                SNAPSHOT_TOPIC, 0
            ):
                raise ReviveRecordError("the last snapshot is not whole")
            return decode_snapshot(self._snapshot_parts(first, end))
        except ReviveRecordError as exc:
            log.error("pop snapshot not usable: the whole revive log is read", error=str(exc))
            return None

    def _snapshot_parts(self, start: int, end: int) -> list[SnapshotPart]:
        store = self.host.store
        parts: list[SnapshotPart] = []
        offset = start
        while offset < end:
            res = store.get(SNAPSHOT_TOPIC, 0, offset, end - offset, 1 << 26, None)
            if res.status is not GetStatus.FOUND:
                raise ReviveRecordError(f"snapshot part at {offset}: {res.status.name}")
            parts += [decode_snapshot_part(r.body) for r in iter_records(res.body)]
            offset = res.next_offset
        return parts

    def snapshot_if_due(self, state: PopState) -> bool:
        """Write a snapshot of the set once ``pop_snapshot_records`` revive-log records were
        appended or replayed since the last one; True when it wrote one."""
        every = self.host.cfg.pop_snapshot_records
        if every <= 0 or self._since_snapshot < every:
            return False
        self.write_snapshot(state)
        return True

    def write_snapshot(self, state: PopState) -> None:
        """Append the set as it stands to :data:`~protocol.pop_snapshot.SNAPSHOT_TOPIC`, one
        record per part, in one synchronous step (no revive record comes in between)."""
        host = self.host
        replay_from = host.store.queue_max_offset(REVIVE_TOPIC, 0)
        bodies = encode_snapshot(
            state.snapshot(replay_from, None if self.key is None else self.key.secret)
        )
        host.ensure_system_topic(SNAPSHOT_TOPIC)
        for body in bodies:
            host.appender.put(
                SNAPSHOT_TOPIC, 0, [Message(topic=SNAPSHOT_TOPIC, body=body)], len(body)
            )
        self._since_snapshot = 0
        log.info(
            "pop snapshot written",
            replay_from=replay_from,
            inflight=state.inflight(),
            parts=len(bodies),
            bytes=sum(len(b) for b in bodies),
        )

    def _apply(self, state: PopState, offset: int, record: ReviveRecord) -> None:
        if isinstance(record, HandleKey):
            if self.key is None:
                self.key = record
        else:
            state.apply(offset, record)

    # -- writes ----------------------------------------------------------------------------------
    def _append(self, record: ReviveRecord) -> PutResult:
        host = self.host
        host.ensure_system_topic(REVIVE_TOPIC)
        body = encode_revive_record(record)
        result = host.appender.put(
            REVIVE_TOPIC, 0, [Message(topic=REVIVE_TOPIC, body=body)], len(body)
        )
        self._since_snapshot += 1
        return result

    append = _append

    def handle_key(self) -> tuple[HandleKey, PutResult | None]:
        """The group's handle key; the first master that pops writes one."""
        if self.key is not None:
            return self.key, None
        key = HandleKey(os.urandom(HANDLE_KEY_BYTES))
        result = self._append(key)
        self.key = key
        return key, result

    # -- POP --------------------------------------------------------------------------------------
    def candidates(
        self, group: str, topic: str, queue_id: int, queues: int
    ) -> list[tuple[str, int]]:
        """The queues a POP reads, in the order it tries them: one queue, or every queue of the
        topic from a rotating start, and the group's retry queue."""
        host = self.host
        if queue_id >= 0:
            out = [(topic, queue_id)]
        else:
            self._rotate += 1
            start = self._rotate % queues
            out = [(topic, (start + i) % queues) for i in range(queues)]
        retry = retry_topic(group)
        config = host.sub_groups.get(group)
        # A FIFO group retries in place: nothing of its goes to the retry topic.
        if (
            host.topics.get(retry) is not None
            and config.consume_retry
            and not config.consume_orderly
        ):
            out.insert(self._rotate % (len(out) + 1), (retry, 0))
        return out

    def pop(
        self,
        group: str,
        queues: list[tuple[str, int]],
        max_count: int,
        invisible_ms: int,
        now: int,
        tag_filter: MessageFilter | None = None,
    ) -> tuple[list[PopMessage], PutResult | None]:
        """Hand out up to ``max_count`` messages from ``queues`` (synchronously: the reads,
        the checkpoint appends and the in-flight set change together). Returns the messages
        and the last append to await.

        With ``tag_filter`` (tags, or SQL92 decided on each record's properties: its ``hashes``
        are None) only messages that match are handed out; the others are
        passed over (the checkpoint's range covers them, its bitmap does not), so the group
        never receives them: the store skips them by their ConsumeQueue tag hash without
        reading their records (up to :data:`_FILTER_SCAN` entries a read), and the tags of
        the records it returns are confirmed here. A queue is read up to
        :data:`_FILTER_READS` times per POP while everything read was filtered out (or
        unreadable: a record that fails its CRC is passed over and logged)."""
        host = self.host
        state = self.ready()
        key, last = self.handle_key()
        out: list[PopMessage] = []
        visible = host.visible_offset()
        retry = retry_topic(group)
        max_bytes = host.cfg.max_pull_bytes
        broker_name = host.cfg.broker_name
        orderly = host.sub_groups.get(group).consume_orderly
        get = host.store.get
        # The store passes over entries whose ConsumeQueue tag hash cannot match without
        # reading their records; the records it returns are confirmed on their tags below.
        hashes = None if tag_filter is None else tag_filter.hashes
        for topic, queue_id in queues:
            if orderly and topic != retry:
                want = max_count - len(out)
                if want <= 0:
                    break
                got, appended = pop_orderly(
                    self, state, key, group, topic, queue_id, want, invisible_ms, now, tag_filter
                )
                out += got
                last = appended or last
                continue
            for _ in range(_FILTER_READS):
                want = max_count - len(out)
                if want <= 0:
                    break
                start = self.pop_offset(state, group, topic, queue_id)
                res = get(topic, queue_id, start, want, max_bytes, visible, hashes, _FILTER_SCAN)
                if res.status is GetStatus.OFFSET_TOO_SMALL:
                    start = res.next_offset
                    res = get(
                        topic, queue_id, start, want, max_bytes, visible, hashes, _FILTER_SCAN
                    )
                if res.status is GetStatus.CORRUPT:
                    if self.repairing(res.corrupt_offset):
                        break  # being fetched from another replica: read on the next POP
                    # The store logged and counted it, and no replica had it intact: POP passes
                    # over it rather than stop the queue for every member of the group (a pull
                    # stops with MESSAGE_CORRUPT).
                    ck = Checkpoint(group, topic, queue_id, start, 1, (), now, invisible_ms)
                    last = self._append(ck)
                    state.checkpoint(last.physical_offsets[0], ck)
                    host.offsets.commit(group, topic, queue_id, start + 1, now)
                    log.error(
                        "pop passed over an unreadable message",
                        group=group,
                        queue=f"{topic}:{queue_id}",
                        queue_offset=start,
                        commitlog_offset=res.corrupt_offset,
                        reason=res.reason,
                    )
                    continue
                if res.status is not GetStatus.FOUND:
                    break
                picked: list[tuple[int, bytes, int]] = []  # queue offset, bytes, attempt
                end = res.next_offset
                body = res.body
                from_retry = topic == retry
                pos = 0
                while pos < len(body):
                    size, _m, _c, _q, queue_offset, _p, _t, _b = DISPATCH_HEAD.unpack_from(
                        body, pos
                    )
                    raw = body[pos : pos + size]
                    pos += size
                    attempt = 1
                    if tag_filter is not None and not tag_filter.accepts_record(raw):
                        continue  # a tag sharing a listed tag's hash, or SQL92's no
                    if from_retry:
                        attempt = attempt_of(decode_record(raw), group)
                    picked.append((queue_offset, raw, attempt))
                    if len(picked) == want:
                        end = queue_offset + 1
                        break
                popped = tuple(offset for offset, _, _ in picked)
                ck = Checkpoint(
                    group, topic, queue_id, start, end - start, popped, now, invisible_ms
                )
                last = self._append(ck)
                ck_id = last.physical_offsets[0]
                state.checkpoint(ck_id, ck)
                host.offsets.commit(group, topic, queue_id, end, now)
                if not picked:
                    continue  # all filtered out: the range is passed, read on
                host.metrics.popped(group, topic, len(picked))
                counts = host.metrics.topic(topic)
                counts.messages_out += len(picked)
                counts.bytes_out += sum(len(raw) for _, raw, _ in picked)
                for offset, raw, attempt in picked:
                    handle = ReceiptHandle(
                        broker_name, group, topic, queue_id, offset, now, invisible_ms, ck_id
                    )
                    out.append(PopMessage(offset, raw, encode_handle(handle, key), attempt))
                break
        if self.tracer is not None and out:
            self.tracer.popped(group, out, self.decode)
        return out, last

    def cold_spans(
        self,
        group: str,
        queues: list[tuple[str, int]],
        max_count: int,
        tag_filter: MessageFilter | None = None,
    ) -> list[ColdSpan]:
        """The bytes not in the page cache that :meth:`pop` of ``queues`` would read first:
        those of the first queue holding messages past the group's POP offset (a FIFO group's
        queues are read from their own offsets and not looked at)."""
        host = self.host
        store = host.store
        orderly = host.sub_groups.get(group).consume_orderly
        retry = retry_topic(group)
        state = self.ready()
        hashes = None if tag_filter is None else tag_filter.hashes
        for topic, queue_id in queues:
            if orderly and topic != retry:
                continue
            start = max(
                self.pop_offset(state, group, topic, queue_id),
                store.queue_min_offset(topic, queue_id),
            )
            if start >= store.queue_max_offset(topic, queue_id):
                continue
            return store.cold_spans(
                topic,
                queue_id,
                start,
                max_count,
                host.cfg.max_pull_bytes,
                host.visible_offset(),
                hashes,
                _FILTER_SCAN,
            )
        return []

    def repairing(self, offset: int) -> bool:
        """Whether the unreadable record at CommitLog ``offset`` is being repaired from another
        replica now (started here when worth trying): then it is not passed over."""
        repairer = self.host.store.repairs.repairer
        return repairer is not None and repairer.start(offset) is not None

    def reset(self, group: str, topic: str, queue_id: int, offset: int) -> PutResult | None:
        """Move ``group``'s POP offset of the queue to ``offset`` (an operator's reset): a RESET
        record in the revive log, applied now, so a new master reads from there too; the
        deliveries in flight stay (acked, or revived at their deadline, as RocketMQ leaves
        them). None when the group never popped the queue here: its consume offset, which the
        caller moved, decides then. The caller checked that this broker is master."""
        state = self.ready()
        if state.pop_offset(group, topic, queue_id) is None:
            return None
        result = self._append(Reset(group, topic, queue_id, offset))
        state.reset_pop_offset(group, topic, queue_id, offset)
        return result

    def pop_offset(self, state: PopState, group: str, topic: str, queue_id: int) -> int:
        """Where the group's next POP of a queue reads: the end of its last checkpoint there;
        without one (none yet, or retention deleted them) its consume offset; the queue's first
        message for a group that never consumed it. The consume offset is only a fallback: a
        slave copies it from its master on a timer, so it may run ahead of the checkpoints the
        slave holds, and trusting it after a failover could skip messages no one received."""
        from_log = state.pop_offset(group, topic, queue_id)
        if from_log is not None:  # the replicated checkpoints decide (docs/pop.md)
            return from_log
        committed = self.host.offsets.query(group, topic, queue_id)
        if committed is not None:
            return committed
        return self.host.store.queue_min_offset(topic, queue_id)

    # -- ack and change -----------------------------------------------------------------------------
    def decode(self, text: str) -> ReceiptHandle:
        """Raises :class:`~protocol.pop.HandleError`."""
        self.ready()
        return decode_handle(text, self.key, self.host.cfg.broker_name)

    def ack(self, handle: ReceiptHandle, group: str, now: int) -> PutResult | None:
        """Ack one delivery; None when it was acked already. Raises :class:`PopRefused`."""
        state = self.ready()
        entry = state.check(handle.key, group, handle.deadline_ms, now)
        if entry is None:
            return None
        result = self._append(Ack((handle.key,)))
        state.ack(handle.key)
        if entry.orderly:  # its message group goes on: wake the POPs waiting on its queue
            self.host.waiters.notify(entry.topic, entry.queue_id)
        self.host.metrics.pop_ack_latency.observe(max(0, now - handle.pop_ms) / 1000)
        if self.tracer is not None:
            self.tracer.settled(handle, now, acked=True)
        self.acks += 1
        self.host.metrics.pop_acked(group)
        return result

    def ack_many(
        self, handles: list[ReceiptHandle], group: str, now: int
    ) -> tuple[list[PopRefused | None], PutResult | None]:
        """Ack several deliveries with one ack record: per handle None (acked, or acked
        already) or why it was refused; and the append to await (None: nothing written)."""
        state = self.ready()
        outcome: list[PopRefused | None] = []
        keys: list[tuple[int, int]] = []
        latency: list[float] = []
        woken: set[tuple[str, int]] = set()
        for handle in handles:
            try:
                entry = state.check(handle.key, group, handle.deadline_ms, now)
            except PopRefused as exc:
                outcome.append(exc)
                continue
            outcome.append(None)
            if entry is not None and handle.key not in keys:
                keys.append(handle.key)
                latency.append(max(0, now - handle.pop_ms) / 1000)
                if self.tracer is not None:
                    self.tracer.settled(handle, now, acked=True)
                if entry.orderly:
                    woken.add((entry.topic, entry.queue_id))
        if not keys:
            return outcome, None
        result = self._append(Ack(tuple(keys)))
        for key in keys:
            state.ack(key)
        for topic, queue_id in woken:
            self.host.waiters.notify(topic, queue_id)
        self.host.metrics.pop_acked(group, len(keys))
        for seconds in latency:
            self.host.metrics.pop_ack_latency.observe(seconds)
        self.acks += len(keys)
        return outcome, result

    def change(
        self, handle: ReceiptHandle, group: str, invisible_ms: int, now: int
    ) -> tuple[str, PutResult]:
        """Move a delivery's deadline to ``now + invisible_ms``; returns its new handle. Raises
        :class:`PopRefused` (an acked one too: nothing is in flight to move)."""
        state = self.ready()
        entry = state.check(handle.key, group, handle.deadline_ms, now)
        if entry is None:
            raise PopRefused(
                Refusal.NOT_IN_FLIGHT,
                "the message was acked: there is no invisible time to change",
            )
        deadline = now + invisible_ms
        result = self._append(Change(handle.checkpoint, handle.queue_offset, deadline))
        if self.tracer is not None:
            self.tracer.settled(handle, now, acked=False)
        state.change(handle.key, deadline)
        key, _ = self.handle_key()
        new = ReceiptHandle(
            handle.broker_name,
            group,
            handle.topic,
            handle.queue_id,
            handle.queue_offset,
            now,
            invisible_ms,
            handle.checkpoint,
        )
        self._wake.set()
        return encode_handle(new, key), result

    # -- revive ------------------------------------------------------------------------------------
    async def _revive_loop(self) -> None:
        host = self.host
        while True:
            timeout = _REVIVE_IDLE_S
            try:
                if not host.gate.role.is_master:
                    self._drop()
                    host.metrics.pop_inflight_now({})
                    host.metrics.fifo_blocked_now({})
                else:
                    host.gate.check_writable()
                    state = self.ready()
                    busy = self.revive_due(state, host.now_ms()) >= _REVIVE_BATCH
                    self.snapshot_if_due(state)
                    host.metrics.pop_inflight_now(state.groups())
                    now = host.now_ms()
                    if now - self._blocked_at >= _BLOCKED_EVERY_MS:  # it walks the deliveries
                        self._blocked_at = now
                        host.metrics.fifo_blocked_now(state.order.blocked_groups())
                    nxt = state.next_deadline()
                    if busy:
                        timeout = 0.0
                    elif nxt is not None:
                        timeout = max(0.0, min(timeout, (nxt - host.now_ms()) / 1000))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a refused write (fenced, disk full): try again later
                log.warning("pop revive round failed", error=f"{type(exc).__name__}: {exc}")
                timeout = 1.0
            self._wake.clear()
            if timeout <= 0:
                await asyncio.sleep(0)  # more is due: let other work run, then go on
                continue
            await sleep_or_wake(self._wake, timeout)

    def revive_due(self, state: PopState, now: int) -> int:
        """Re-publish up to :data:`_REVIVE_BATCH` entries past their deadline (the loop comes
        back at once for more, letting other work run in between); returns how many were due.
        A write that fails (fenced, disk full) ends the round: the entries re-published before
        it are recorded, the rest are due again :data:`_RETRY_LATER_MS` later and the failure is
        raised. One whose copy was written but whose ``revived`` record was not may be
        re-published twice (at least once). An entry whose copy can never be written (its
        properties with the retry ones added pass the record's limit) is given up, logged, and
        holds back no other."""
        due = state.due(now, _REVIVE_BATCH)
        keys: list[tuple[int, int]] = []
        failure: Exception | None = None
        try:
            for entry in due:
                if self._revive(state, entry):
                    keys.append(entry.key)
        except Exception as exc:  # the round ends here; what was re-published is recorded
            failure = exc
        recorded = False
        try:
            if keys:
                self._append(Revived(tuple(keys)))
            recorded = True
        finally:
            if recorded:
                for key in keys:
                    state.revived(key)
            for entry in due:  # not re-published, or not recorded: try again later
                if state.get(entry.key) is entry:
                    state.change(entry.key, now + _RETRY_LATER_MS)
        if failure is not None:
            raise failure
        return len(due)

    def _revive(self, state: PopState, entry: Entry) -> bool:
        """Re-publish one due entry; False for a FIFO delivery handed out again in place (no
        copy, nothing to record)."""
        try:
            if entry.orderly:
                attempts = state.order.attempts(entry.key) or 1
                if not exhausted(self.host.sub_groups.get(entry.group), attempts):
                    # A FIFO delivery is handed out again in place, by the next POP.
                    state.expire(entry.key)
                    self.host.waiters.notify(entry.topic, entry.queue_id)
                    self.revived += 1
                    self.host.metrics.pop_redelivered(entry.group, entry.topic)
                    return False
                self._republish(entry, DeadLetter(attempts - 1))
            else:
                self._republish(entry)
        except MessageTooLargeError as exc:
            log.error(
                "pop revive: a copy that can never be written; the delivery is given up",
                group=entry.group,
                queue=f"{entry.topic}:{entry.queue_id}",
                queue_offset=entry.queue_offset,
                error=str(exc),
            )
        return True

    def _republish(self, entry: Entry, step: Retry | DeadLetter | None = None) -> None:
        """Re-publish an entry's message to the retry topic or the DLQ (``step`` given: a
        FIFO delivery past its attempts, to the DLQ), or log that it is gone."""
        host = self.host
        res = host.store.get(entry.topic, entry.queue_id, entry.queue_offset, 1, 1 << 26, None)
        if res.status is not GetStatus.FOUND:
            log.warning(
                "pop revive: message gone (retention), not redelivered",
                topic=entry.topic,
                queue_id=entry.queue_id,
                queue_offset=entry.queue_offset,
                status=res.status.name,
            )
            return
        record = next(iter_records(res.body))
        group = entry.group
        try:
            props = record.properties
        except RecordError:
            props = {}
        origin = (
            props.get(PROP_RETRY_TOPIC, entry.topic)
            if entry.topic == retry_topic(group)
            else entry.topic
        )
        if step is None:
            step = next_step(host.sub_groups.get(group), reconsume_times(props))
        new_props = sent_back_properties(
            props,
            origin_topic=origin,
            origin_id=origin_message_id(props, record.msg_id),
            step=step,
            reason="invisible time passed without an ack",
        )
        topic = dlq_topic(group) if isinstance(step, DeadLetter) else retry_topic(group)
        host.ensure_system_topic(topic)
        copy = message_copy(record, topic, new_props)
        host.appender.put(topic, 0, [copy], len(record.body))
        if entry.orderly:
            host.waiters.notify(entry.topic, entry.queue_id)  # its message group goes on
        if isinstance(step, DeadLetter):
            self.dead_lettered += 1
            host.metrics.dead_letter(group, origin)
        else:
            self.revived += 1
            host.metrics.pop_redelivered(group, origin)
