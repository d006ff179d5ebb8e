"""The master's idempotence state: the driver of :class:`~protocol.idempotence.ProducerStates`
(docs/idempotence.md).

* **Where it comes from.** Every record of an idempotent send carries
  :data:`~protocol.idempotence.PROP_PRODUCER_SEQ` (written by :meth:`ProducerSequences.stamp`),
  so the state is a function of the CommitLog. A master builds it when it first needs it in its
  master epoch (:class:`~broker.service_host.PerMasterEpoch`): the last whole snapshot in queue 0
  of :data:`~protocol.idempotence.SNAPSHOT_TOPIC`, then every sequenced record after the
  CommitLog offset that snapshot covers. Slaves hold the same records and snapshots (replicated
  like any message), so a new master knows what its predecessor stored.
* **Building without stalling the loop.** The remoting front awaits :meth:`ProducerSequences.built`
  before a sequenced send when the state is not built for this master epoch: the build reads
  the log in steps of :data:`_STEP_BYTES`, yielding to the loop between them, so the broker
  answers everything else meanwhile (sends without the fields, pulls, heartbeats); sequenced
  sends wait for it. :meth:`~broker.service_host.PerMasterEpoch.ready` (a caller that cannot
  wait) still builds it in one go.
* **Issued ids.** With authentication on, :class:`IssuedProducerIds` refuses a producer id the
  controllers have not issued (their heartbeat answers tell the lowest they have not).
* **Snapshots.** Once :attr:`~broker.config.BrokerConfig.producer_snapshot_bytes` of CommitLog
  were written since the last one, the master appends the whole state (after a send, on the
  loop thread): a rebuild reads at most about that much log.
* **Memory.** Producers idle for ``producer_expiry_ms`` are forgotten (checked at most once a
  second, after a send), and so are the least recently used beyond ``producer_max_windows``
  (producer, queue) windows.

Scheduled messages and half messages are stored under the timer's and the transactions'
topics: their records name the queue the send was for in ``REAL_TOPIC`` / ``REAL_QID``, which
is the queue their sequence counts in. The copies the broker makes of stored records later (a
delivery, a commit, a retry, a dead letter) lose the property
(:func:`protocol.message.message_copy`).
"""

from __future__ import annotations

import asyncio
import time
from typing import Final, Protocol

import structlog

from broker.role import RoleState
from broker.service_host import PerMasterEpoch, ServiceHost
from protocol.idempotence import (
    PROP_PRODUCER_SEQ,
    SNAPSHOT_TOPIC,
    ProducerSeq,
    ProducerStates,
    QueueWindow,
    SnapshotPart,
    StoredBatch,
    decode_snapshot,
    decode_snapshot_part,
    encode_snapshot,
    parse_record_seq,
    record_seq_value,
    seq_property,
    sequenced_records,
    stamp,
)
from protocol.message import Message, MessageRecord, RecordError, iter_records
from protocol.timer import PROP_REAL_QUEUE_ID, PROP_REAL_TOPIC, TIMER_TOPIC
from protocol.transaction import HALF_TOPIC
from storage.config_files import TopicConfig
from storage.errors import StoreError
from storage.store import GetStatus, PutResult

__all__ = ["IdempotenceHost", "IssuedProducerIds", "ProducerSequences", "batch_of", "result_of"]

log = structlog.get_logger(__name__)

_SCAN_BYTES: Final = 4 * 1024 * 1024
_STEP_BYTES: Final = 512 * 1024
"""Log the loop reads and replays in one go while it builds the state in steps (a few ms)."""
_EXPIRE_EVERY_MS: Final = 1000
_ISSUE_WAIT_S: Final = 5.0
"""How long a send with a producer id not known issued waits for the controllers' answers."""
_SNAPSHOT_SEARCH: Final = 8
"""Snapshots looked at, newest first, for a whole one (a failover can cut the last)."""
_REAL_QUEUE_TOPICS: Final = frozenset((TIMER_TOPIC, HALF_TOPIC))


class IdempotenceHost(ServiceHost, Protocol):
    def ensure_system_topic(self, topic: str) -> TopicConfig: ...


