"""The store's repair face (issue 31): damage a read, the scrub or recovery found, repaired in
place from another replica's copy, and an operator's skip of a message no replica can read.

:class:`StoreRepair` is reached as ``MessageStore.repairs`` and built by the store from the parts
it holds (its files: the CommitLog, the ConsumeQueues, the key index; the corruption tracker,
``storage.corruption``; the scrub, ``storage.scrub``). It gives the broker (``broker.repair``)
what it fetches, writes back and reports: the bytes of a record for a replica that asks
(:meth:`StoreRepair.record_bytes`), the write-back of a replica's intact copy
(:meth:`StoreRepair.repair`), the damage known and held still (:meth:`StoreRepair.unrepaired`),
the scrub's slices and the key index's check and rebuild. Nothing here runs per message: a read
reaches it only through :attr:`StoreRepair.repairer`, on a record it could not serve.

Threading: the broker's event-loop thread, as the store's reads; the fsync :meth:`repair`
returns and :meth:`save_scrub` run off the loop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from protocol.broker_requests.repair import intact_records
from storage.errors import StoreError
from storage.queue_read import GetResult, GetStatus
from storage.scrub import Scrub, ScrubStep
from storage.segment import Segment
from storage.store_files import StoreFiles

__all__ = ["RecordReadable", "Repairer", "StoreRepair"]


class RecordReadable(StoreError):
    """A skip asked for a message this store reads intact."""


class Repairer(Protocol):
    """Fetches the record at a CommitLog offset that a read found unreadable from another
    replica and writes it back (:meth:`StoreRepair.repair`); ``start`` gives what to await
    before reading again, or None when no repair is worth trying now."""

    def start(self, offset: int) -> Awaitable[object] | None: ...

    def explain(self, offset: int) -> str:
        """What was tried to repair the record at ``offset`` ("" when nothing failed)."""
        ...


Read = Callable[[str, int, int, int, int], GetResult]
"""The store's read (``MessageStore.get``): topic, queue id, queue offset, max count, max bytes."""


