"""The timer service: the broker's driver of the timing wheel (``storage.timer``).

It owns the wheel and keeps it equal to what the CommitLog says (docs/timer.md):

* **Open** (:meth:`TimerService.open`, after the store recovered): open the wheel and replay the
  CommitLog from where its timer log and progress leave off. A timer state ahead of the
  CommitLog (recovery or a truncation cut records it had indexed) is rebuilt from the whole log.
* **Master appends** go through here and change the wheel in the same synchronous step as the
  append: a scheduled send (:meth:`put_scheduled`, :meth:`put_at`), a recall (:meth:`recall`),
  a delivery (the delivery loop). So the wheel covers every record below ``store.max_offset``.
* **Replicated appends** (a slave) are dispatched as they are stored
  (:meth:`replicated`): schedule, cancel, and ``commit_key`` for each delivery record.
* **Delivery** (master only, with a valid write lease): when entries are due, append each real
  message to its real topic and queue through :class:`~broker.appender.Appender`, then commit.
* **Progress**: every ``timer_flush_interval_ms`` the timer log is flushed, and the progress
  mark noted earlier is saved once the CommitLog is durable (and, in controller mode,
  replicated) up to where it was noted, with that CommitLog offset (``dispatched``): a restart
  replays from there, so a delivery record that survived is never delivered again.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import structlog

from broker.static_forward import ForwardError
from broker.timer.host import TimerHost
from broker.timer.records import (
    RESERVED_PROPERTIES,
    Delivered,
    Recalled,
    Scheduled,
    TimerEvent,
    timer_events,
)
from protocol.codes import ResponseCode
from protocol.message import (
    PROP_KEYS,
    PROP_TAGS,
    Message,
    MessageRecord,
    RecordError,
    decode_record,
    make_msg_id,
    message_copy,
    parse_msg_id,
)
from protocol.timer import (
    PROP_REAL_QUEUE_ID,
    PROP_REAL_TOPIC,
    PROP_TIMER_DEL_UNIQKEY,
    PROP_TIMER_OUT_MS,
    PROP_TIMER_SOURCE_OFFSET,
    PROP_UNIQ_KEY,
    REQUEST_PROPERTIES,
    TIMER_TOPIC,
)
from storage.errors import StoreError
from storage.small_file import read_atomic, write_atomic
from storage.store import PutResult
from storage.timer.request import requested_delivery_ms
from storage.timer.wheel import InvalidDeliveryTimeError, TimerEntry, TimingWheel, WheelConfig

Forward = Callable[[Message, str, int], Awaitable[str]]
"""``forward(message, topic, physical_queue)``: :meth:`broker.static_forward.StaticForwarder.forward`."""

FORWARD_RETRY_S: Final = 1.0
"""After a message due on a moved queue could not be sent on: the wait before trying again."""

__all__ = ["RecallError", "TimerService"]

log = structlog.get_logger(__name__)

DISPATCHED_FILE: Final = "dispatched"
GEOMETRY_FILE: Final = "geometry"
DELIVERY_BATCH: Final = 2048
"""Most entries one delivery round hands out before it lets other work run."""
_REPLAY_CHUNK: Final = 8 * 1024 * 1024
_REQUEST_SET: Final = frozenset(REQUEST_PROPERTIES)
_STRIP_ON_DELIVERY: Final = frozenset({PROP_REAL_TOPIC, PROP_REAL_QUEUE_ID, PROP_KEYS, PROP_TAGS})
_RECALL_BODY: Final = b"recall"


class RecallError(Exception):
    """A recall refused: ``code`` and ``remark`` go into the answer."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


@dataclass(slots=True)
class _Snapshot:
    """The progress mark and the CommitLog offset it covers, noted at one moment."""

    key: tuple[int, int]
    end: int


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def scheduling(msg: Message) -> bool:
    """Whether ``msg`` asks for a delivery time (one of the request properties is set)."""
    props = msg.properties
    return bool(props) and not _REQUEST_SET.isdisjoint(props)


def reserved_property(msg: Message) -> str | None:
    """The first broker-only timer property ``msg`` carries, None if it carries none."""
    props = msg.properties
    if not props or RESERVED_PROPERTIES.isdisjoint(props):
        return None
    return next(k for k in props if k in RESERVED_PROPERTIES)


