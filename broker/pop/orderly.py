"""FIFO message groups under POP: which message of a queue a FIFO consumer group may take next.
A pure state machine (no clock, no I/O; time is an input), part of the in-flight set
(:class:`~broker.pop.inflight.PopState` feeds it the revive log's records).

The lock is per **message group within a queue** (docs/fifo.md): a message group has at most one
message out at a time. A message handed out blocks its group until it is acked, or until it is
dead-lettered after its last attempt; when its invisible time runs out unacked it is handed out
again in place (same queue offset, attempt + 1) and keeps blocking its group. Later messages of
other groups in the same queue flow past it. A message without a group blocks nothing.

Per (consumer group, topic, queue), :class:`OrderlyQueue` holds:

* ``low``: every queue offset below it is *done* (acked, passed over, dead-lettered);
* ``frontier``: the offsets below it were read (the driver :meth:`OrderlyQueue.learn`\\ s each
  record's message group and tags in offset order), at most :data:`WINDOW` past ``low``;
* the *open* offsets of ``[low, frontier)`` (not done), with their message group and tags;
* the latest delivery of each offset handed out and not done: its checkpoint id, deadline and
  attempt count.

Derivable from the CommitLog: an :class:`~protocol.pop.OrderlyCheckpoint` names the offsets it
handed out (a delivery, attempt + 1) and passed (done), and its ``start`` is ``low`` when it was
written (so everything below it is done); ack and revived records make an offset done; change
records move a deadline. A replica replaying them gets every delivery, attempt count and done
offset; it resets ``frontier`` to ``low`` and learns the message groups again from the queue.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from protocol.pop import MAX_POP_BATCH, OrderlyCheckpoint
from protocol.pop_snapshot import OrderlySnapshot

__all__ = ["WINDOW", "Delivery", "OrderState", "OrderlyQueue", "Selection"]

Key = tuple[int, int]
"""(checkpoint id, queue offset)."""
QueueKey = tuple[str, str, int]
"""(consumer group, topic, queue id)."""

WINDOW = MAX_POP_BATCH
"""How far past ``low`` a queue is read ahead: a message group blocked that long holds the
queue back once this many messages after its blocked one are read (one checkpoint's span)."""


@dataclass(slots=True)
class Delivery:
    """The latest hand-out of an offset not done yet."""

    key: Key
    deadline_ms: int
    attempts: int
    """How many times the offset was handed out (1 the first time)."""


@dataclass(slots=True)
class Selection:
    """What one POP of a queue takes: offsets to hand out (with their attempt number), and
    offsets to pass over for good (filtered out or unreadable)."""

    handed: list[tuple[int, int]] = field(default_factory=list)
    passed: list[int] = field(default_factory=list)

    def checkpoint(
        self, q: QueueKey, start: int, pop_ms: int, invisible_ms: int
    ) -> OrderlyCheckpoint | None:
        """The record that makes this selection durable (None: nothing to record)."""
        offsets = [o for o, _ in self.handed] + self.passed
        if not offsets:
            return None
        group, topic, queue_id = q
        return OrderlyCheckpoint(
            group,
            topic,
            queue_id,
            start,
            max(offsets) + 1 - start,
            tuple(sorted(o for o, _ in self.handed)),
            tuple(sorted(self.passed)),
            pop_ms,
            invisible_ms,
        )


_UNREADABLE = object()
"""The tags of an open offset whose record could not be read: passed over."""


class OrderlyQueue:
    """One FIFO consumer group's order state on one queue."""

    __slots__ = ("_done_ahead", "_open", "deliveries", "frontier", "key")

    def __init__(self, key: QueueKey, low: int) -> None:
        self.key = key
        self.frontier = low
        self._open: dict[int, tuple[str | None, object]] = {}
        """Offsets of ``[low, frontier)`` not done, ascending (insertion order): message group
        (None: no group) and tags (a str, or :data:`_UNREADABLE`)."""
        self._done_ahead: set[int] = set()
        """Offsets at or past ``frontier`` known to be done (acked before a rebuild)."""
        self.deliveries: dict[int, Delivery] = {}

    @property
    def low(self) -> int:
        """The lowest offset not done, as far as it was read (every one below is done)."""
        return next(iter(self._open), self.frontier)

    def room(self) -> int:
        """How many more offsets may be read ahead (:meth:`learn`) now."""
        return max(0, WINDOW - (self.frontier - self.low))

    def learn(self, offset: int, message_group: str | None, tags: str | None) -> None:
        """The record at ``frontier`` (``offset``), read: its message group and tags (``tags``
        None: the record is unreadable, it will be passed over). Offsets must come in order;
        an offset past ``frontier`` means the ones between are gone (retention)."""
        if offset < self.frontier:
            return
        if offset > self.frontier:
            self.skip_to(offset)
        self.frontier = offset + 1
        if offset in self._done_ahead:
            self._done_ahead.discard(offset)
            return
        self._open[offset] = (message_group, _UNREADABLE if tags is None else tags)

    def skip_to(self, offset: int) -> list[Key]:
        """The queue starts at ``offset`` now (retention deleted what was below): forget every
        offset below it; returns the deliveries dropped with them."""
        dropped: list[Key] = []
        for o in [o for o in self._open if o < offset]:
            del self._open[o]
        for o in [o for o in self.deliveries if o < offset]:
            dropped.append(self.deliveries.pop(o).key)
        self._done_ahead = {o for o in self._done_ahead if o >= offset}
        self.frontier = max(self.frontier, offset)
        return dropped

    def done(self, offset: int) -> None:
        self.deliveries.pop(offset, None)
        if offset < self.frontier:
            self._open.pop(offset, None)
        elif offset >= self.low:
            self._done_ahead.add(offset)

    def select(
        self,
        now_ms: int,
        want: int,
        max_attempts: int,
        accepts: Callable[[str], bool] | None = None,
    ) -> Selection:
        """Up to ``want`` offsets to hand out at ``now_ms``, in queue order: an offset whose
        message group has no earlier offset open, either never handed out or handed out with
        its deadline passed (again, attempt + 1) and fewer than ``max_attempts`` attempts (one
        past them waits for the dead-letter step). A never-delivered message that ``accepts``
        refuses, or an unreadable one, is passed over. Changes nothing (the checkpoint does)."""
        out = Selection()
        blocked: set[str] = set()
        for offset, (group, tags) in self._open.items():
            d = self.deliveries.get(offset)
            if d is None:
                if tags is _UNREADABLE or (
                    accepts is not None and isinstance(tags, str) and not accepts(tags)
                ):
                    out.passed.append(offset)
                    continue
                if group is not None and group in blocked:
                    continue
                out.handed.append((offset, 1))
            else:
                free = group is None or group not in blocked
                if free and now_ms >= d.deadline_ms and d.attempts < max_attempts:
                    out.handed.append((offset, d.attempts + 1))
                elif group is None:
                    continue
            if group is not None:
                blocked.add(group)
            if len(out.handed) >= want:
                break
        return out

    def blocked_groups(self) -> int:
        """Message groups with a message handed out and not done (in flight, or waiting to be
        handed out again or dead-lettered): each blocks its group's later messages."""
        n = 0
        for offset in self.deliveries:
            entry = self._open.get(offset)
            if entry is None or entry[0] is not None:  # not read yet since a rebuild: count it
                n += 1
        return n


class OrderState:
    """The order state of every FIFO consumer group's queues on one broker group."""

    def __init__(self) -> None:
        self.queues: dict[QueueKey, OrderlyQueue] = {}
        self._by_key: dict[Key, QueueKey] = {}
        """The queue of each latest delivery not done."""

    def queue(self, q: QueueKey) -> OrderlyQueue | None:
        return self.queues.get(q)

    def open_queue(self, q: QueueKey, low: int) -> OrderlyQueue:
        """The queue's state; a queue the group never popped as FIFO starts at ``low``."""
        state = self.queues.get(q)
        if state is None:
            state = self.queues[q] = OrderlyQueue(q, low)
        return state

    # -- records -------------------------------------------------------------------------------
    def checkpoint(self, ck_id: int, ck: OrderlyCheckpoint) -> list[Key]:
        """Apply a FIFO POP; returns the earlier deliveries its redeliveries replace."""
        q = (ck.group, ck.topic, ck.queue_id)
        state = self.queues.get(q)
        if state is None:
            state = self.queues[q] = OrderlyQueue(q, ck.start)
        elif ck.start > state.frontier:
            # Everything below start was done when the record was written (a replay).
            for key in state.skip_to(ck.start):
                self._by_key.pop(key, None)
        replaced: list[Key] = []
        deadline = ck.deadline_ms
        for offset in ck.popped:
            old = state.deliveries.get(offset)
            attempts = 1
            if old is not None:
                attempts = old.attempts + 1
                replaced.append(old.key)
                self._by_key.pop(old.key, None)
            key = (ck_id, offset)
            state.deliveries[offset] = Delivery(key, deadline, attempts)
            self._by_key[key] = q
        for offset in ck.passed:
            old = state.deliveries.get(offset)
            if old is not None:
                self._by_key.pop(old.key, None)
            state.done(offset)
        return replaced

    def done(self, key: Key) -> QueueKey | None:
        """A delivery acked or dead-lettered: its offset is done and its message group goes
        on. Returns its queue (None: not a FIFO delivery, or not the latest of its offset)."""
        q = self._by_key.pop(key, None)
        if q is None:
            return None
        self.queues[q].done(key[1])
        return q

    def change(self, key: Key, deadline_ms: int) -> None:
        q = self._by_key.get(key)
        if q is not None:
            self.queues[q].deliveries[key[1]].deadline_ms = deadline_ms

    # -- snapshots ---------------------------------------------------------------------------
    def snapshot(self) -> tuple[OrderlySnapshot, ...]:
        """What a replay of the records so far would rebuild: per queue, ``low``, the offsets
        at or above it finished, and the latest deliveries (a replica learns the message
        groups again from the queue, from ``low``)."""
        out = []
        for q, state in self.queues.items():
            low = state.low
            done = [o for o in range(low, state.frontier) if o not in state._open]
            done += sorted(o for o in state._done_ahead if o >= low)
            deliveries = tuple(
                (o, d.key[0], d.deadline_ms, d.attempts) for o, d in state.deliveries.items()
            )
            out.append(OrderlySnapshot(q, low, tuple(done), deliveries))
        return tuple(out)

    def restore(self, snaps: tuple[OrderlySnapshot, ...]) -> None:
        """Take the order state of a snapshot (on an empty state)."""
        for snap in snaps:
            state = self.queues[snap.queue] = OrderlyQueue(snap.queue, snap.low)
            state._done_ahead = set(snap.done)
            for offset, ck_id, deadline_ms, attempts in snap.deliveries:
                key = (ck_id, offset)
                state.deliveries[offset] = Delivery(key, deadline_ms, attempts)
                self._by_key[key] = snap.queue

    # -- figures -------------------------------------------------------------------------------
    def attempts(self, key: Key) -> int | None:
        """How many times the offset of a latest delivery was handed out (None: not one)."""
        q = self._by_key.get(key)
        if q is None:
            return None
        return self.queues[q].deliveries[key[1]].attempts

    def blocked_groups(self) -> dict[str, int]:
        """Message groups blocked waiting for an ack, per consumer group (groups with none
        are left out)."""
        out: dict[str, int] = {}
        for (group, _, _), state in self.queues.items():
            n = state.blocked_groups()
            if n:
                out[group] = out.get(group, 0) + n
        return out