def batch_of(sequence: int, result: PutResult) -> StoredBatch:
    """What the window keeps of a stored request."""
    # the result's own list: nothing changes it after the put (a rebuilt batch, the only one
    # a retry completes, has a list of its own)
    return StoredBatch(
        sequence,
        result.queue_id,
        result.first_queue_offset,
        result.physical_offsets,
        result.end_offset,
        result.store_timestamp,
    )


def result_of(batch: StoredBatch) -> PutResult:
    """The answer of a stored request again (its offsets; nothing stored)."""
    return PutResult(
        batch.queue_id,
        batch.first_queue_offset,
        batch.count,
        list(batch.physical_offsets),
        batch.end_offset,
        batch.store_timestamp,
    )


class ProducerSequences(PerMasterEpoch[ProducerStates]):
    """The idempotence state of one broker, built per master epoch. Loop thread only."""

    def __init__(self, host: IdempotenceHost) -> None:
        self.host: IdempotenceHost = host
        self._roles = host.gate.role_cell
        self.state: ProducerStates | None = None
        self._epoch = -1
        self._ready_role: RoleState | None = None
        """The role under which :attr:`state` was last found built for its master epoch with
        no damage passed over: while the role is still this object (any change, a lease renewal
        too, replaces it), the usual send skips those checks."""
        self._expire_at = 0
        self._snapshot_due = host.cfg.producer_snapshot_bytes
        """The CommitLog offset from which the next snapshot is due:
        ``producer_snapshot_bytes`` past the one the last snapshot covered (or the rebuild
        started from)."""
        self.duplicates = 0
        """Retries answered from the window (nothing stored)."""
        self.gaps = 0
        """Requests stored past a gap in their queue's sequences."""
        self.partial_repairs = 0
        """Retries of a request a failover cut short: its missing records stored."""
        self._expired_before = 0
        self._building: asyncio.Task[None] | None = None
        metrics = host.metrics
        for name, doc, read in (
            (
                "rmq_broker_idempotent_duplicates",
                "Retries of idempotent producers' stored sends answered with the stored offsets, "
                "nothing stored again",
                lambda: self.duplicates,
            ),
            (
                "rmq_broker_idempotent_gaps",
                "Idempotent sends stored past a gap in their queue's sequences (an earlier send "
                "not stored yet, or given up)",
                lambda: self.gaps,
            ),
            (
                "rmq_broker_idempotent_partial_repairs",
                "Retries of a batch a failover cut short: its missing records stored",
                lambda: self.partial_repairs,
            ),
            (
                "rmq_broker_idempotent_producers_expired",
                "Idempotent producers forgotten: idle for producer_expiry_ms, or the least "
                "recently used beyond producer_max_windows",
                lambda: self.expired,
            ),
        ):
            metrics.counter_fn(name, doc, read)
        host.metrics.gauge_fn(
            "rmq_broker_idempotent_producers",
            "Idempotent producers whose sequences this broker keeps (master only)",
            self._kept_producers,
        )
        host.metrics.gauge_fn(
            "rmq_broker_idempotent_windows",
            "(producer, queue) windows of sequences this broker keeps (master only)",
            self._kept_windows,
        )

    def drop_unless_master(self) -> None:
        """A broker no longer master gives its state's memory back (up to
        ``producer_max_windows`` windows); it builds the state again once master."""
        state = self.state
        if state is None or self.host.gate.role.is_master:
            return
        log.info("idempotent producer state dropped (no longer master)", producers=state.producers)
        self._ready_role = None
        self._expired_before += state.expired
        self.state = None

    def _kept_producers(self) -> int:
        state = self.current()  # 0 on a slave: a demoted master's state is not its to keep
        return 0 if state is None else state.producers

    def _kept_windows(self) -> int:
        state = self.current()
        return 0 if state is None else state.windows

    @property
    def expired(self) -> int:
        """Producers forgotten since start, in every state this broker built."""
        return self._expired_before + (0 if self.state is None else self.state.expired)

    # -- the send path -----------------------------------------------------------------------
    @staticmethod
    def stamp(messages: list[Message], seq: ProducerSeq) -> None:
        """Write the request's sequence into each of its messages (before storing them):
        :func:`protocol.idempotence.stamp`."""
        stamp(messages, seq)

    @staticmethod
    def stamp_record(m: Message, seq: ProducerSeq, index: int, count: int) -> None:
        """:meth:`stamp` for record ``index`` of a request of ``count`` alone (a retry storing
        the records a failover cut off)."""
        value = record_seq_value(seq, index, count)
        if m.properties:
            m.properties[PROP_PRODUCER_SEQ] = value
        else:
            m.seq_property = seq_property(value)

    def stored(self, topic: str, queue_id: int, seq: ProducerSeq, batch: StoredBatch) -> None:
        """A request was stored as ``batch``: remember it; a snapshot or an expiry if due."""
        state = self.state
        if state is None:
            return
        now = _now_ms()
        state.stored(topic, queue_id, seq, batch, now)
        self._upkeep(state, now, self.host.store.max_offset)

    def next_window(self, topic: str, queue_id: int, seq: ProducerSeq) -> QueueWindow | None:
        """:meth:`ProducerStates.next_window` of the state built for this master epoch (the
        usual send: the next request of its queue); None: the whole check
        (:meth:`~broker.service_host.PerMasterEpoch.ready` and
        :meth:`ProducerStates.check`)."""
        state = self.state
        if state is None:
            return None
        role = self._roles.current
        if role is not self._ready_role:
            if self._epoch != role.master_epoch or self._damage_at_build:
                return None
            self._ready_role = role
        return state.next_window(topic, queue_id, seq)

    def stored_next(self, window: QueueWindow, seq: ProducerSeq, result: PutResult) -> None:
        """:meth:`stored` for a request :meth:`ProducerStates.next_window` found the window of
        (the usual send), stored as ``result``: its store time is now."""
        state = self.state
        if state is None:
            return
        now = result.store_timestamp
        end = result.end_offset
        # the fields read here, where the store's answer is a PutResult (compiled: natively;
        # the core, which may not import storage, would read them as attributes)
        state.stored_next(
            window,
            seq.producer_id,
            seq.sequence,
            result.queue_id,
            result.first_queue_offset,
            result.physical_offsets,
            end,
            now,
        )
        if now >= self._expire_at or end >= self._snapshot_due:
            self._upkeep(state, now, end)

    def _upkeep(self, state: ProducerStates, now: int, log_end: int) -> None:
        """After a send stored: idle producers expired, a snapshot written, when due."""
        if now >= self._expire_at:
            self._expire_at = now + _EXPIRE_EVERY_MS
            gone = state.expire(now)
            if gone:
                log.info("idle idempotent producers forgotten", producers=gone)
        if log_end >= self._snapshot_due:
            self.snapshot()

    def _snapshot_covers(self, offset: int) -> None:
        """The last snapshot covers the CommitLog up to ``offset`` (or the rebuild started
        there): the next is due ``producer_snapshot_bytes`` after it."""
        self._snapshot_due = offset + self.host.cfg.producer_snapshot_bytes

    def snapshot(self) -> None:
        """Append the whole state, as it stands after the CommitLog's end, to the snapshot
        topic (master only; an error is logged, the next send tries again)."""
        state = self.state
        host = self.host
        if state is None:
            return
        covered = host.store.max_offset
        try:
            bodies = encode_snapshot(covered, state.to_document())
            host.ensure_system_topic(SNAPSHOT_TOPIC)
            messages = [Message(topic=SNAPSHOT_TOPIC, body=b) for b in bodies]
            host.appender.put(SNAPSHOT_TOPIC, 0, messages, sum(len(b) for b in bodies))
        except (StoreError, ValueError) as exc:
            log.error("producer state snapshot not written", error=str(exc))
            return
        self._snapshot_covers(covered)
        log.debug("producer state snapshot written", covered=covered, parts=len(bodies))

    # -- rebuild -------------------------------------------------------------------------------
    def built_now(self) -> bool:
        """True when a sequenced send need not wait: the state is built for this master epoch,
        or this broker is not master (the send is refused anyway)."""
        role = self._roles.current
        if role is self._ready_role and self.state is not None:
            return True
        return not role.is_master or (
            self.state is not None
            and self._epoch == role.master_epoch
            and not (self._damage_at_build and self._repaired_since_built())
        )

    async def built(self) -> None:
        """Build the state for this master epoch in steps, the loop free between them (one
        build for every caller waiting; it goes on when a caller is cancelled)."""
        while not self.built_now():
            task = self._building
            if task is None or task.done():
                task = self._building = asyncio.get_running_loop().create_task(
                    self._build_in_steps(), name="idempotence-rebuild"
                )
            await asyncio.shield(task)

    async def _build_in_steps(self) -> None:
        role = self.host.gate.role
        epoch = role.master_epoch
        state, start, started, snapshot = self._begin()
        end = self.host.store.max_offset
        offset = start
        records = 0
        while offset < end:
            offset, n = self._replay(state, offset, end, _STEP_BYTES)
            records += n
            await asyncio.sleep(0)
            role = self.host.gate.role
            if role.master_epoch != epoch or not role.is_master:
                return  # another epoch: built again when needed
        if self.state is not None and self._epoch == epoch and not self._repaired_since_built():
            return  # built meanwhile by ready() (a caller that could not wait): keep that one
        self._finish(state, start, end, started, snapshot, records)
        self.state = state
        self._epoch = epoch
        self._damage_at_build = self._known_damage()

    def _rebuild(self) -> ProducerStates:
        state, start, started, snapshot = self._begin()
        end = self.host.store.max_offset
        _, records = self._replay(state, start, end, end - start)
        self._finish(state, start, end, started, snapshot, records)
        return state

    def _begin(self) -> tuple[ProducerStates, int, float, bool]:
        """The state of the last whole snapshot (an empty one without), the CommitLog offset
        to replay records from, when the build started, whether a snapshot was read."""
        self._ready_role = None
        if self.state is not None:
            self._expired_before += self.state.expired
            self.state = None
        cfg = self.host.cfg
        store = self.host.store
        started = time.perf_counter()
        found = self._last_snapshot()
        state: ProducerStates | None = None
        start = store.min_offset
        if found is not None:
            covered, doc = found
            try:
                state = ProducerStates.from_document(
                    doc, expiry_ms=cfg.producer_expiry_ms, max_windows=cfg.producer_max_windows
                )
                start = max(covered, start)
            except ValueError as exc:
                log.error(
                    "producer state snapshot unreadable: reading the whole log", error=str(exc)
                )
        if state is None:
            state = ProducerStates(
                expiry_ms=cfg.producer_expiry_ms, max_windows=cfg.producer_max_windows
            )
        return state, start, started, found is not None

    def _finish(
        self,
        state: ProducerStates,
        start: int,
        end: int,
        started: float,
        snapshot: bool,
        records: int,
    ) -> None:
        state.expire(_now_ms())
        # What the build forgot (the least recently used beyond producer_max_windows as the
        # records came, the idle) a master forgot before, here or on the old master: counted
        # then, not again (rmq_broker_idempotent_producers_expired_total).
        state.expired = 0
        self._snapshot_covers(start)
        log.info(
            "idempotent producer state built from the CommitLog",
            snapshot=snapshot,
            scanned_from=start,
            scanned_bytes=end - start,
            records=records,
            producers=state.producers,
            seconds=round(time.perf_counter() - started, 3),
        )

    def _replay(self, state: ProducerStates, start: int, end: int, most: int) -> tuple[int, int]:
        """Replay the sequenced records from ``start`` on, about ``most`` bytes of them (whole
        reads of up to :data:`_SCAN_BYTES`) and not past ``end``; (where it stopped, records)."""
        store = self.host.store
        offset = start
        stop = min(end, start + max(most, 1))
        records = 0
        while offset < stop:
            try:
                raw = store.read_raw(offset, min(_SCAN_BYTES, stop - offset))
            except StoreError as exc:
                log.error("producer state: CommitLog unreadable", offset=offset, error=str(exc))
                return end, records
            if not raw:
                return end, records
            try:
                for record in sequenced_records(raw):
                    records += 1
                    _replay_record(state, record)
            except RecordError as exc:
                log.error(
                    "producer state: bad bytes in the CommitLog", offset=offset, error=str(exc)
                )
            offset += len(raw)
        return offset, records

    def _last_snapshot(self) -> tuple[int, object] | None:
        """(covered, document) of the newest whole snapshot; None when there is none."""
        store = self.host.store
        end = store.queue_max_offset(SNAPSHOT_TOPIC, 0)
        low = store.queue_min_offset(SNAPSHOT_TOPIC, 0)
        for _ in range(_SNAPSHOT_SEARCH):
            if end <= low:
                return None
            last = self._read_parts(end - 1, 1)
            if not last:
                return None
            first = end - 1 - last[0].index
            parts = self._read_parts(first, last[0].index + 1) if first >= low else []
            try:
                if parts and last[0].index + 1 == last[0].count:
                    return decode_snapshot(parts)
            except RecordError as exc:
                log.error("producer state snapshot skipped", queue_offset=first, error=str(exc))
            end = first
        return None

    def _read_parts(self, offset: int, count: int) -> list[SnapshotPart]:
        store = self.host.store
        out: list[SnapshotPart] = []
        while len(out) < count:
            res = store.get(SNAPSHOT_TOPIC, 0, offset, count - len(out), 64 * 1024 * 1024)
            if res.status is not GetStatus.FOUND:
                return out
            try:
                out.extend(decode_snapshot_part(r.body) for r in iter_records(res.body))
            except RecordError as exc:
                log.error("producer state snapshot part unreadable", error=str(exc))
                return []
            offset = res.next_offset
        return out[:count]


