"""What the store knows of its damage, and what a read answers at an entry it cannot serve.

A read (``storage.queue_read.scan``) that stops at an entry it cannot serve hands the entry to
:meth:`Corruption.unreadable`, which tells the cases apart:

- an operator skipped the message (``rmqctl skipCorruptMessage``, :meth:`Corruption.skip`): the
  read passes over it (FOUND with no record, ``next_offset`` past it, as a tag filter passes
  over a message), once per read; its CommitLog record is given up (:meth:`Corruption.given_up`):
  no longer damage to repair, report or count for elections;
- the record fails its CRC: CORRUPT (reported once per CommitLog offset);
- retention deleted the records under the entry: the queue starts later (OFFSET_TOO_SMALL at
  its new min offset);
- the entry points into a range recovery kept as damaged: CORRUPT, naming the damage;
- the record's own header is damaged (its size, magic or offset field does not hold) while the
  broker can fetch records from a replica (:attr:`Corruption.repairable`): CORRUPT, so that
  the broker repairs it, unless a repair of that offset was refused (:meth:`repair_refused`);
- otherwise the entry itself is wrong: the queue is rebuilt from the CommitLog (once per queue
  while the store is open) and the caller reads again; a second time it is CORRUPT.

Every CORRUPT answer carries the record's CommitLog offset and its size as the entry says: what
the broker asks a replica for (``StoreRepair.repair``).

The counters (:data:`CORRUPTION_KINDS`) are the broker's metric.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Final

import structlog

from protocol.message import MIN_RECORD_SIZE, RecordError, check_record
from storage.commitlog import CommitLog
from storage.consumequeue import ConsumeQueue
from storage.dispatch import Replayer, Scan
from storage.queue_read import GetResult, GetStatus, Problem
from storage.queues import ConsumeQueues
from storage.recovery import Damage, walk
from storage.segment import Segment
from storage.small_file import read_atomic, write_atomic
from storage.tracker import FileTracker

SKIPPED_FILE: Final = "skipped"
"""Under the data directory: the messages reads pass over (``rmqctl skipCorruptMessage``), one a
line, ``topic queue_id queue_offset commitlog_offset size`` (lines of an older version lack the
last two: their record is found through the queue's entry, :meth:`Corruption.resolve_skipped`)."""

CORRUPTION_KINDS: Final = (
    "read",
    "recovery_quarantined",
    "recovery_cut",
    "segment_short",
    "consumequeue_rebuilt",
    "scrub",
    "skipped",
)
"""read: a record a read found failing its CRC (once per offset); recovery_quarantined: a
damaged CommitLog range kept in place; recovery_cut: bytes recovery cut from the end of the log
(copied aside); segment_short: CommitLog bytes missing before a segment's start (zero-filled);
consumequeue_rebuilt: a ConsumeQueue rebuilt because an entry did not point at its record,
or its segment files were gone; scrub:
a CommitLog record the background scrub found failing its checks (once per offset); skipped: a
message an operator gave up (rmqctl skipCorruptMessage), reads pass over it; at start it is the
number of messages the skipped file lists (the skips this store holds, not only this run's)."""

WALK_LIMIT: Final = 4 << 20
"""How far :meth:`Corruption.inside_a_record` walks records to tell whether an offset is inside
one (the CommitLog between two entries of one queue: other queues' records)."""

log = structlog.get_logger(__name__)


class Corruption:
    def __init__(self, commitlog: CommitLog, queues: ConsumeQueues) -> None:
        self._commitlog = commitlog
        self._queues = queues
        self.counts: dict[str, int] = dict.fromkeys(CORRUPTION_KINDS, 0)
        """Corruption found, by kind (see :data:`CORRUPTION_KINDS`)."""
        self.damaged: list[Damage] = []
        """CommitLog ranges recovery found unreadable and kept in place (reads fail there)."""
        self.reported: set[int] = set()
        """CommitLog offsets whose unreadable record a read met and logged (once each)."""
        self.scrub_reported: set[int] = set()
        """CommitLog offsets whose damage the scrub found and logged (once each). Apart from
        :attr:`reported`: a read that meets damage the scrub found first still counts as a
        read (``kind="read"`` read 0 while consumers were stopped at such a record)."""
        self.rebuilt: set[tuple[str, int]] = set()
        """Queues rebuilt while the store is open (a wrong entry rebuilds its queue once)."""
        self.repairable = False
        """The broker can fetch damaged records from a replica: a record whose header does not
        hold is answered CORRUPT (to be repaired) before its queue is taken for wrong."""
        self.sizes: dict[int, int] = {}
        """The size of each record a read found unreadable, by CommitLog offset, as its
        ConsumeQueue entry says (what a repair fetches)."""
        self.skipped: dict[tuple[str, int, int], tuple[int, int] | None] = {}
        """(topic, queue id, queue offset) of the messages reads pass over (:meth:`skip`), with
        the CommitLog offset and size of their record (None until known: a line of an older
        version); kept in :attr:`skipped_file`."""
        self.given_up_records: dict[int, int] = {}
        """The records of the skipped messages, size by CommitLog offset (:meth:`given_up`)."""
        self.skipped_file: Path | None = None
        self.refused: set[int] = set()
        """CommitLog offsets whose repair no replica could make (their queue is rebuilt, as
        without replicas, when the header does not hold)."""

    def unreadable(self, queue: ConsumeQueue, offset: int, problem: Problem) -> GetResult | None:
        """The answer for the entry at queue ``offset`` that a read could not serve; None when
        the queue was rebuilt from the CommitLog and is to be read again."""
        physical, size, _tags = queue.entry(offset)
        if (*queue.key, offset) in self.skipped:
            lo, hi = queue.min_offset, queue.max_offset
            return GetResult(GetStatus.FOUND, offset + 1, lo, hi, b"", 0)
        if problem is Problem.CRC:
            return self.corrupt(queue, offset, physical, "CRC mismatch", size)
        cl_min = self._commitlog.min_offset
        if size > 0 and physical < cl_min:
            # Retention deleted the records under this entry: the queue starts later.
            queue.delete_below(cl_min)
            new_lo = queue.min_offset
            return GetResult(GetStatus.OFFSET_TOO_SMALL, new_lo, new_lo, queue.max_offset, b"", 0)
        damage = self.damage_at(physical)
        if damage is not None:
            why = f"in {damage.size} damaged bytes from offset {damage.offset}: {damage.reason}"
            return self.corrupt(queue, offset, physical, why, size)
        if (
            self.repairable
            and physical not in self.refused
            and not self.inside_a_record(queue, offset, physical)
        ):
            header = self.header_problem(physical, size)
            if header is not None:
                return self.corrupt(queue, offset, physical, header, size)
        if queue.key not in self.rebuilt:
            # The entry (not the CommitLog) is wrong: rebuild the queue from the CommitLog
            # (once per queue while the store is open) and read again.
            self.rebuild_queue(queue, offset, "pointed at no record of this queue")
            self._forget_if_moved(queue, offset, physical)
            return None
        return self.corrupt(queue, offset, physical, "no record of this queue at the offset")

    def damage_at(self, physical: int) -> Damage | None:
        for damage in self.damaged:
            if damage.offset <= physical < damage.offset + damage.size:
                return damage
        return None

    def inside_a_record(self, queue: ConsumeQueue, offset: int, physical: int) -> bool:
        """Whether CommitLog ``physical`` lies inside a record, so that the entry at queue
        ``offset`` naming it is wrong, not the CommitLog: walking intact records from the one
        the previous entry names steps over it. False when that cannot be told (no previous
        entry, another segment, a record on the way fails its checks, more than
        :data:`WALK_LIMIT` bytes)."""
        if offset <= queue.min_offset:
            return False
        start = queue.entry(offset - 1)[0]
        commitlog = self._commitlog
        seg = commitlog.segment_at(start)
        if seg is None or not start < physical < seg.end or physical - start > WALK_LIMIT:
            return False
        limit = min(seg.end, commitlog.write_pos) - seg.start
        pos = start - seg.start
        target = physical - seg.start
        while pos < target:
            try:
                pos += check_record(seg.view, pos, limit)
            except RecordError:
                return False
        return pos != target

    def _forget_if_moved(self, queue: ConsumeQueue, offset: int, physical: int) -> None:
        """After a rebuild of ``queue``: when its entry at ``offset`` names another record than
        ``physical``, what a read took for damage at ``physical`` was the entry's fault (and
        the repairs no replica could make there were of no record): forgotten, unless recovery
        found damage there."""
        if not queue.min_offset <= offset < queue.max_offset:
            return
        if queue.entry(offset)[0] == physical or self.damage_at(physical) is not None:
            return
        self.sizes.pop(physical, None)
        self.refused.discard(physical)
        self.reported.discard(physical)

    def header_problem(self, physical: int, size: int) -> str | None:
        """Why the bytes at CommitLog ``physical`` are not an intact record within ``size``
        bytes (a damaged header); None when they are one (of any size: then the entry is what
        is wrong), or the range is not in the log."""
        if size < MIN_RECORD_SIZE:
            # No record is this small: the entry's size is wrong (a zeroed entry), not the
            # CommitLog, and there would be nothing to fetch from a replica.
            return None
        commitlog = self._commitlog
        seg = commitlog.segment_at(physical)
        end = physical + size
        limit = min(seg.end, commitlog.write_pos) if seg is not None else 0
        if seg is None or physical < commitlog.min_offset or end > limit:
            return None
        rel = physical - seg.start
        try:
            check_record(seg.view, rel, limit - seg.start)
        except RecordError:
            pass
        else:
            return None  # an intact record of another size: the entry is what is wrong
        try:
            check_record(seg.view, rel, rel + size)
        except RecordError as exc:
            return f"record header damaged ({str(exc).rsplit(' at ', 1)[0]})"
        return None

    def scrubbed(self, offset: int, size: int) -> None:
        """The scrub found the ``size`` bytes at ``offset`` damaged: counted and logged once per
        offset, and known by their size for a repair."""
        self.sizes[offset] = size
        if offset in self.scrub_reported:
            return
        self.scrub_reported.add(offset)
        self.counts["scrub"] += 1
        log.error(
            f"commitlog damaged: {size} bytes at offset {offset} fail their checks (found by the "
            "scrub)",
            offset=offset,
            size=size,
        )

    def load_skipped(self, path: Path) -> None:
        """Read the skipped messages kept in ``path`` (none when it does not exist); counted
        (``skipped``) as held."""
        self.skipped_file = path
        raw = read_atomic(path)
        if raw is None:
            return
        for line in raw.decode().splitlines():
            fields = line.rsplit(" ", 4)
            if len(fields) == 5 and all(f.isdigit() for f in fields[1:]):
                topic, queue_id, offset, physical, size = fields
                self.skipped[(topic, int(queue_id), int(offset))] = (int(physical), int(size))
                self.given_up_records[int(physical)] = int(size)
                continue
            topic, _, rest = line.rpartition(" ")
            topic, _, queue_id = topic.rpartition(" ")
            if topic and queue_id.isdigit() and rest.isdigit():
                self.skipped.setdefault((topic, int(queue_id), int(rest)), None)
        self.counts["skipped"] = len(self.skipped)

    def resolve_skipped(self) -> None:
        """Find the record of each skipped message whose line did not name it (an older
        version's) through its queue's entry, once the queues are recovered."""
        for key, record in self.skipped.items():
            if record is not None:
                continue
            topic, queue_id, offset = key
            queue = self._queues.get(topic, queue_id)
            if queue is not None and queue.min_offset <= offset < queue.max_offset:
                physical, size, _tags = queue.entry(offset)
                if size > 0:
                    self.skipped[key] = (physical, size)
                    self.given_up_records[physical] = size

    def given_up(self, offset: int, size: int) -> bool:
        """Do the ``size`` CommitLog bytes at ``offset`` lie within the record of a skipped
        message? Damage there is given up: no repair is tried, the scrub and recovery pass over
        it without counting it, elections do not hear of it. Damage reaching past such a record
        is not (other records may lie there)."""
        for start, length in self.given_up_records.items():
            if start <= offset and offset + size <= start + length:
                return True
        return False

    def skip(self, topic: str, queue_id: int, queue_offset: int, physical: int, size: int) -> None:
        """Reads of ``topic``:``queue_id`` pass over the message at ``queue_offset`` from now on
        and its record (``size`` bytes at CommitLog ``physical``) is given up (kept durably
        first); counted (``skipped``) and logged."""
        key = (topic, queue_id, queue_offset)
        if key in self.skipped:
            return
        held = {**self.skipped, key: (physical, size)}
        lines = sorted(
            f"{t} {q} {o}" if rec is None else f"{t} {q} {o} {rec[0]} {rec[1]}"
            for (t, q, o), rec in held.items()
        )
        if self.skipped_file is not None:
            write_atomic(self.skipped_file, "\n".join(lines).encode())
        self.skipped[key] = (physical, size)
        self.given_up_records[physical] = size
        self.counts["skipped"] += 1
        log.error(
            f"{topic}:{queue_id} queue offset {queue_offset} (commitlog offset {physical}) "
            "skipped by an operator: reads pass over it",
            topic=topic,
            queue_id=queue_id,
            queue_offset=queue_offset,
            offset=physical,
        )

    def size_of(self, offset: int) -> int | None:
        """The size of the damage known to start at CommitLog ``offset``: a record a read or the
        scrub found unreadable (its size as its entry says), or a range recovery kept in place;
        None when none is known there, or it is given up (:meth:`given_up`: not to repair)."""
        size = self.sizes.get(offset)
        if size is not None and self.given_up(offset, size):
            return None
        if size is not None:
            return size
        for damage in self.damaged:
            if damage.offset == offset and not self.given_up(offset, damage.size):
                return damage.size
        return None

    def repair_refused(self, physical: int) -> None:
        """No replica could repair the record at ``physical``: reads take its entry for wrong
        (rebuilding the queue once) when its header does not hold, as without replicas."""
        self.refused.add(physical)

    def repaired(self, offset: int, size: int) -> None:
        """``size`` bytes from ``offset`` were written back intact: they are no longer damage,
        and a failure there is reported again."""
        end = offset + size
        kept: list[Damage] = []
        for d in self.damaged:
            d_end = d.offset + d.size
            if d_end <= offset or d.offset >= end:
                kept.append(d)
                continue
            if d.offset < offset:
                kept.append(replace(d, size=offset - d.offset))
            if d_end > end:
                kept.append(replace(d, offset=end, size=d_end - end))
        self.damaged = kept
        for at in [at for at in self.sizes if offset <= at < end]:
            del self.sizes[at]
            self.reported.discard(at)
            self.scrub_reported.discard(at)
        self.refused = {at for at in self.refused if not offset <= at < end}

    def corrupt(
        self, queue: ConsumeQueue, offset: int, physical: int, why: str, size: int = 0
    ) -> GetResult:
        """The answer for a record that cannot be read; reported once per CommitLog offset."""
        topic, queue_id = queue.key
        if size > 0:
            self.sizes[physical] = size
        if physical not in self.reported:
            self.reported.add(physical)
            self.counts["read"] += 1
            log.error(
                f"commitlog record at offset {physical} unreadable ({why}): "
                f"{topic}:{queue_id} queue offset {offset} cannot be served",
                offset=physical,
                topic=topic,
                queue_id=queue_id,
                queue_offset=offset,
                reason=why,
            )
        lo, hi = queue.min_offset, queue.max_offset
        return GetResult(GetStatus.CORRUPT, offset, lo, hi, b"", 0, physical, why, size)

    def rebuild_queue(self, queue: ConsumeQueue, offset: int, why: str) -> None:
        """Rewrite ``queue``'s entries from its min offset by scanning the whole CommitLog with
        the replay scan (records lost to damage get entries pointing at the damage)."""
        self.rebuilt.add(queue.key)
        before = queue.max_offset
        found = self._entries_of(queue.key)
        if found is None:
            log.error(
                f"consume queue {queue.topic}:{queue.queue_id}: entry {offset} {why}, and the "
                "commitlog holds no record of this queue: not rebuilt",
            )
            return
        first, physicals, sizes, hashes = found
        skip = max(0, queue.min_offset - first)
        start = first + skip
        queue.truncate_to(start)
        queue.reserve(start, len(physicals) - skip)
        queue.append(start, physicals[skip:], sizes[skip:], hashes[skip:])
        self.counts["consumequeue_rebuilt"] += 1
        log.error(
            f"consume queue {queue.topic}:{queue.queue_id}: entry {offset} {why}; rebuilt "
            f"from the commitlog (offsets {start}..{queue.max_offset}, was ..{before})",
            topic=queue.topic,
            queue_id=queue.queue_id,
            queue_offset=offset,
        )

    def restore_lost(self, queue: ConsumeQueue) -> None:
        """Rebuild a queue whose segment files were gone at its load (``ConsumeQueues.lost``)
        from the CommitLog, in place of whatever a replay wrote into it since; a queue none of
        whose records the CommitLog holds (its first write failed) is forgotten, as a queue
        without files is."""
        queues = self._queues
        queues.lost.remove(queue)
        found = self._entries_of(queue.key)
        if found is None:
            if not queue.segments:
                queues.forget(queue)
            return
        if queue.segments or queue.max_offset:
            queue = queues.reset(queue)
        first, physicals, sizes, hashes = found
        queue.reserve(first, len(physicals))
        queue.append(first, physicals, sizes, hashes)
        self.rebuilt.add(queue.key)
        self.counts["consumequeue_rebuilt"] += 1
        log.error(
            f"consume queue {queue.topic}:{queue.queue_id}: its directory holds no segment file "
            f"(deleted or lost); rebuilt from the commitlog (offsets {first}..{queue.max_offset})",
            topic=queue.topic,
            queue_id=queue.queue_id,
        )

    def _entries_of(
        self, key: tuple[str, int]
    ) -> tuple[int, list[int], list[int], list[int]] | None:
        """The entries of queue ``key`` as the CommitLog holds its records (one scan of the whole
        log with the replay scan): its first queue offset, the records' offsets, sizes and tag
        hashes; None when the log holds none of them."""
        commitlog = self._commitlog
        replayer = Replayer(ConsumeQueues(self._queues.root, 1, FileTracker()))  # scratch
        first: int | None = None
        physicals: list[int] = []
        sizes: list[int] = []
        hashes: list[int] = []

        def collect(_seg: Segment, scan: Scan) -> None:
            nonlocal first
            run = scan.queues.get(key)
            if run is None:
                return
            if first is None:
                first = run.first
            elif run.first != first + len(physicals):
                return  # cannot happen: the scan checks that a queue continues
            physicals.extend(run.physical_offsets)
            sizes.extend(run.sizes)
            hashes.extend(run.tag_hashes)

        walk(
            commitlog,
            replayer,
            0,
            dispatch_from=commitlog.min_offset,
            durable=commitlog.write_pos,
            on_scan=collect,
            copy=False,
        )
        if first is None:
            return None
        return first, physicals, sizes, hashes