class StoreRepair:
    def __init__(self, files: StoreFiles, scrub: Scrub, read: Read) -> None:
        self._files = files
        self._commitlog = files.commitlog
        self._queues = files.queues
        self._corruption = files.corruption
        self._scrub = scrub
        self._read = read
        self._repairer: Repairer | None = None

    def _check_open(self) -> None:
        if not self._files.is_open:
            raise StoreError("store is not open")

    @property
    def repairer(self) -> Repairer | None:
        """Who fetches damaged records from a replica (the broker's, set in controller mode):
        a reader that gets CORRUPT calls its ``start`` with the offset. While set, a read that
        meets a record whose header does not hold answers CORRUPT instead of rebuilding its
        queue at once (``storage.corruption``)."""
        return self._repairer

    @repairer.setter
    def repairer(self, repairer: Repairer | None) -> None:
        self._repairer = repairer
        self._corruption.repairable = repairer is not None

    def record_bytes(self, offset: int, size: int) -> bytes:
        """A copy of the ``size`` CommitLog bytes at ``offset`` (within one segment, below the
        write position); raises :class:`StoreError` when they are not all there."""
        self._check_open()
        seg = self._span(offset, size)
        rel = offset - seg.start
        return bytes(seg.view[rel : rel + size])

    def repair(self, offset: int, raw: bytes) -> Callable[[], None]:
        """Write ``raw`` over the CommitLog bytes at ``offset`` in place (same position, same
        length): whole records that pass their CRC and name their own offsets, or
        :class:`StoreError` and nothing written. The range is no longer counted as damaged.
        Returns what makes the write durable (an fsync of the segment: run it off the loop)."""
        self._check_open()
        problem = intact_records(raw, offset)
        if problem is not None:
            raise StoreError(
                f"refusing to write back offsets {offset}..{offset + len(raw)}: {problem}"
            )
        seg = self._span(offset, len(raw))
        rel = offset - seg.start
        seg.view[rel : rel + len(raw)] = raw
        self._corruption.repaired(offset, len(raw))
        return seg.fsync

    def unreadable_size(self, offset: int) -> int | None:
        """The size of the damage known at CommitLog ``offset``: a record a read or the scrub
        found unreadable (as its ConsumeQueue entry says), or a range recovery kept in place
        from there; None when none is (or it was repaired since)."""
        return self._corruption.size_of(offset)

    def scrub(self, max_bytes: int) -> ScrubStep:
        """Check the next ``max_bytes`` of flushed CommitLog records (``storage.scrub``); the
        damage found is counted (``scrub``, once per offset) and, like a read's, handed to
        :attr:`repairer` by its offset (:meth:`unreadable_size`). The record of a skipped
        message is passed over as intact (given up: ``Corruption.given_up``)."""
        self._check_open()
        step = self._scrub.step(self._files.flushed, max_bytes)
        given_up = self._corruption.given_up
        step.damage = [(at, size) for at, size in step.damage if not given_up(at, size)]
        for offset, size in step.damage:
            self._corruption.scrubbed(offset, size)
        return step

    def check_index(self) -> str | None:
        """Check the next sealed key index file; one that fails is dropped, to be rebuilt from
        the CommitLog in slices (:meth:`rebuild_index`; ``storage.index``): returns why, None
        when it held or the index is off."""
        self._check_open()
        index = self._files.index
        if index is None:
            return None
        return index.check_sealed(self._commitlog)

    def rebuild_index(self, max_bytes: int) -> bool:
        """Index about ``max_bytes`` more CommitLog bytes of the key index's rebuild that
        :meth:`check_index` began; True when the index is current (or off). A lookup by key
        meanwhile catches up whole first."""
        self._check_open()
        index = self._files.index
        if index is None or not index.behind:
            return True
        return index.catch_up(self._commitlog, max_bytes)

    def save_scrub(self) -> None:
        """Keep the scrub's position durably (a restart carries on from it)."""
        self._scrub.save()

    @property
    def scrub_position(self) -> tuple[int, int]:
        """(CommitLog offset the scrub reads next, passes it ended)."""
        return self._scrub.position, self._scrub.passes

    def unrepaired(self) -> list[tuple[int, int]]:
        """The damage this store knows of and holds still (CommitLog offset, size), oldest
        first: records reads or the scrub found unreadable, ranges recovery kept in place. A
        range that now holds intact records is left out (a ConsumeQueue entry was what was
        wrong, and its queue was rebuilt; or the bytes were written back meanwhile), and so is
        the record of a message an operator skipped (given up, :meth:`skip_corrupt`): it is
        not repaired, nor counted for elections."""
        corruption = self._corruption
        ranges = dict(corruption.sizes)
        for d in corruption.damaged:
            ranges.setdefault(d.offset, d.size)
        floor = self._commitlog.min_offset
        out = []
        for offset, size in sorted(ranges.items()):
            if offset < floor or corruption.given_up(offset, size):
                continue
            try:
                raw = self._span(offset, size)
            except StoreError:
                out.append((offset, size))  # not all there: damage all the same
                continue
            rel = offset - raw.start
            if intact_records(raw.view[rel : rel + size], offset) is not None:
                out.append((offset, size))
        return out

    def unrepairable(self) -> list[tuple[int, int]]:
        """The :meth:`unrepaired` damage whose repair no replica could make
        (:meth:`repair_refused`, not repaired since): what the broker reports to the
        controllers' elections."""
        refused = self._corruption.refused
        return [(offset, size) for offset, size in self.unrepaired() if offset in refused]

    def skip_corrupt(self, topic: str, queue_id: int, queue_offset: int) -> int:
        """Reads of the queue pass over the message at ``queue_offset`` from now on (an
        operator's ``rmqctl skipCorruptMessage``: no replica can read it), and its record is
        given up: no longer repaired, scrubbed or reported as damage (:meth:`unrepaired`);
        returns its CommitLog offset. Raises :class:`RecordReadable` when this store reads it, and
        :class:`StoreError` when the queue has no message there."""
        self._check_open()
        queue = self._queues.get(topic, queue_id)
        if queue is None or not queue.min_offset <= queue_offset < queue.max_offset:
            raise StoreError(f"{topic}:{queue_id} holds no message at queue offset {queue_offset}")
        physical, size, _tags = queue.entry(queue_offset)
        if (topic, queue_id, queue_offset) not in self._corruption.skipped:
            res = self._read(topic, queue_id, queue_offset, 1, 1)
            if res.status is not GetStatus.CORRUPT or res.next_offset != queue_offset:
                raise RecordReadable(
                    f"{topic}:{queue_id} queue offset {queue_offset} (commitlog offset "
                    f"{physical}) is readable here: nothing skipped"
                )
        self._corruption.skip(topic, queue_id, queue_offset, physical, size)
        return physical

    def repair_refused(self, offset: int) -> None:
        """No replica could repair the record at ``offset``: reads go on as without replicas
        (a record whose header does not hold has its queue rebuilt once)."""
        self._corruption.repair_refused(offset)

    def _span(self, offset: int, size: int) -> Segment:
        commitlog = self._commitlog
        seg = commitlog.segment_at(offset)
        end = offset + size
        if (
            size <= 0
            or seg is None
            or offset < commitlog.min_offset
            or end > min(seg.end, commitlog.write_pos)
        ):
            raise StoreError(
                f"commitlog offsets {offset}..{end} are not within one segment of "
                f"[{commitlog.min_offset}, {commitlog.write_pos})"
            )
        return seg