class IssuedProducerIds:
    """With authentication on: the lowest idempotent producer id the controllers have not
    issued, as every heartbeat answer tells (``producerIdLimit``). Only ever raised: a
    controller that has not yet applied the latest id (a new leader) cannot lower it.

    A send with an id at or above it may be from a producer that took its id after the last
    answer: it waits (:meth:`wait`) until an answer covers the id (let in), or until two
    answers came after it started waiting without covering it (refused for good: an answer
    to a heartbeat sent after the producer had its id); with no answer for
    :data:`_ISSUE_WAIT_S` (no controller reachable) it is refused as retriable. Loop thread
    only."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.limit = 0
        """Ids below it were issued (0: not told yet)."""
        self._answers = 0
        self._changed: asyncio.Event | None = None

    def told(self, limit: int) -> None:
        """A heartbeat answer's ``producerIdLimit`` (on the loop thread)."""
        self._answers += 1
        if limit > self.limit:
            self.limit = limit
        changed = self._changed
        if changed is not None:
            self._changed = None
            changed.set()

    def issued(self, producer_id: int) -> bool:
        """True when ``producer_id`` is known issued (or the check is off)."""
        return not self.enabled or producer_id < self.limit

    async def wait(self, producer_id: int) -> bool | None:
        """True: issued; False: not issued (two answers since the call said so); None: no
        answer came in time."""
        deadline = time.monotonic() + _ISSUE_WAIT_S
        first = self._answers
        while not self.issued(producer_id):
            if self._answers - first >= 2:
                return False
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            changed = self._changed
            if changed is None:
                changed = self._changed = asyncio.Event()
            try:
                async with asyncio.timeout(left):
                    await changed.wait()
            except TimeoutError:
                return None
        return True


def _replay_record(state: ProducerStates, record: MessageRecord) -> None:
    try:
        props = record.properties
        value = record.producer_seq
        if value is None:
            raise RecordError(f"{PROP_PRODUCER_SEQ} not found")
        rseq = parse_record_seq(value)
        topic = record.topic
        queue_id = record.queue_id
        queue_offset = record.queue_offset
        if topic in _REAL_QUEUE_TOPICS:
            if topic == TIMER_TOPIC:
                queue_offset = -1
            topic = props[PROP_REAL_TOPIC]
            queue_id = int(props[PROP_REAL_QUEUE_ID])
    except (RecordError, KeyError, ValueError) as exc:
        log.error("producer state: record skipped", offset=record.physical_offset, error=str(exc))
        return
    state.replayed(
        topic,
        queue_id,
        rseq,
        physical_offset=record.physical_offset,
        size=record.size,
        queue_offset=queue_offset,
        store_timestamp=record.store_timestamp,
    )


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
