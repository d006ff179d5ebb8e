"""A two-level timing wheel over the timer log: what is due when, with a durable progress mark.

Time is an input: every call takes ``now_ms`` (epoch milliseconds, an int) and the wheel never
reads a clock. No asyncio, no sockets; the only I/O is the timer log and the progress file.

Levels
    * **Near** (memory): slots of ``slot_ms`` holding the entries of every bucket up to the one
      after the bucket ``now`` falls in. A bucket spans ``slot_ms * slots_per_bucket``.
    * **Far** (disk): for every later bucket the wheel keeps one int in memory, the timer log
      position of the bucket's newest record; each record points (``prev``) at the bucket's
      previous one. When a bucket comes within one bucket of ``now`` the wheel walks its chain
      once and moves its entries into near slots. Memory therefore grows with the number of
      non-empty far buckets (at most ``max_delay_ms / bucket span``), not with the number of
      far-future messages.

Order and progress
    Entries are delivered in the order of their key ``(due_ms, commitlog_offset)``. An entry's
    ``due_ms`` is its requested delivery time clamped up to the latest ``now`` the wheel has
    seen (a time in the past is due at once), and the broker schedules in CommitLog order, so
    every new entry sorts after every entry already handed out. The progress mark is therefore
    one key: every entry at or below it was delivered (or cancelled). The broker calls
    :meth:`TimingWheel.commit` with the last entry it has durably delivered and
    :meth:`TimingWheel.save_progress` to persist the mark. After a restart, entries above the
    saved mark are delivered again: exactly once after a clean :meth:`close`, at least once
    after a crash.

Replicas
    A replica builds the same wheel from the same CommitLog records and never delivers. For
    both to order entries identically the due time must not depend on when a wheel happened to
    see a record: the master asks :meth:`TimingWheel.due_time` when it appends a scheduled
    message, stamps the answer into the record, and every wheel (the master's, a replica's, a
    replay's) schedules the stamped time with the record's store time as ``now``. Each delivery
    record the master appends carries its entry's key; a replica passes it to
    :meth:`TimingWheel.commit_key`. After a promotion the replica's :meth:`TimingWheel.due`
    hands out exactly the entries the master had not delivered up to the replicated offset.

Replay
    Each entry remembers ``source_end``, the end of the CommitLog record it came from;
    :attr:`TimingWheel.indexed_through` is the highest. :meth:`schedule` and :meth:`cancel`
    ignore CommitLog records below it, so the broker may replay the CommitLog from there after
    any crash (the timer log's unflushed tail, or a tail cut by recovery, comes back that way).
"""

from __future__ import annotations

import heapq
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from storage.errors import StoreError
from storage.small_file import read_atomic, write_atomic
from storage.timer.log import (
    DEFAULT_SEGMENT_RECORDS,
    NO_PREV,
    LogRecovery,
    TimerKind,
    TimerLog,
    TimerRecord,
)

DAY_MS: Final = 86_400_000
DEFAULT_MAX_DELAY_MS: Final = 40 * DAY_MS
DEFAULT_SLOT_MS: Final = 1000
DEFAULT_SLOTS_PER_BUCKET: Final = 60
PROGRESS_FILE: Final = "progress"
LOG_DIR: Final = "log"
_BEFORE_ALL: Final = (-1, -1)


def _entry_key(entry: TimerEntry) -> tuple[int, int]:
    return entry.due_ms, entry.commitlog_offset


class InvalidDeliveryTimeError(StoreError):
    """A negative delay or delivery time, or one beyond the wheel's maximum delay."""


@dataclass(frozen=True, slots=True, order=True)
class TimerEntry:
    """One scheduled message. Sorts by delivery order."""

    due_ms: int
    commitlog_offset: int
    size: int

    @property
    def key(self) -> tuple[int, int]:
        return self.due_ms, self.commitlog_offset


