"""Delivering what is due: the timer service's delivery rounds (master only).

A round takes the entries due (or those a failed round left), reads each one's scheduled record
back, and appends the real messages to their real topics and queues, one append per destination
queue, each queue's messages in delivery order; then it commits the progress mark in the wheel
up to the first entry not delivered. A message due on a static topic's queue that moved to
another group is not appended here (past the queue's seal no logical reader looks): it waits
while the queue is fenced, and is sent on to the queue's newest item once sealed
(:mod:`broker.static_forward`), counting as delivered when that group acknowledged it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Final

import structlog

from broker.appender import TopicDeletedError
from broker.static_forward import ForwardError
from broker.timer.host import TimerHost
from broker.timer.schedule import STRIP_ON_DELIVERY, read_scheduled
from protocol.message import Message, message_copy
from protocol.timer import (
    PROP_REAL_QUEUE_ID,
    PROP_REAL_TOPIC,
    PROP_TIMER_OUT_MS,
    PROP_TIMER_SOURCE_OFFSET,
    PROP_UNIQ_KEY,
    TIMER_TOPIC,
)
from storage.errors import StoreError
from storage.store import UnreadableMessageError
from storage.timer.wheel import TimerEntry, TimingWheel

__all__ = ["DELIVERY_BATCH", "FORWARD_RETRY_S", "Delivery", "Forward"]

log = structlog.get_logger(__name__)

REPAIRING: Final = object()
"""What :meth:`Delivery._delivery` gives for a record being repaired from a replica."""

Forward = Callable[[Message, str, int], Awaitable[str]]
"""``forward(message, topic, physical_queue)``: :meth:`broker.static_forward.StaticForwarder.forward`."""

FORWARD_RETRY_S: Final = 1.0
"""After a message due on a moved queue could not be sent on: the wait before trying again."""

DELIVERY_BATCH: Final = 2048
"""Most entries one delivery round hands out before it lets other work run."""


class Delivery:
    """The delivery state of one timer service: entries a failed round left, entries delivered
    past a failure (committed once it is), and the messages being sent on to moved queues."""

    def __init__(
        self, host: TimerHost, appended: Callable[[int], None], wake: Callable[[], None]
    ) -> None:
        self._host = host
        self._appended = appended
        """Called with the CommitLog end of each delivery append."""
        self._wake = wake
        """Called when a message sent on was acknowledged (the next round commits it)."""
        self.inflight: list[TimerEntry] = []
        """Entries a failed round left: the next round tries them first."""
        self._delivered_ahead: TimerEntry | None = None
        self.forward: Forward | None = None
        """How a message due on a static topic queue that moved away is stored on the queue's
        newest item (:mod:`broker.static_forward`); None without controllers."""
        self._forwarding: set[TimerEntry] = set()
        self._forwarded: set[TimerEntry] = set()
        """Entries whose message the newest item's group acknowledged: delivered."""
        self.tasks: list[asyncio.Task[None]] = []

    def reset(self) -> None:
        """The wheel was rebuilt: nothing of the old one is pending here."""
        self.inflight.clear()
        self._delivered_ahead = None

    def round(self, wheel: TimingWheel, now: int) -> bool:
        """Deliver what is due at ``now`` (at most :data:`DELIVERY_BATCH` entries) with one
        append per destination queue, each queue's messages in delivery order; False when an
        append failed (its entries are tried again, and the progress mark stops before them)."""
        entries = self.inflight or wheel.due(now, DELIVERY_BATCH)
        self.inflight = []
        if not entries:
            return True
        metrics = self._host.metrics
        appender = self._host.appender
        runs: dict[tuple[str, int], tuple[list[TimerEntry], list[Message]]] = {}
        unreadable = 0
        failed: set[TimerEntry] = set()
        for entry in entries:
            built = self._delivery(entry)
            if built is REPAIRING:  # its record is being repaired from a replica: tried again
                failed.add(entry)
                continue
            if built is None:  # unreadable: logged; nothing to deliver, it counts as done
                unreadable += 1
                continue
            assert isinstance(built, tuple)
            msg, topic, queue_id = built
            run = runs.get((topic, queue_id))
            if run is None:
                run = runs[(topic, queue_id)] = ([], [])
            run[0].append(entry)
            run[1].append(msg)
        if unreadable:
            metrics.timer_unreadable.inc(unreadable)
        for (topic, queue_id), (run_entries, batch) in runs.items():
            waiting = self._moved_away(topic, queue_id, run_entries, batch)
            if waiting is not None:
                failed.update(waiting)
                metrics.timer_delivered.inc(len(run_entries) - len(waiting))
                continue
            try:
                result = appender.put(topic, queue_id, batch, sum(len(m.body) for m in batch))
            except TopicDeletedError:
                # Due to a topic deleted meanwhile (rmqctl deleteTopic): dropped, not retried
                # (a retry would hold back every later delivery).
                log.warning(
                    "timer delivery to a deleted topic dropped",
                    topic=topic,
                    queue_id=queue_id,
                    messages=len(run_entries),
                )
                metrics.timer_delivered.inc(len(run_entries))
                continue
            except StoreError as exc:
                log.error(
                    "timer delivery append failed",
                    topic=topic,
                    queue_id=queue_id,
                    error=str(exc),
                )
                failed.update(run_entries)
                continue
            self._appended(result.end_offset)
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
        self.inflight = [e for e in entries if e in failed]
        return False

    def _moved_away(
        self, topic: str, queue_id: int, entries: list[TimerEntry], batch: list[Message]
    ) -> set[TimerEntry] | None:
        """None when ``topic``/``queue_id`` takes appends here. Else it is a static topic's
        queue that moved to another group (sealed) or is moving (fenced), and appending here
        would put the messages past its seal, where no logical reader looks: the entries not
        delivered yet. A fenced queue's wait (the move commits or its fence lapses); a sealed
        one's are sent on to the queue's newest item, and delivered once acknowledged there."""
        sealed = self._host.sealed
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
                self.tasks.append(task)
                task.add_done_callback(self._forget_task)
        return waiting

    def _forget_task(self, task: asyncio.Task[None]) -> None:
        if task in self.tasks:
            self.tasks.remove(task)

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
            self._wake()
        finally:
            self._forwarding.discard(entry)

    def _repairing(self, entry: TimerEntry) -> bool:
        """Is the record of ``entry``, which failed its checks, being repaired from another
        replica (issue 31: started or joined, ``StoreRepair.repairer``)? Then the entry is
        tried again rather than dropped as unreadable."""
        store = self._host.store
        repairer = store.repairs.repairer
        if repairer is None:
            return False
        try:
            store.read_message(entry.commitlog_offset)  # known as damage by its size from here
        except UnreadableMessageError:
            return repairer.start(entry.commitlog_offset) is not None
        except StoreError:
            return False
        return False

    def _delivery(self, entry: TimerEntry) -> tuple[Message, str, int] | object | None:
        """The real message of ``entry`` and its topic and queue, read back from its CommitLog
        record; :data:`REPAIRING` when the record fails its checks and is being repaired from
        another replica; None when it cannot be read (logged)."""
        record = read_scheduled(self._host.store, entry.commitlog_offset)
        if record is None or record.topic != TIMER_TOPIC:
            if self._repairing(entry):
                return REPAIRING
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
        out = {k: v for k, v in props.items() if k not in STRIP_ON_DELIVERY}
        out.setdefault(PROP_UNIQ_KEY, record.msg_id)  # its store host and offset
        out[PROP_TIMER_OUT_MS] = str(entry.due_ms)
        out[PROP_TIMER_SOURCE_OFFSET] = str(entry.commitlog_offset)
        return message_copy(record, topic, out), topic, int(queue_text)