class TimerService:
    """Scheduled messages of one broker. Loop thread only."""

    def __init__(self, host: TimerHost) -> None:
        self.host = host
        cfg = host.cfg
        self.enabled = cfg.timer_enable
        self.directory: Path = cfg.data_dir / "timer"
        self.config = WheelConfig(
            slot_ms=cfg.timer_slot_ms,
            slots_per_bucket=cfg.timer_slots_per_bucket,
            max_delay_ms=cfg.timer_max_delay_ms,
        )
        self.wheel: TimingWheel | None = None
        self._inflight: list[TimerEntry] = []
        self._delivered_ahead: TimerEntry | None = None
        self._snapshot: _Snapshot | None = None
        self._dispatched_saved = 0
        self._last_event_end = 0
        self._wake = asyncio.Event()
        self._sleep_until = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._msg_id_host = cfg.listen
        self.forward: Forward | None = None
        """How a message due on a static topic queue that moved away is stored on the queue's
        newest item (:mod:`broker.static_forward`); None without controllers."""
        self._forwarding: set[TimerEntry] = set()
        self._forwarded: set[TimerEntry] = set()
        """Entries whose message the newest item's group acknowledged: delivered."""

    # -- lifecycle -------------------------------------------------------------------------------

    def open(self) -> None:
        """Open the wheel and replay the CommitLog into it (after the store recovered)."""
        if not self.enabled:
            return
        store = self.host.store
        geometry = self._geometry_changed()
        if geometry is not None:
            self._rebuild(geometry)
            return
        try:
            wheel = self._open_wheel()
        except StoreError as exc:  # an unreadable progress file: the timer is a cache
            self._rebuild(f"the timer's files cannot be used: {exc}")
            return
        dispatched = self._load_dispatched(wheel)
        if wheel.indexed_through > store.max_offset or dispatched > store.max_offset:
            self._rebuild(
                f"the timer log indexes CommitLog offset {max(wheel.indexed_through, dispatched)}"
                f" but the CommitLog ends at {store.max_offset}"
            )
            return
        start = min(wheel.indexed_through, dispatched)
        try:
            self._replay(max(start, store.min_offset))
        except (StoreError, RecordError) as exc:
            self._rebuild(f"replaying the CommitLog from {start} failed: {exc}")
            return
        if wheel.indexed_through or wheel.delivered[0] >= 0:
            self._last_event_end = store.max_offset
        log.info(
            "timer opened",
            pending=wheel.pending_count,
            indexed_through=wheel.indexed_through,
            replayed_from=start,
            delivered=list(wheel.delivered),
            timer_log_cut=wheel.recovery.truncated_bytes,
        )

    def start(self) -> None:
        """Start the delivery and progress tasks (the broker serves from now on)."""
        if self.wheel is None:
            return
        self._tasks.append(asyncio.create_task(self._deliver_loop(), name="timer-deliver"))
        self._tasks.append(asyncio.create_task(self._progress_loop(), name="timer-progress"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    def close(self) -> None:
        """A clean stop, after the store's last flush: the timer log flushed, the progress the
        CommitLog covers saved, the wheel closed."""
        wheel = self.wheel
        if wheel is None:
            return
        self._note_snapshot(force=True)
        self._save_if_durable()
        wheel.flush()
        wheel.log.close()
        self.wheel = None

    # -- the wheel's files -------------------------------------------------------------------------

    def _open_wheel(self) -> TimingWheel:
        # Time 0: the wheel's clock moves only with the records it replays (their store time),
        # so every due time is the one the master stamped (docs/timer.md, Replicas).
        self.wheel = TimingWheel(self.directory, 0, self.config)
        write_atomic(self.directory / GEOMETRY_FILE, self._geometry().encode())
        return self.wheel

    def _geometry(self) -> str:
        return f"{self.config.slot_ms} {self.config.slots_per_bucket}"

    def _geometry_changed(self) -> str | None:
        """Why the timer log cannot be read with this configuration (its bucket chains follow
        the slot and bucket sizes it was written with), None when it can."""
        try:
            raw = read_atomic(self.directory / GEOMETRY_FILE)
        except StoreError:
            raw = b"?"
        if raw is None or raw.decode(errors="replace") == self._geometry():
            return None
        return (
            f"timer_slot_ms / timer_slots_per_bucket changed from {raw.decode(errors='replace')}"
            f" to {self._geometry()}"
        )

    def _load_dispatched(self, wheel: TimingWheel) -> int:
        try:
            raw = read_atomic(self.directory / DISPATCHED_FILE)
        except StoreError:
            raw = None  # replay from the timer log's end instead
        if raw is None:
            return wheel.indexed_through
        try:
            value = int(raw.decode())
        except ValueError:
            log.warning("timer dispatched mark is not valid: replaying from the timer log's end")
            return wheel.indexed_through
        self._dispatched_saved = value
        return value

    def _rebuild(self, why: str) -> None:
        """Throw the timer state away and index the whole CommitLog again."""
        store = self.host.store
        log.warning("rebuilding the timer from the CommitLog", reason=why)
        if self.wheel is not None:
            self.wheel.log.close()
            self.wheel = None
        shutil.rmtree(self.directory, ignore_errors=True)
        self._inflight.clear()
        self._delivered_ahead = None
        self._snapshot = None
        self._dispatched_saved = 0
        wheel = self._open_wheel()
        self._replay(store.min_offset)
        self._last_event_end = store.max_offset
        log.info("timer rebuilt", pending=wheel.pending_count, delivered=list(wheel.delivered))

    def _replay(self, start: int) -> None:
        """Index the CommitLog from ``start`` to its end. Bytes it cannot read (a damaged range
        recovery kept, a segment whose start was lost) are skipped to the next segment, with a
        warning: scheduled messages stored there cannot be delivered anyway."""
        store = self.host.store
        pos = start
        end = store.max_offset
        while pos < end:
            try:
                view = store.read_raw(pos, _REPLAY_CHUNK)
            except StoreError as exc:
                nxt = next((s for s, _e in store.commitlog_segments() if s > pos), end)
                log.warning(
                    "timer replay skips CommitLog bytes it cannot read",
                    offset=pos,
                    resumes_at=nxt,
                    error=str(exc),
                )
                pos = nxt
                continue
            if not len(view):
                break
            try:
                self._apply(bytes(view), pos)
            except RecordError as exc:
                log.error("timer replay skips a chunk", offset=pos, error=str(exc))
            pos += len(view)

    # -- dispatch ------------------------------------------------------------------------------------

    def replicated(self, offset: int, data: bytes | memoryview) -> None:
        """A slave stored its master's CommitLog bytes ``data`` at ``offset``: index them."""
        if self.wheel is None:
            return
        raw = data if isinstance(data, bytes) else bytes(data)
        try:
            self._apply(raw, offset)
        except RecordError as exc:
            log.error("timer dispatch failed", offset=offset, error=str(exc))

    def truncated(self, offset: int) -> None:
        """The CommitLog was cut back to ``offset``: a timer state holding records past it is
        rebuilt (only records the store still has may count)."""
        if self.wheel is None or offset >= self._last_event_end:
            return
        self._rebuild(f"the CommitLog was truncated to {offset}")

    def _apply(self, buf: bytes, base: int) -> None:
        wheel = self.wheel
        assert wheel is not None
        events: list[TimerEvent] = timer_events(buf, base)
        for event in events:
            if isinstance(event, Scheduled):
                try:
                    wheel.schedule(event.due_ms, event.offset, event.size, event.store_ms)
                except InvalidDeliveryTimeError as exc:
                    log.error("scheduled message not indexed", offset=event.offset, error=str(exc))
            elif isinstance(event, Recalled):
                wheel.cancel(event.due_ms, event.target, event.store_ms, source_end=event.end)
            elif isinstance(event, Delivered):
                wheel.commit_key(event.due_ms, event.source_offset)
        if events:
            self._last_event_end = base + len(buf)

    # -- scheduling (master) --------------------------------------------------------------------------

    def due_for(self, requested_ms: int, now: int) -> int:
        """The due time a message asking for ``requested_ms`` at ``now`` gets; raises
        :class:`InvalidDeliveryTimeError` when it is negative or beyond the maximum delay."""
        wheel = self.wheel
        if wheel is None:
            raise InvalidDeliveryTimeError(
                "scheduled delivery is off on this broker (timer_enable = false)"
            )
        if requested_ms < 0:
            raise InvalidDeliveryTimeError(f"delivery time {requested_ms} is negative")
        due = wheel.due_time(requested_ms, now)
        max_delay = self.config.max_delay_ms
        if due - now > max_delay:
            raise InvalidDeliveryTimeError(
                f"delivery time {requested_ms} is {due - now} ms ahead, more than the maximum "
                f"delay of {max_delay} ms (timer_max_delay_ms)"
            )
        return due

    def requested(self, messages: list[Message], now: int) -> list[int | None]:
        """The delivery time each message asks for (None: none); raises
        :class:`InvalidDeliveryTimeError` for a malformed, negative or too distant one."""
        out: list[int | None] = []
        for msg in messages:
            asked = requested_delivery_ms(msg.properties, now) if msg.properties else None
            if asked is not None:
                self.due_for(asked, now)
            out.append(asked)
        return out

    def put_scheduled(
        self, topic: str, queue_id: int, messages: list[Message], requested: list[int]
    ) -> PutResult:
        """Append ``messages`` (each scheduled for its ``requested`` time) under the timer topic
        for ``topic``/``queue_id`` with one CommitLog append, and schedule them in the same
        step. Raises :class:`InvalidDeliveryTimeError` (nothing stored) or a StoreError."""
        wheel = self.wheel
        now = now_ms()
        dues = [self.due_for(asked, now) for asked in requested]
        if wheel is None:  # due_for raised already
            raise InvalidDeliveryTimeError("scheduled delivery is off")
        stored = [
            _scheduled_copy(msg, topic, queue_id, due)
            for msg, due in zip(messages, dues, strict=True)
        ]
        body_bytes = sum(len(m.body) for m in stored)
        result = self.host.appender.put(TIMER_TOPIC, 0, stored, body_bytes)
        earliest: int | None = None
        end = result.end_offset
        offsets = result.physical_offsets
        for i, due in enumerate(dues):
            size = (offsets[i + 1] if i + 1 < len(offsets) else end) - offsets[i]
            entry = wheel.schedule(due, offsets[i], size, result.store_timestamp)
            if entry is not None and (earliest is None or entry.due_ms < earliest):
                earliest = entry.due_ms
        self._last_event_end = end
        self.host.metrics.timer_scheduled.inc(len(stored))
        if earliest is not None and (earliest < self._sleep_until or not self._sleep_until):
            self._wake.set()
        return result

    def put_at(self, message: Message, topic: str, queue_id: int, deliver_ms: int) -> PutResult:
        """Append ``message`` scheduled for ``topic``/``queue_id`` at ``deliver_ms`` (epoch ms;
        a time in the past delivers at once) and schedule it; the caller has checked the write
        lease (``ctx.check_writable()``).

        Final signature: ``put_at(message: Message, topic: str, queue_id: int, deliver_ms: int)
        -> PutResult``. The result can be awaited like a send's (``ctx.needs_wait(result)``,
        ``ctx.when_durable(result, done)``); ``result.physical_offsets[0]`` is the scheduled
        record's offset (its message id recalls it). Raises :class:`InvalidDeliveryTimeError`
        for a negative time or one beyond ``timer_max_delay_ms`` (nothing stored), a
        :class:`~storage.errors.StoreError` when the append fails."""
        return self.put_scheduled(topic, queue_id, [message], [deliver_ms])

    # -- recall (master) --------------------------------------------------------------------------------

    def recall(self, topic: str, msg_id: str) -> PutResult:
        """Recall the scheduled message ``msg_id`` of ``topic`` before its delivery: append a
        recall record (replicas cancel it from the CommitLog too) and cancel it in the wheel.
        Raises :class:`RecallError`; the caller checked the write lease."""
        wheel = self.wheel
        if wheel is None:
            raise RecallError(
                ResponseCode.SERVICE_NOT_AVAILABLE,
                "scheduled delivery is off on this broker (timer_enable = false)",
            )
        try:
            _host, offset = parse_msg_id(msg_id)
        except RecordError:
            raise RecallError(
                ResponseCode.BAD_REQUEST, f"malformed message id {msg_id!r}"
            ) from None
        record = self._read_scheduled(offset)
        if record is None:
            raise RecallError(
                ResponseCode.QUERY_NOT_FOUND,
                f"no message {msg_id} on this broker (unknown id or deleted)",
            )
        props = record.properties
        if (
            record.topic != TIMER_TOPIC
            or PROP_TIMER_DEL_UNIQKEY in props
            or props.get(PROP_REAL_TOPIC) != topic
        ):
            raise RecallError(
                ResponseCode.MESSAGE_ILLEGAL,
                f"message {msg_id} is not a scheduled message of topic {topic}",
            )
        try:
            due = int(props[PROP_TIMER_OUT_MS])
        except (KeyError, ValueError):
            raise RecallError(
                ResponseCode.MESSAGE_ILLEGAL, f"message {msg_id} has no valid {PROP_TIMER_OUT_MS}"
            ) from None
        if not wheel.pending(due, offset):
            raise RecallError(
                ResponseCode.QUERY_NOT_FOUND,
                f"scheduled message {msg_id} was already delivered or recalled",
            )
        marker = Message(
            topic=TIMER_TOPIC,
            body=_RECALL_BODY,
            properties={
                PROP_TIMER_DEL_UNIQKEY: make_msg_id(record.store_host, offset),
                PROP_TIMER_OUT_MS: str(due),
                PROP_REAL_TOPIC: topic,
            },
        )
        result = self.host.appender.put(TIMER_TOPIC, 0, [marker], len(_RECALL_BODY))
        wheel.cancel(due, offset, result.store_timestamp, source_end=result.end_offset)
        self._last_event_end = result.end_offset
        self.host.metrics.timer_recalled.inc()
        return result

    def _read_scheduled(self, offset: int) -> MessageRecord | None:
        store = self.host.store
        if not store.min_offset <= offset < store.max_offset:
            return None
        try:
            view = store.read_raw(offset, 1)
            record = decode_record(view, 0)
        except (StoreError, RecordError):
            return None
        if record.physical_offset != offset:
            return None
        return record

    # -- delivery (master) ------------------------------------------------------------------------------

    async def _deliver_loop(self) -> None:
        while True:
            try:
                wait = self._next_wait()
                if wait > 0:
                    self._wake.clear()
                    try:
                        await asyncio.wait_for(self._wake.wait(), wait)
                    except TimeoutError:
                        pass
                    continue
                if not self._writable():
                    await asyncio.sleep(0.05)
                    continue
                if not self.deliver_round(now_ms()):
                    await asyncio.sleep(0.05)  # an append failed: try again soon
                else:
                    await asyncio.sleep(0)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.error("timer delivery failed", error=f"{type(exc).__name__}: {exc}")
                await asyncio.sleep(0.5)

    def _writable(self) -> bool:
        """Whether this broker may append deliveries now (master with a valid write lease)."""
        return self.host.gate.writable()

    def _next_wait(self) -> float:
        """Seconds until the next delivery round (0: now)."""
        wheel = self.wheel
        if wheel is None or not self.host.gate.role.is_master:
            self._sleep_until = 0
            return 0.1
        if self._inflight:
            return 0.0
        now = now_ms()
        due = wheel.next_due_ms()
        if due is None:
            self._sleep_until = now + 1000
            return 1.0
        if due <= now:
            return 0.0
        until = min(due, now + 1000)
        self._sleep_until = until
        return (until - now) / 1000

    def deliver_round(self, now: int) -> bool:
        """Deliver what is due at ``now`` (at most :data:`DELIVERY_BATCH` entries) with one
        append per destination queue, each queue's messages in delivery order; False when an
        append failed (its entries are tried again, and the progress mark stops before them)."""
        wheel = self.wheel
        if wheel is None:
            return True
        entries = self._inflight or wheel.due(now, DELIVERY_BATCH)
        self._inflight = []
        if not entries:
            return True
        metrics = self.host.metrics
        appender = self.host.appender
        runs: dict[tuple[str, int], tuple[list[TimerEntry], list[Message]]] = {}
        unreadable = 0
        for entry in entries:
            built = self._delivery(entry)
            if built is None:  # unreadable: logged; nothing to deliver, it counts as done
                unreadable += 1
                continue
            msg, topic, queue_id = built
            run = runs.get((topic, queue_id))
            if run is None:
                run = runs[(topic, queue_id)] = ([], [])
            run[0].append(entry)
            run[1].append(msg)
        if unreadable:
            metrics.timer_unreadable.inc(unreadable)
        failed: set[TimerEntry] = set()
        for (topic, queue_id), (run_entries, batch) in runs.items():
            waiting = self._moved_away(topic, queue_id, run_entries, batch)
            if waiting is not None:
                failed.update(waiting)
                metrics.timer_delivered.inc(len(run_entries) - len(waiting))
                continue
            try:
                result = appender.put(topic, queue_id, batch, sum(len(m.body) for m in batch))
            except StoreError as exc:
                log.error(
                    "timer delivery append failed",
                    topic=topic,
                    queue_id=queue_id,
                    error=str(exc),
                )
                failed.update(run_entries)
                continue
            self._last_event_end = result.end_offset
            stored = result.store_timestamp
            observe = metrics.timer_lateness.observe
            for entry in run_entries:
                observe(max(stored - entry.due_ms, 0) / 1000)
            metrics.timer_delivered.inc(len(run_entries))
        ahead = self._delivered_ahead
        if not failed:
            last = entries[-1] if ahead is None else max(entries[-1], ahead)
            wheel.commit(last)
            self._delivered_ahead = None
            return True
        # The mark covers only what precedes the first failure; the rest of what was delivered
        # is committed once the failed entries are.
        done_prefix: TimerEntry | None = None
        for entry in entries:
            if entry in failed:
                break
            done_prefix = entry
        if done_prefix is not None:
            wheel.commit(done_prefix)
        delivered = [e for e in entries if e not in failed]
        if delivered:
            ahead = delivered[-1] if ahead is None else max(delivered[-1], ahead)
        self._delivered_ahead = ahead
        self._inflight = [e for e in entries if e in failed]
        return False

    def _moved_away(
        self, topic: str, queue_id: int, entries: list[TimerEntry], batch: list[Message]
    ) -> set[TimerEntry] | None:
        """None when ``topic``/``queue_id`` takes appends here. Else it is a static topic's
        queue that moved to another group (sealed) or is moving (fenced), and appending here
        would put the messages past its seal, where no logical reader looks: the entries not
        delivered yet. A fenced queue's wait (the move commits or its fence lapses); a sealed
        one's are sent on to the queue's newest item, and delivered once acknowledged there."""
        sealed = self.host.sealed
        if not sealed.has_closed(topic) or not sealed.closed(topic, queue_id, time.monotonic()):
            return None
        forward = self.forward
        if forward is None or (topic, queue_id) not in sealed.sealed():
            return set(entries)
        waiting: set[TimerEntry] = set()
        for entry, msg in zip(entries, batch, strict=True):
            if entry in self._forwarded:
                self._forwarded.discard(entry)
                continue
            waiting.add(entry)
            if entry not in self._forwarding:
                self._forwarding.add(entry)
                task = asyncio.get_running_loop().create_task(
                    self._forward(forward, entry, msg, topic, queue_id)
                )
                self._tasks.append(task)
                task.add_done_callback(self._forget_task)
        return waiting

    def _forget_task(self, task: asyncio.Task[None]) -> None:
        if task in self._tasks:
            self._tasks.remove(task)

    async def _forward(
        self, forward: Forward, entry: TimerEntry, msg: Message, topic: str, queue_id: int
    ) -> None:
        try:
            await forward(msg, topic, queue_id)
        except ForwardError as exc:
            log.warning(
                "scheduled message due on a moved queue not sent on yet; retrying",
                topic=topic,
                queue_id=queue_id,
                error=str(exc),
            )
            await asyncio.sleep(FORWARD_RETRY_S)
        else:
            self._forwarded.add(entry)
            self._wake.set()
        finally:
            self._forwarding.discard(entry)

    def _delivery(self, entry: TimerEntry) -> tuple[Message, str, int] | None:
        """The real message of ``entry`` and its topic and queue, read back from its CommitLog
        record; None when the record cannot be read (logged)."""
        record = self._read_scheduled(entry.commitlog_offset)
        if record is None or record.topic != TIMER_TOPIC:
            log.error(
                "scheduled message cannot be read: not delivered",
                offset=entry.commitlog_offset,
                due_ms=entry.due_ms,
            )
            return None
        props = dict(record.properties)
        topic = props.get(PROP_REAL_TOPIC)
        queue_text = props.get(PROP_REAL_QUEUE_ID, "")
        if topic is None or not queue_text.isdigit():
            log.error("scheduled message has no real topic/queue", offset=entry.commitlog_offset)
            return None
        out = {k: v for k, v in props.items() if k not in _STRIP_ON_DELIVERY}
        out.setdefault(PROP_UNIQ_KEY, record.msg_id)  # its store host and offset
        out[PROP_TIMER_OUT_MS] = str(entry.due_ms)
        out[PROP_TIMER_SOURCE_OFFSET] = str(entry.commitlog_offset)
        return message_copy(record, topic, out), topic, int(queue_text)

    # -- progress ---------------------------------------------------------------------------------------

    async def _progress_loop(self) -> None:
        interval = self.host.cfg.timer_flush_interval_ms / 1000
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval)
            try:
                wheel = self.wheel
                if wheel is None:
                    continue
                # The fsync of the timer log off the loop (appends go on meanwhile: they mark
                # their segment dirty again for the next flush); the rest is small.
                await loop.run_in_executor(None, wheel.flush)
                if wheel is self.wheel:  # not rebuilt meanwhile
                    self.checkpoint()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.error("timer progress failed", error=f"{type(exc).__name__}: {exc}")

    def checkpoint(self) -> None:
        """Save the progress noted last time if the CommitLog now covers it durably; flush the
        timer log; note the current progress for the next time."""
        wheel = self.wheel
        if wheel is None:
            return
        self._save_if_durable()
        wheel.flush()
        self._note_snapshot()

    def _note_snapshot(self, *, force: bool = False) -> None:
        wheel = self.wheel
        assert wheel is not None
        if self._snapshot is None or force:
            self._snapshot = _Snapshot(wheel.delivered, self.host.store.max_offset)

    def _durable(self, end: int) -> bool:
        host = self.host
        if host.service.flushed_offset < end:
            return False
        visible = host.visible_offset()
        return visible is None or visible >= end

    def _save_if_durable(self) -> None:
        wheel = self.wheel
        snap = self._snapshot
        if wheel is None or snap is None or not self._durable(snap.end):
            return
        wheel.save_progress(snap.key)
        if snap.end != self._dispatched_saved:
            write_atomic(self.directory / DISPATCHED_FILE, str(snap.end).encode())
            self._dispatched_saved = snap.end
        self._snapshot = None

    # -- figures ----------------------------------------------------------------------------------------

    def retention_floor(self) -> int | None:
        """The CommitLog offset from which retention by age keeps everything: the oldest
        scheduled message possibly still pending (None: none is)."""
        wheel = self.wheel
        if wheel is None:
            return None
        floor = wheel.oldest_offset()
        for entry in self._inflight:
            if floor is None or entry.commitlog_offset < floor:
                floor = entry.commitlog_offset
        return floor

    @property
    def pending_count(self) -> int:
        return 0 if self.wheel is None else self.wheel.pending_count + len(self._inflight)


def _scheduled_copy(msg: Message, topic: str, queue_id: int, due_ms: int) -> Message:
    """What is stored under the timer topic for ``msg``: its real topic and queue and its due
    time in properties, the request properties dropped (the due time is what counts)."""
    props = {k: v for k, v in msg.properties.items() if k not in _REQUEST_SET}
    props[PROP_REAL_TOPIC] = topic
    props[PROP_REAL_QUEUE_ID] = str(queue_id)
    props[PROP_TIMER_OUT_MS] = str(due_ms)
    return message_copy(msg, TIMER_TOPIC, props)