@dataclass(frozen=True, slots=True)
class WheelConfig:
    slot_ms: int = DEFAULT_SLOT_MS
    slots_per_bucket: int = DEFAULT_SLOTS_PER_BUCKET
    max_delay_ms: int = DEFAULT_MAX_DELAY_MS
    segment_records: int = DEFAULT_SEGMENT_RECORDS
    roll_segments: int = 8
    """When the timer log holds more segments than this and the oldest still has records above
    the saved mark, :meth:`TimingWheel.compact` copies those to the end and deletes it."""

    def __post_init__(self) -> None:
        if (
            self.slot_ms <= 0
            or self.slots_per_bucket <= 0
            or self.max_delay_ms < 0
            or self.roll_segments < 1
        ):
            raise ValueError(f"invalid timer wheel settings: {self}")

    @property
    def bucket_ms(self) -> int:
        return self.slot_ms * self.slots_per_bucket


def deliver_at_from_delay(delay_ms: int, now_ms: int) -> int:
    """The absolute delivery time of a message sent at ``now_ms`` with ``delay_ms``."""
    if delay_ms < 0:
        raise InvalidDeliveryTimeError(f"delay {delay_ms} ms is negative")
    return now_ms + delay_ms


def load_progress(path: Path) -> tuple[int, int]:
    raw = read_atomic(path)
    if raw is None:
        return _BEFORE_ALL
    try:
        doc = json.loads(raw)
        return int(doc["delivered_due_ms"]), int(doc["delivered_offset"])
    except (ValueError, KeyError, TypeError) as exc:
        raise StoreError(f"timer progress {path} is not valid: {exc}") from None


def save_progress(path: Path, key: tuple[int, int]) -> None:
    doc = {"delivered_due_ms": key[0], "delivered_offset": key[1]}
    write_atomic(path, json.dumps(doc, sort_keys=True).encode())


