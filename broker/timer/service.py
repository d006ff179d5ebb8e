"""The timer service: the broker's driver of the timing wheel (``storage.timer``).

It owns the wheel and keeps it equal to what the CommitLog says (docs/timer.md):

* **Open** (:meth:`TimerService.open`, after the store recovered): open the wheel and replay the
  CommitLog from where its timer log and progress leave off. A timer state ahead of the
  CommitLog (recovery or a truncation cut records it had indexed) is rebuilt from the whole log.
* **Master appends** go through here and change the wheel in the same synchronous step as the
  append: a scheduled send (:meth:`put_send`, :meth:`put_scheduled`, :meth:`put_at`; the
  scheduling rules are :mod:`broker.timer.schedule`), a recall (:meth:`recall`; the checks are
  :mod:`broker.timer.recall`), a delivery (the delivery loop, :mod:`broker.timer.delivery`).
  So the wheel covers every record below ``store.max_offset``.
* **Replicated appends** (a slave) are dispatched as they are stored
  (:meth:`replicated`): schedule, cancel, and ``commit_key`` for each delivery record.
* **Delivery** (master only, with a valid write lease): when entries are due, append each real
  message to its real topic and queue through :class:`~broker.appender.Appender`, then commit.
* **Progress** (:mod:`broker.timer.progress`): every ``timer_flush_interval_ms`` the timer log
  is flushed, and the progress mark noted earlier is saved once the CommitLog is durable (and,
  in controller mode, replicated) up to where it was noted, with that CommitLog offset
  (``dispatched``): a restart replays from there, so a delivery record that survived is never
  delivered again.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path
from typing import Final

import structlog

from broker.timer.delivery import DELIVERY_BATCH, FORWARD_RETRY_S, Delivery, Forward
from broker.timer.host import TimerHost
from broker.timer.progress import DISPATCHED_FILE, GEOMETRY_FILE, Progress
from broker.timer.recall import RECALL_BODY, RecallError, recall_marker
from broker.timer.records import Delivered, Recalled, Scheduled, TimerEvent, timer_events
from broker.timer.schedule import (
    ScheduleRefused,
    admit,
    due_for,
    reserved_property,
    scheduled_copy,
    scheduling,
)
from broker.timer.skipped import Skipped
from protocol.message import Message, RecordError
from protocol.timer import TIMER_TOPIC
from storage.errors import StoreError
from storage.store import PutResult
from storage.timer.wheel import InvalidDeliveryTimeError, TimingWheel, WheelConfig

__all__ = [
    "DELIVERY_BATCH",
    "DISPATCHED_FILE",
    "FORWARD_RETRY_S",
    "GEOMETRY_FILE",
    "Forward",
    "RecallError",
    "ScheduleRefused",
    "TimerService",
    "reserved_property",
    "scheduling",
]

log = structlog.get_logger(__name__)

_REPLAY_CHUNK: Final = 8 * 1024 * 1024


def now_ms() -> int:
    return time.time_ns() // 1_000_000


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
        self._progress = Progress(self.directory, self.config)
        self._last_event_end = 0
        self._wake = asyncio.Event()
        self._sleep_until = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._delivery = Delivery(host, self._appended, self._wake.set)
        self._skipped = Skipped()

    @property
    def forward(self) -> Forward | None:
        """How a message due on a static topic queue that moved away is stored on the queue's
        newest item (:mod:`broker.static_forward`); None without controllers."""
        return self._delivery.forward

    @forward.setter
    def forward(self, forward: Forward | None) -> None:
        self._delivery.forward = forward

    def _appended(self, end: int) -> None:
        self._last_event_end = end

    # -- lifecycle -------------------------------------------------------------------------------

    def open(self) -> None:
        """Open the wheel and replay the CommitLog into it (after the store recovered)."""
        if not self.enabled:
            return
        store = self.host.store
        geometry = self._progress.geometry_changed()
        if geometry is not None:
            self._rebuild(geometry)
            return
        try:
            wheel = self._open_wheel()
        except StoreError as exc:  # an unreadable progress file: the timer is a cache
            self._rebuild(f"the timer's files cannot be used: {exc}")
            return
        dispatched = self._progress.load_dispatched(wheel)
        if wheel.indexed_through > store.max_offset or dispatched > store.max_offset:
            self._rebuild(
                f"the timer log indexes CommitLog offset {max(wheel.indexed_through, dispatched)}"
                f" but the CommitLog ends at {store.max_offset}"
            )
            return
        # The timer log holds every timer record below the saved mark (it is fsynced before the
        # mark is saved: the progress loop, close), so a restart replays from the mark, not from
        # the timer log's last record: with no scheduled message since, that was the whole
        # CommitLog at every start. A timer log whose open cut a damaged tail may have lost
        # records below the mark: then from its end too.
        start = dispatched
        if wheel.recovery.truncated_bytes:
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
        tasks = self._tasks + self._delivery.tasks
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
        self._delivery.tasks.clear()

    def close(self) -> None:
        """A clean stop, after the store's last flush: the timer log flushed, the progress the
        CommitLog covers saved, the wheel closed."""
        wheel = self.wheel
        if wheel is None:
            return
        wheel.flush()  # every timer record below the mark durable before the mark (open)
        self._progress.note(wheel, self._covered(), force=True)
        self._progress.save_if_durable(wheel, self._durable)
        wheel.flush()
        wheel.log.close()
        self.wheel = None

    # -- the wheel and the CommitLog's replay -------------------------------------------------------

    def _open_wheel(self) -> TimingWheel:
        # Time 0: the wheel's clock moves only with the records it replays (their store time),
        # so every due time is the one the master stamped (docs/timer.md, Replicas).
        self.wheel = TimingWheel(self.directory, 0, self.config)
        self._progress.write_geometry()
        return self.wheel

    def _rebuild(self, why: str) -> None:
        """Throw the timer state away and index the whole CommitLog again."""
        store = self.host.store
        log.warning("rebuilding the timer from the CommitLog", reason=why)
        if self.wheel is not None:
            self.wheel.log.close()
            self.wheel = None
        shutil.rmtree(self.directory, ignore_errors=True)
        self._delivery.reset()
        self._progress.reset()
        self._skipped.reset()
        wheel = self._open_wheel()
        self._replay(store.min_offset)
        self._last_event_end = store.max_offset
        log.info("timer rebuilt", pending=wheel.pending_count, delivered=list(wheel.delivered))

    def _replay(self, start: int) -> None:
        """Index the CommitLog from ``start`` to its end. A record that fails its checks is made
        known to the store as damage (the broker has it repaired from a replica) and passed
        over by its extent (``MessageStore.read_checked``), remembered until it is repaired
        (:meth:`replay_repaired`). Bytes it cannot read at all (a segment whose start was lost)
        are skipped to the next segment, with a warning."""
        store = self.host.store
        pos = start
        end = store.max_offset
        while pos < end:
            try:
                view, damage = store.read_checked(pos, _REPLAY_CHUNK)
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
                if not damage:
                    break
                self._skipped.add(pos, damage)
                log.warning(
                    f"timer replay passes over {damage} damaged CommitLog bytes at offset {pos}:"
                    " their scheduled messages are indexed once they are repaired",
                    offset=pos,
                    size=damage,
                )
                pos += damage
                continue
            try:
                self._apply(bytes(view), pos)
            except RecordError as exc:
                log.error("timer replay skips a chunk", offset=pos, error=str(exc))
            pos += len(view)

    def replay_repaired(self) -> int:
        """Index the scheduled messages of the spans a replay passed over whose bytes were
        repaired since (each span once): those no later delivery or recall record names. On a
        master an overdue one is due at once, after every entry handed out; a replica keeps
        the master's due time (its delivery record drops it). How many were scheduled."""
        wheel = self.wheel
        store = self.host.store
        scheduled = 0
        if wheel is None:
            return 0
        for span in list(self._skipped.spans.values()):
            if store.repairs.unreadable_size(span.offset) is not None:
                continue  # not repaired yet (a repair writing it back forgets the damage)
            size = span.end - span.offset
            try:
                view, damage = store.read_checked(span.offset, size)
            except StoreError:
                continue
            if damage or len(view) < size:
                continue  # not repaired yet
            del self._skipped.spans[span.offset]
            master = self.host.gate.role.is_master
            for event in timer_events(bytes(view), span.offset):
                if isinstance(event, Delivered):
                    wheel.commit_key(event.due_ms, event.source_offset)
                elif isinstance(event, Recalled) and event.target not in span.done:
                    span.done.add(event.target)
                    wheel.cancel(
                        event.due_ms, event.target, event.store_ms, source_end=event.end, late=True
                    )
                if not isinstance(event, Scheduled) or event.offset in span.done:
                    continue
                due = event.due_ms
                if master and due <= wheel.now:
                    due = wheel.now + 1
                entry = wheel.schedule_late(due, event.offset, event.size)
                if entry is None:
                    continue
                scheduled += 1
                log.warning(
                    f"timer indexes the scheduled message at CommitLog offset {event.offset}, "
                    "which its replay passed over, now repaired",
                    offset=event.offset,
                    due_ms=entry.due_ms,
                )
        if scheduled:
            self._wake.set()
        return scheduled

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
        if self._skipped.spans:
            self._skipped.note(events)
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
        return due_for(self.wheel, self.config, requested_ms, now)

    def put_send(self, topic: str, queue_id: int, messages: list[Message]) -> PutResult | None:
        """A send's messages to ``topic``/``queue_id``, admitted against one clock reading
        (:func:`~broker.timer.schedule.admit`): None when none asks for a delivery time (store
        them as usual). Else those that do are stored under the timer topic and scheduled, the
        others appended as usual, and the result lists every record's offset in the order given
        (their message ids; a scheduled one's recalls it) with ``first_queue_offset`` of the
        ordinary ones (-1 if none: a scheduled message has no queue offset until its
        delivery). Raises :class:`~broker.timer.schedule.ScheduleRefused` (nothing stored) or
        a StoreError; the caller checked the write lease."""
        now = now_ms()
        dues = admit(self.wheel, self.config, messages, now)
        if all(d is None for d in dues):
            return None
        later = [m for m, d in zip(messages, dues, strict=True) if d is not None]
        now_ones = [m for m, d in zip(messages, dues, strict=True) if d is None]
        plain: PutResult | None = None
        if now_ones:
            plain = self.host.appender.put(
                topic, queue_id, now_ones, sum(len(m.body) for m in now_ones)
            )
        result = self._put_due(topic, queue_id, later, [d for d in dues if d is not None])
        plain_offsets = iter(plain.physical_offsets if plain is not None else ())
        timer_offsets = iter(result.physical_offsets)
        offsets = [next(timer_offsets) if d is not None else next(plain_offsets) for d in dues]
        return PutResult(
            queue_id=queue_id,
            first_queue_offset=plain.first_queue_offset if plain is not None else -1,
            count=len(messages),
            physical_offsets=offsets,
            end_offset=result.end_offset,
            store_timestamp=result.store_timestamp,
        )

    def put_scheduled(
        self, topic: str, queue_id: int, messages: list[Message], requested: list[int]
    ) -> PutResult:
        """Append ``messages`` (each scheduled for its ``requested`` time) under the timer topic
        for ``topic``/``queue_id`` with one CommitLog append, and schedule them in the same
        step. Raises :class:`InvalidDeliveryTimeError` (nothing stored) or a StoreError."""
        now = now_ms()
        dues = [self.due_for(asked, now) for asked in requested]
        return self._put_due(topic, queue_id, messages, dues)

    def _put_due(
        self, topic: str, queue_id: int, messages: list[Message], dues: list[int]
    ) -> PutResult:
        """Append ``messages`` with their due times (checked) under the timer topic for
        ``topic``/``queue_id`` in one CommitLog append, and schedule them in the same step."""
        wheel = self.wheel
        if wheel is None:  # due_for raised already
            raise InvalidDeliveryTimeError("scheduled delivery is off")
        stored = [
            scheduled_copy(msg, topic, queue_id, due)
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
        recall = recall_marker(self.wheel, self.host.store, topic, msg_id)
        wheel = self.wheel
        assert wheel is not None  # recall_marker refuses without one
        result = self.host.appender.put(TIMER_TOPIC, 0, [recall.marker], len(RECALL_BODY))
        wheel.cancel(
            recall.due_ms, recall.offset, result.store_timestamp, source_end=result.end_offset
        )
        self._last_event_end = result.end_offset
        self.host.metrics.timer_recalled.inc()
        return result

    # -- delivery (master) ------------------------------------------------------------------------------

    async def _deliver_loop(self) -> None:
        while True:
            try:
                if self._skipped.spans:
                    self.replay_repaired()
                wait = self._next_wait()
                if wait > 0:
                    self._wake.clear()
                    try:
                        async with asyncio.timeout(wait):
                            await self._wake.wait()
                    except TimeoutError:
                        pass
                    continue
                if not self.host.gate.writable():
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

    def _next_wait(self) -> float:
        """Seconds until the next delivery round (0: now)."""
        wheel = self.wheel
        if wheel is None or not self.host.gate.role.is_master:
            self._sleep_until = 0
            return 0.1
        if self._delivery.inflight:
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
        """Deliver what is due at ``now`` (:meth:`broker.timer.delivery.Delivery.round`); False
        when an append failed."""
        wheel = self.wheel
        if wheel is None:
            return True
        return self._delivery.round(wheel, now)

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
        self._progress.save_if_durable(wheel, self._durable)
        wheel.flush()
        self._progress.note(wheel, self._covered())

    def _covered(self) -> int:
        """The CommitLog offset the timer has indexed all of: its end, or the first span a
        replay passed over and has not replayed yet (a restart replays from there again)."""
        end = self.host.store.max_offset
        first = self._skipped.first()
        return end if first is None else min(first, end)

    def _durable(self, end: int) -> bool:
        host = self.host
        if host.service.flushed_offset < end:
            return False
        visible = host.visible_offset()
        return visible is None or visible >= end

    # -- figures ----------------------------------------------------------------------------------------

    def retention_floor(self) -> int | None:
        """The CommitLog offset from which retention by age keeps everything: the oldest
        scheduled message possibly still pending (None: none is)."""
        wheel = self.wheel
        if wheel is None:
            return None
        floor = wheel.oldest_offset()
        for entry in self._delivery.inflight:
            if floor is None or entry.commitlog_offset < floor:
                floor = entry.commitlog_offset
        return floor

    @property
    def pending_count(self) -> int:
        pending = len(self._delivery.inflight)
        return 0 if self.wheel is None else self.wheel.pending_count + pending
