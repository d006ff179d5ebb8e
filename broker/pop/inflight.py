"""The in-flight set of POP deliveries: a pure state machine (no clock, no I/O; time is an
input).

The broker feeds it the revive log's records in CommitLog order (docs/pop.md): a checkpoint
adds one entry per message handed out, an ack removes one, a change of invisible time moves an
entry's deadline, a revive (the message re-published to the retry topic or DLQ) removes it.
The master asks :meth:`PopState.due` for the entries whose deadline passed and checks an ack or
a change against the entry its handle names (:meth:`PopState.check`). A replica that applies the
same records holds the same set, so a new master redelivers exactly what was in flight.

The deliveries of FIFO consumer groups (orderly checkpoints) are entries too, marked
``orderly``; their order state (:class:`~broker.pop.orderly.OrderState`, :attr:`PopState.order`)
follows the same records. An orderly entry past its deadline is not re-published: the master
drops it from the set (:meth:`PopState.expire`) and the order state hands its offset out again.
"""

from __future__ import annotations

import enum
import heapq
from collections import Counter, OrderedDict
from dataclasses import dataclass

from broker.pop.orderly import OrderState
from protocol.pop import Ack, Change, Checkpoint, OrderlyCheckpoint, Reset, Revived, ReviveRecord
from protocol.pop_snapshot import PopSnapshot

__all__ = ["Entry", "PopRefused", "PopState", "Refusal"]

Key = tuple[int, int]
"""(checkpoint id, queue offset)."""

RECENT_ACKS = 65_536
"""How many acked keys the set remembers to answer a repeated ack as done."""

COMPACT_MIN = 1024
"""Stale items the deadline heap keeps whatever its size (:meth:`PopState._stale_one`)."""


@dataclass(slots=True)
class Entry:
    """One message handed out and neither acked nor revived yet."""

    checkpoint: int
    group: str
    topic: str
    queue_id: int
    queue_offset: int
    deadline_ms: int
    handed_out: bool = False
    """:meth:`PopState.due` handed it to the reviver (it is past its deadline)."""
    orderly: bool = False
    """A FIFO consumer group's delivery (see :attr:`PopState.order`)."""

    @property
    def key(self) -> Key:
        return (self.checkpoint, self.queue_offset)


class Refusal(enum.Enum):
    NOT_IN_FLIGHT = "not in flight"
    OTHER_GROUP = "another group's"
    EXPIRED = "expired"
    SUPERSEDED = "superseded"