class TimingWheel:
    """Scheduled messages of one broker, by delivery time. One owner calls every method."""

    __slots__ = (
        "_far",
        "_far_cancels",
        "_heads",
        "_heads_from",
        "_loaded_through",
        "_near",
        "_near_index",
        "_near_slots",
        "_now",
        "_pending",
        "_saved",
        "_seg_max",
        "_seg_min",
        "config",
        "delivered",
        "directory",
        "indexed_through",
        "log",
        "recovery",
    )

    def __init__(self, directory: Path, now_ms: int, config: WheelConfig | None = None) -> None:
        """Open (or create) the wheel in ``directory``: ``log/`` and ``progress``.

        Recovery scans the timer log once, cuts a damaged tail (see :attr:`recovery`) and
        rebuilds the bucket heads; entries above the progress mark are pending again.
        """
        self.config = config or WheelConfig()
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.delivered = load_progress(directory / PROGRESS_FILE)
        """Key of the last entry the broker delivered (``commit``)."""
        self._saved = self.delivered
        self._now = max(now_ms, self.delivered[0])
        self._near: dict[int, list[TimerEntry]] = {}
        self._near_slots: list[int] = []  # heap of the keys of _near
        self._near_index: dict[int, int] = {}  # commitlog offset -> near slot
        self._heads: dict[int, int] = {}  # bucket -> timer log position of its newest record
        self._far: list[int] = []  # heap of buckets whose chain is not loaded yet
        self._far_cancels: set[int] = set()  # offsets cancelled in unloaded buckets (this run)
        self._seg_max: dict[int, tuple[int, int]] = {}  # segment start -> max key in it
        self._seg_min: dict[int, int] = {}  # segment start -> min CommitLog offset scheduled in it
        self.indexed_through = 0
        self._pending = 0
        self.log = TimerLog(directory / LOG_DIR, segment_records=self.config.segment_records)
        self.recovery: LogRecovery = self.log.open()
        self._rebuild()
        self._loaded_through = self._bucket(self._now) - 1
        self._heads_from = self._bucket(self.delivered[0])
        self._advance(self._now)

    # -- geometry ---------------------------------------------------------------------------

    def _bucket(self, due_ms: int) -> int:
        return due_ms // self.config.bucket_ms

    def _slot(self, due_ms: int) -> int:
        return due_ms // self.config.slot_ms

    def _segment_start(self, pos: int) -> int:
        return pos - pos % self.log.segment_bytes

    # -- recovery ---------------------------------------------------------------------------

    def _rebuild(self) -> None:
        first_live_bucket = self._bucket(self.delivered[0])
        for pos, rec in self.log.scan():
            self.indexed_through = max(self.indexed_through, rec.source_end)
            self._note_segment(pos, (rec.due_ms, rec.offset), rec.kind)
            if (rec.due_ms, rec.offset) > self.delivered:
                if rec.kind is TimerKind.SCHEDULE:
                    self._pending += 1
                else:
                    self._pending -= 1
                    self._far_cancels.add(rec.offset)  # dropped when its bucket loads
            bucket = self._bucket(rec.due_ms)
            if bucket < first_live_bucket:
                continue  # every entry of it is at or below the progress mark
            if bucket not in self._heads:
                heapq.heappush(self._far, bucket)
            self._heads[bucket] = pos

    def _note_segment(self, pos: int, key: tuple[int, int], kind: TimerKind) -> None:
        start = self._segment_start(pos)
        if key > self._seg_max.get(start, _BEFORE_ALL):
            self._seg_max[start] = key
        if kind is TimerKind.SCHEDULE and key[1] < self._seg_min.get(start, key[1] + 1):
            self._seg_min[start] = key[1]

    # -- input --------------------------------------------------------------------------------

    def schedule(
        self, deliver_at_ms: int, commitlog_offset: int, size: int, now_ms: int
    ) -> TimerEntry | None:
        """Index the message stored at ``commitlog_offset`` (``size`` bytes) for delivery at
        ``deliver_at_ms``. A time at or before ``now_ms`` is due at once. Returns the entry, or
        None when that CommitLog record is below :attr:`indexed_through` (a replay).

        Raises :class:`InvalidDeliveryTimeError` for a negative time or one more than
        ``max_delay_ms`` after ``now_ms``; nothing is written then.
        """
        if deliver_at_ms < 0:
            raise InvalidDeliveryTimeError(f"delivery time {deliver_at_ms} is negative")
        if deliver_at_ms - now_ms > self.config.max_delay_ms:
            raise InvalidDeliveryTimeError(
                f"delivery time {deliver_at_ms} is more than {self.config.max_delay_ms} ms "
                f"after {now_ms}"
            )
        if commitlog_offset < 0 or size <= 0:
            raise StoreError(f"bad CommitLog record {commitlog_offset} ({size} bytes) to schedule")
        if commitlog_offset < self.indexed_through:
            return None
        self._now = max(self._now, now_ms)
        entry = TimerEntry(max(deliver_at_ms, self._now), commitlog_offset, size)
        return self._add(entry)

    def schedule_late(self, due_ms: int, commitlog_offset: int, size: int) -> TimerEntry | None:
        """Index the message at ``commitlog_offset`` due at ``due_ms`` although its CommitLog
        record lies below :attr:`indexed_through`: a replay passed over it (the record failed
        its checks) and it was repaired since. The caller knows that no delivery or recall of
        it followed. None when ``(due_ms, commitlog_offset)`` is at or below the progress mark
        (the caller gives a due time after :attr:`now` for an entry that must still go out: every
        entry handed out is due at or before it)."""
        if commitlog_offset < 0 or size <= 0:
            raise StoreError(f"bad CommitLog record {commitlog_offset} ({size} bytes) to schedule")
        entry = TimerEntry(due_ms, commitlog_offset, size)
        if entry.key <= self.delivered or commitlog_offset in self._near_index:
            return None
        return self._add(entry)

    def _add(self, entry: TimerEntry) -> TimerEntry:
        offset = entry.commitlog_offset
        self._append(TimerKind.SCHEDULE, entry.due_ms, offset, entry.size, offset + entry.size)
        self._pending += 1
        if self._bucket(entry.due_ms) <= self._loaded_through:
            self._near_add(entry)
        return entry

    def cancel(
        self,
        deliver_at_ms: int,
        commitlog_offset: int,
        now_ms: int,
        *,
        source_end: int,
        late: bool = False,
    ) -> bool:
        """Recall the message at ``commitlog_offset`` scheduled for ``deliver_at_ms``; the
        recall itself is the CommitLog record ending at ``source_end``.

        True when the cancel is recorded: the entry was pending in a near slot (it is gone), or
        it lies in a far bucket (it is dropped when the bucket loads). False when there is
        nothing to cancel (already delivered, never scheduled, or a replayed recall).
        ``late``: the recall record lies below :attr:`indexed_through` but was never applied (a
        replay passed over it, and it was repaired since: see :meth:`schedule_late`).
        """
        if source_end <= self.indexed_through and not late:
            return False
        self._now = max(self._now, now_ms)
        slot = self._near_index.get(commitlog_offset)
        if slot is not None:
            entries = self._near[slot]
            found = next(e for e in entries if e.commitlog_offset == commitlog_offset)
            entries.remove(found)
            del self._near_index[commitlog_offset]
            self._append(TimerKind.CANCEL, found.due_ms, commitlog_offset, 0, source_end)
            self._pending -= 1
            return True
        bucket = self._bucket(deliver_at_ms)
        if (
            bucket <= self._loaded_through
            or bucket not in self._heads
            or commitlog_offset in self._far_cancels
        ):
            return False
        self._append(TimerKind.CANCEL, deliver_at_ms, commitlog_offset, 0, source_end)
        self._far_cancels.add(commitlog_offset)
        self._pending -= 1
        return True

    def pending(self, due_ms: int, commitlog_offset: int) -> bool:
        """Whether the entry ``(due_ms, commitlog_offset)`` may still be handed out: it waits in
        a near slot, or its far bucket is not loaded yet (the chain is not read to check; the
        broker checks the CommitLog record). False once it was handed out, committed or
        cancelled in the near window."""
        if (due_ms, commitlog_offset) <= self.delivered:
            return False
        if commitlog_offset in self._near_index:
            return True
        if commitlog_offset in self._far_cancels:
            return False
        bucket = self._bucket(due_ms)
        return bucket > self._loaded_through and bucket in self._heads

    def _append(
        self, kind: TimerKind, due_ms: int, offset: int, size: int, source_end: int
    ) -> None:
        bucket = self._bucket(due_ms)
        prev = self._heads.get(bucket, NO_PREV)
        pos = self.log.append(TimerRecord(kind, due_ms, offset, size, source_end, prev))
        if prev == NO_PREV and bucket > self._loaded_through:
            heapq.heappush(self._far, bucket)
        self._heads[bucket] = pos
        self.indexed_through = max(self.indexed_through, source_end)
        self._note_segment(pos, (due_ms, offset), kind)

    def _near_add(self, entry: TimerEntry) -> None:
        slot = self._slot(entry.due_ms)
        entries = self._near.get(slot)
        if entries is None:
            entries = self._near[slot] = []
            heapq.heappush(self._near_slots, slot)
        entries.append(entry)
        self._near_index[entry.commitlog_offset] = slot

    # -- output -------------------------------------------------------------------------------

    def _advance(self, now_ms: int) -> None:
        """Load every far bucket up to the one after ``now_ms``'s."""
        target = self._bucket(now_ms) + 1
        while self._far and self._far[0] <= target:
            self._load(heapq.heappop(self._far))
        if target > self._loaded_through:
            self._loaded_through = target

    def _load(self, bucket: int) -> None:
        """Move the pending entries of ``bucket``'s chain into near slots.

        The chain may hold a record twice (a roll copied it and a crash kept the original) and
        a cancel may sit before a copy of its target, so the whole chain is read first.
        """
        pos = self._heads.get(bucket, NO_PREV)
        floor = self.log.start
        schedules: dict[int, TimerRecord] = {}
        cancelled: set[int] = set()
        while pos != NO_PREV and pos >= floor:
            rec = self.log.read(pos)
            if rec.kind is TimerKind.CANCEL:
                cancelled.add(rec.offset)
            else:
                schedules[rec.offset] = rec
            pos = rec.prev
        self._far_cancels.difference_update(cancelled)
        for offset, rec in schedules.items():
            if offset in cancelled:
                continue
            if (rec.due_ms, offset) > self.delivered:
                self._near_add(TimerEntry(rec.due_ms, offset, rec.size))
            else:
                self._pending -= 1  # a replica's, delivered before its bucket loaded

    def due(self, now_ms: int, limit: int | None = None) -> list[TimerEntry]:
        """Entries due at ``now_ms`` (at most ``limit``), in delivery order, handed out once.

        The broker delivers them in this order and calls :meth:`commit` for each delivered
        one; an entry handed out but never committed is delivered again after a restart.
        """
        self._now = now_ms = max(self._now, now_ms)
        self._advance(now_ms)
        now_slot = self._slot(now_ms)
        out: list[TimerEntry] = []
        while self._near_slots and self._near_slots[0] <= now_slot:
            if limit is not None and len(out) >= limit:
                break
            slot = self._near_slots[0]
            entries = sorted(self._near[slot], key=_entry_key)
            if entries and entries[0].key <= self.delivered:  # a replica's, delivered already
                done = [e for e in entries if e.key <= self.delivered]
                for e in done:
                    del self._near_index[e.commitlog_offset]
                self._pending -= len(done)
                entries = entries[len(done) :]
            ready = [e for e in entries if e.due_ms <= now_ms]
            if limit is not None:
                ready = ready[: limit - len(out)]
            out.extend(ready)
            self._pending -= len(ready)
            for e in ready:
                del self._near_index[e.commitlog_offset]
            rest = entries[len(ready) :]
            if rest:
                self._near[slot] = rest
                break
            heapq.heappop(self._near_slots)
            del self._near[slot]
        return out

    def next_due_ms(self) -> int | None:
        """When to call :meth:`due` next: the earliest due time in the near slots, else the
        time the first far bucket loads (one bucket ahead of its start); None when nothing is
        pending. Entries scheduled later may be due earlier: :meth:`schedule` returns them."""
        while self._near_slots and not self._near[self._near_slots[0]]:
            del self._near[heapq.heappop(self._near_slots)]
        if self._near_slots:
            return min(e.due_ms for e in self._near[self._near_slots[0]])
        if self._far:
            return (self._far[0] - 1) * self.config.bucket_ms
        return None

    def commit(self, entry: TimerEntry) -> None:
        """``entry`` (and every entry handed out before it) has been durably delivered."""
        self.commit_key(entry.due_ms, entry.commitlog_offset)

    def commit_key(self, due_ms: int, commitlog_offset: int) -> None:
        """Every entry whose key is at or below ``(due_ms, commitlog_offset)`` is delivered.

        The master calls it (through :meth:`commit`) for what it delivered; a replica calls it
        for each delivery record it replays from the CommitLog (the record carries the key), so
        its wheel drops those entries without ever handing them out. A replica never calls
        :meth:`due`; after a promotion the new master calls it and gets exactly what is left.
        """
        key = (due_ms, commitlog_offset)
        if key <= self.delivered:
            return
        self.delivered = key
        self._now = max(self._now, due_ms)
        self._advance(self._now)
        # On the master due() already took these out. On a replica every slot before the
        # mark's holds only delivered entries: drop them whole (each entry once). Delivered
        # entries of the mark's own slot stay until due() filters them: scanning that slot at
        # every commit would cost its size each time.
        last_slot = self._slot(due_ms)
        while self._near_slots and self._near_slots[0] < last_slot:
            dropped = self._near.pop(heapq.heappop(self._near_slots))
            for e in dropped:
                del self._near_index[e.commitlog_offset]
            self._pending -= len(dropped)

    def due_time(self, deliver_at_ms: int, now_ms: int) -> int:
        """The due time :meth:`schedule` gives a message asked for ``deliver_at_ms`` at
        ``now_ms``. The master stamps it into the message it appends, and every replica (and
        a replay) schedules the stamped time, so all of them order entries identically."""
        return max(deliver_at_ms, now_ms, self._now)

    # -- durability -----------------------------------------------------------------------------

    def save_progress(self, through: tuple[int, int] | None = None) -> None:
        """Persist the progress mark (after the delivered messages are durable) and drop the
        timer log segments it has left wholly behind.

        ``through``: save this key rather than :attr:`delivered` (the broker saves the mark it
        had when the CommitLog was last known durable/replicated up to its deliveries); it is
        clamped to :attr:`delivered` and never moves the saved mark back."""
        mark = self.delivered if through is None else min(through, self.delivered)
        if mark > self._saved:
            # Every timer record at or below the mark is durable before the mark is: a replay
            # then never brings back an entry the saved mark says was delivered.
            self.log.flush()
            save_progress(self.directory / PROGRESS_FILE, mark)
            self._saved = mark
            self._forget_heads()
        self.compact()

    def _forget_heads(self) -> None:
        """Forget the heads of buckets below the saved mark's: no record above the mark, the
        only kind :meth:`compact` copies, can be due in them."""
        below = self._bucket(self._saved[0])
        if below <= self._heads_from:
            return
        if below - self._heads_from < len(self._heads):
            passed = [b for b in range(self._heads_from, below) if b in self._heads]
        else:
            passed = [b for b in self._heads if b < below]
        for bucket in passed:
            del self._heads[bucket]
        self._heads_from = below

    def compact(self) -> int:
        """Delete the timer log segments the saved mark has left behind; how many.

        A segment every record of which is at or below the mark goes. While the log holds more
        than ``roll_segments`` segments and the oldest is at most half live, its records above
        the mark (entries due weeks ahead, and cancels of them) are copied to the end, made
        durable, and the segment goes too: disk use follows the pending entries, not the time
        the oldest one waits.
        """
        cut = self.log.start
        for seg in self.log.segments[:-1]:
            if self._seg_max.get(seg.start, _BEFORE_ALL) > self._saved:
                break
            cut = seg.end
        if cut == self.log.start and len(self.log.segments) > self.config.roll_segments:
            cut = self._roll_oldest()
        deleted = self.log.delete_segments_below(cut)
        for start in [s for s in self._seg_max if s < cut]:
            del self._seg_max[start]
            self._seg_min.pop(start, None)
        return deleted

    def _roll_oldest(self) -> int:
        """Copy the oldest segment's records above the saved mark to the end of the log; the
        position below which the log may now be deleted. Only a segment at most half live is
        copied (and one per call), so a roll always shrinks the log and its cost is bounded."""
        oldest = self.log.segments[0]
        keep: list[TimerRecord] = []
        for pos, rec in self.log.scan(oldest.start):
            if pos >= oldest.end:
                break
            if (rec.due_ms, rec.offset) > self._saved:
                keep.append(rec)
        if len(keep) > self.config.segment_records // 2:
            return self.log.start
        for rec in keep:
            self._append(rec.kind, rec.due_ms, rec.offset, rec.size, rec.source_end)
        self.log.flush()  # the copies are durable before the originals go
        return oldest.end

    def flush(self) -> None:
        """Make the timer log durable (what is lost without it is replayed from the CommitLog)."""
        self.log.flush()

    def close(self) -> None:
        """A clean stop: the log and the progress mark durable; nothing delivered twice."""
        self.log.flush()
        self.save_progress()
        self.log.close()

    # -- introspection ----------------------------------------------------------------------------

    def oldest_offset(self) -> int | None:
        """A lower bound of the CommitLog offsets of the entries still pending: the smallest
        offset scheduled in a timer log segment holding anything above the saved progress mark
        (None: nothing is). The CommitLog must keep everything from there on (retention)."""
        saved = self._saved
        floor: int | None = None
        for start, top in self._seg_max.items():
            if top > saved:
                low = self._seg_min.get(start)
                if low is not None and (floor is None or low < floor):
                    floor = low
        return floor

    @property
    def now(self) -> int:
        """The latest time the wheel was given (records' store times, delivery rounds)."""
        return self._now

    @property
    def saved(self) -> tuple[int, int]:
        """The progress mark last saved (:meth:`save_progress`)."""
        return self._saved

    @property
    def pending_count(self) -> int:
        """Entries scheduled and not yet handed out, committed or cancelled. Exact while the
        wheel runs; after a crash a record a roll had copied may count twice, and on a replica
        delivered entries of the progress mark's own slot count until a later delivery."""
        return max(self._pending, 0)

    @property
    def near_count(self) -> int:
        return len(self._near_index)

    @property
    def far_buckets(self) -> int:
        return len(self._far)