class PopRefused(Exception):
    """An ack or change the in-flight set refuses; ``reason`` says why, the message for whom."""

    def __init__(self, reason: Refusal, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class PopState:
    """The in-flight POP deliveries of one broker group."""

    def __init__(self, compact_min: int = COMPACT_MIN) -> None:
        self._compact_min = compact_min
        self._entries: dict[Key, Entry] = {}
        self._recent_acks: OrderedDict[Key, None] = OrderedDict()
        """The last :data:`RECENT_ACKS` keys acked, so a repeated ack (a retry after a timeout)
        is recognised."""
        self._live: Counter[int] = Counter()
        """Entries in flight per checkpoint."""
        self._heap: list[tuple[int, int, int]] = []
        """(deadline, checkpoint id, queue offset): one *live* item per entry not handed out
        (its deadline is the entry's), and *stale* ones (acked, revived, moved since) that
        :meth:`due` passes over; :attr:`_stale` counts them, and the heap is rebuilt from the
        entries once they are more than half of it, so its size stays within twice the
        entries in flight (plus :data:`COMPACT_MIN`) whatever the invisible times."""
        self._stale = 0
        self._pop_offsets: dict[tuple[str, str, int], int] = {}
        self._per_group: Counter[str] = Counter()
        self._per_queue: Counter[tuple[str, str, int]] = Counter()
        self.order = OrderState()
        """Which message a FIFO consumer group may take next, per queue."""

    # -- records -------------------------------------------------------------------------------
    def apply(self, offset: int, record: ReviveRecord) -> None:
        """Replay one revive log record, read at CommitLog ``offset``, without the master's
        checks (a replica's and a restart's way); a handle key changes nothing here."""
        if isinstance(record, Checkpoint | OrderlyCheckpoint):
            self.checkpoint(offset, record)
        elif isinstance(record, Ack):
            for key in record.keys:
                self.ack(key)
        elif isinstance(record, Change):
            self.change((record.checkpoint, record.queue_offset), record.deadline_ms)
        elif isinstance(record, Revived):
            for key in record.keys:
                self.revived(key)
        elif isinstance(record, Reset):
            self.reset_pop_offset(record.group, record.topic, record.queue_id, record.offset)

    def checkpoint(self, ck_id: int, ck: Checkpoint | OrderlyCheckpoint) -> list[Entry]:
        """A POP handed out ``ck.popped``; ``ck_id`` is its record's CommitLog offset."""
        key = (ck.group, ck.topic, ck.queue_id)
        orderly = isinstance(ck, OrderlyCheckpoint)
        if isinstance(ck, OrderlyCheckpoint):
            for old in self.order.checkpoint(ck_id, ck):
                self._remove(old)  # a redelivery replaces the expired delivery
        else:
            end = ck.start + ck.count
            if end > self._pop_offsets.get(key, 0):
                self._pop_offsets[key] = end
        added = []
        deadline = ck.deadline_ms
        for offset in ck.popped:
            if (ck_id, offset) in self._entries:
                continue
            entry = Entry(ck_id, ck.group, ck.topic, ck.queue_id, offset, deadline, False, orderly)
            self._entries[entry.key] = entry
            heapq.heappush(self._heap, (deadline, ck_id, offset))
            added.append(entry)
        if added:
            self._live[ck_id] += len(added)
            self._per_group[ck.group] += len(added)
            self._per_queue[key] += len(added)
        return added

    def ack(self, key: Key) -> bool:
        """Remove an acked entry; False when it was not in flight."""
        self.order.done(key)
        entry = self._remove(key)
        if entry is None:
            return False
        recent = self._recent_acks
        recent[key] = None
        if len(recent) > RECENT_ACKS:
            recent.popitem(last=False)
        return True

    def revived(self, key: Key) -> bool:
        """Remove an entry whose message was re-published; False when it was not in flight."""
        self.order.done(key)
        return self._remove(key) is not None

    def expire(self, key: Key) -> bool:
        """Drop an orderly entry past its deadline (the order state hands its offset out again;
        nothing is written: a replay drops it the same way once the deadline passed)."""
        entry = self._entries.get(key)
        if entry is None or not entry.orderly:
            return False
        return self._remove(key) is not None

    def change(self, key: Key, deadline_ms: int) -> bool:
        """Move an entry's deadline; False when it is not in flight."""
        entry = self._entries.get(key)
        if entry is None:
            return False
        self.order.change(key, deadline_ms)
        stale = not entry.handed_out  # its item with the old deadline is still in the heap
        entry.deadline_ms = deadline_ms
        entry.handed_out = False
        heapq.heappush(self._heap, (deadline_ms, key[0], key[1]))
        if stale:  # counted once the entry and the heap agree (a compaction rebuilds from it)
            self._stale_one()
        return True

    def _remove(self, key: Key) -> Entry | None:
        entry = self._entries.pop(key, None)
        if entry is None:
            return None
        ck_id = key[0]
        self._per_group[entry.group] -= 1
        if self._per_group[entry.group] <= 0:
            del self._per_group[entry.group]
        queue = (entry.group, entry.topic, entry.queue_id)
        self._per_queue[queue] -= 1
        if self._per_queue[queue] <= 0:
            del self._per_queue[queue]
        self._live[ck_id] -= 1
        if self._live[ck_id] <= 0:
            del self._live[ck_id]
        if not entry.handed_out:
            self._stale_one()  # its heap item (a handed-out entry's was popped by due)
        return entry

    def _stale_one(self) -> None:
        """One more heap item no longer matches its entry; compact when they are most of it."""
        self._stale += 1
        self._compact()

    def _compact(self) -> None:
        """Rebuild the heap from the entries once stale items are more than half of it."""
        if self._stale > self._compact_min and 2 * self._stale > len(self._heap):
            self._heap = [
                (e.deadline_ms, e.checkpoint, e.queue_offset)
                for e in self._entries.values()
                if not e.handed_out
            ]
            heapq.heapify(self._heap)
            self._stale = 0

    # -- snapshots ---------------------------------------------------------------------------
    def snapshot(self, replay_from: int, key: bytes | None) -> PopSnapshot:
        """The set as a replay of the revive log up to ``replay_from`` (excluded) builds it
        (``key``: the handle key), with the last acks it remembers."""
        entries = tuple(
            (e.checkpoint, e.group, e.topic, e.queue_id, e.queue_offset, e.deadline_ms, e.orderly)
            for e in self._entries.values()
        )
        pops = tuple(self._pop_offsets.items())
        acks = tuple(self._recent_acks)
        return PopSnapshot(replay_from, key, pops, entries, self.order.snapshot(), acks)

    @classmethod
    def restore(cls, snap: PopSnapshot, compact_min: int = COMPACT_MIN) -> PopState:
        """The set a snapshot holds; the revive log's records from ``snap.replay_from`` on are
        applied to it next."""
        state = cls(compact_min)
        state._pop_offsets = dict(snap.pop_offsets)
        state._recent_acks = OrderedDict.fromkeys(snap.recent_acks)
        state.order.restore(snap.orderly)
        heap = state._heap
        for ck_id, group, topic, queue_id, offset, deadline, orderly in snap.entries:
            entry = Entry(ck_id, group, topic, queue_id, offset, deadline, False, orderly)
            state._entries[(ck_id, offset)] = entry
            heap.append((deadline, ck_id, offset))
            state._live[ck_id] += 1
            state._per_group[group] += 1
            state._per_queue[(group, topic, queue_id)] += 1
        heapq.heapify(heap)
        return state

    # -- checks (master) ---------------------------------------------------------------------
    def check(self, key: Key, group: str, deadline_ms: int, now_ms: int) -> Entry | None:
        """The entry a handle names, for an ack or a change by ``group`` at ``now_ms``; None
        when it was acked already (a repeated ack: nothing to do). Raises :class:`PopRefused`
        when it is another group's, past its deadline, superseded by a later handle of the
        same message, or not in flight (revived, or never handed out)."""
        entry = self._entries.get(key)
        if entry is None:
            if key in self._recent_acks:
                return None
            raise PopRefused(
                Refusal.NOT_IN_FLIGHT,
                f"message at queue offset {key[1]} of checkpoint {key[0]} is not in flight "
                "(its invisible time passed and it was delivered again, or it was acked)",
            )
        if entry.group != group:
            raise PopRefused(
                Refusal.OTHER_GROUP,
                f"receipt handle belongs to consumer group {entry.group}, not {group}",
            )
        if entry.deadline_ms != deadline_ms:
            raise PopRefused(
                Refusal.SUPERSEDED,
                "receipt handle was replaced by a change of invisible time: use the new one",
            )
        if now_ms >= entry.deadline_ms or entry.handed_out:
            raise PopRefused(
                Refusal.EXPIRED,
                f"receipt handle expired at {entry.deadline_ms} (now {now_ms}): the message "
                "will be delivered again",
            )
        return entry

    def due(self, now_ms: int, limit: int | None = None) -> list[Entry]:
        """Entries whose deadline is at or before ``now_ms``, earliest first, each handed out
        once (until a change moves its deadline); they stay in flight until :meth:`revived`."""
        out: list[Entry] = []
        heap = self._heap
        while heap and heap[0][0] <= now_ms and (limit is None or len(out) < limit):
            deadline, ck_id, offset = heapq.heappop(heap)
            entry = self._entries.get((ck_id, offset))
            if entry is None or entry.deadline_ms != deadline or entry.handed_out:
                self._stale -= 1
                continue  # acked, revived, or moved since
            entry.handed_out = True
            out.append(entry)
        if out:
            self._compact()  # the items popped may leave mostly stale ones
        return out

    def next_deadline(self) -> int | None:
        """The earliest deadline of an entry not handed out yet (None: nothing pending)."""
        heap = self._heap
        while heap:
            deadline, ck_id, offset = heap[0]
            entry = self._entries.get((ck_id, offset))
            if entry is not None and entry.deadline_ms == deadline and not entry.handed_out:
                return deadline
            heapq.heappop(heap)
            self._stale -= 1
        return None

    # -- figures -------------------------------------------------------------------------------
    def get(self, key: Key) -> Entry | None:
        return self._entries.get(key)

    def reset_pop_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """The group's next POP of the queue reads from ``offset`` (an operator's reset; the
        deliveries in flight stay: acked, or revived at their deadline)."""
        self._pop_offsets[(group, topic, queue_id)] = offset

    def pop_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        """Where the group's next POP of the queue starts, as far as checkpoints say."""
        return self._pop_offsets.get((group, topic, queue_id))

    def inflight(self, group: str | None = None) -> int:
        if group is None:
            return len(self._entries)
        return self._per_group.get(group, 0)

    def inflight_on(self, group: str, topic: str, queue_id: int) -> int:
        """Deliveries in flight that the group popped from one queue."""
        return self._per_queue.get((group, topic, queue_id), 0)

    def groups(self) -> dict[str, int]:
        return dict(self._per_group)

    def inflight_keys(self) -> set[Key]:
        return set(self._entries)

    def deadline_items(self) -> int:
        """Items of the deadline heap (live and stale): at most twice the entries in flight
        plus :data:`COMPACT_MIN` (a debug figure; tests check the bound)."""
        return len(self._heap)
