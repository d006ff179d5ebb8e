"""The broker's message store: one CommitLog, a ConsumeQueue per (topic, queue id).

Layout under ``data_dir``::

    commitlog/<20-digit start offset>                       records, pre-allocated segments
    consumequeue/<topic>/<queueId>/<20-digit byte offset>    20-byte entries per queue
    index/<20-digit begin offset>                           key index files (storage.index)
    checkpoint                                              flushed / dispatched / confirm offsets
    abort                                                   present while the store is open
    lock                                                    flock'ed by the process that owns it

A put sizes its batch and encodes the records with ``storage.queue_write``; a get checks the
requested offset and scans the ConsumeQueue with ``storage.queue_read``, and an entry it cannot
serve is ``storage.corruption``'s to answer; the replicas' raw bytes are read, checked and
written by ``storage.replica_bytes``; the repair of damage from a replica, the scrub and an
operator's skip are ``storage.store_repair``'s (:attr:`MessageStore.repairs`). The files'
lifecycle (open with recovery, flush and checkpoint, durable truncation, close) is
``storage.store_files``'s and the configuration is ``storage.store_config``'s. This module holds the appends and reads, the lookups and retention,
and composes the rest.

Threading: every method runs on the broker's event-loop thread except :meth:`MessageStore.flush`,
which one worker thread may run concurrently with :meth:`put` and :meth:`get`. Nothing here
blocks on anything but local disk.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import structlog

from protocol.message import (
    MESSAGE_MAGIC,
    Message,
    RecordEncoder,
    peek_prefix,
)
from protocol.property_index import PropertyNeed
from storage import cold_read, queue_read, retention
from storage.dispatch import BLANK_MIN, Replayer, store_timestamp
from storage.errors import DiskFullError, MessageTooLargeError, StoreError
from storage.index.lookup import (
    Found,
    MessageNotFoundError,
    UnreadableMessageError,
    find_by_key,
    read_message,
)
from storage.queue_read import GetResult, GetStatus
from storage.queue_write import RecordSizer, encode_batch
from storage.queues import queue_id_error, topic_error
from storage.recovery import Damage
from storage.replica_bytes import append_end, whole_records, write_file
from storage.scrub import Scrub, checked_records
from storage.store_config import StoreConfig
from storage.store_files import StoreFiles
from storage.store_repair import StoreRepair

__all__ = [
    "DiskFullError",
    "Found",
    "GetResult",
    "GetStatus",
    "MessageNotFoundError",
    "MessageStore",
    "MessageTooLargeError",
    "PutResult",
    "StoreConfig",
    "StoreError",
    "UnreadableMessageError",
]


log = structlog.get_logger(__name__)


@dataclass(slots=True)
class PutResult:
    """Where a put's records went. Its ``__init__`` is written out: one is made per send, and the
    one the dataclasses module writes stays interpreted when compiled (docs/compiled.md)."""

    queue_id: int
    first_queue_offset: int
    count: int
    physical_offsets: list[int]
    """CommitLog offset of each record."""
    end_offset: int
    """CommitLog write position after this put (what sync flush / replica acks wait for)."""
    store_timestamp: int

    def __init__(
        self,
        queue_id: int,
        first_queue_offset: int,
        count: int,
        physical_offsets: list[int],
        end_offset: int,
        store_timestamp: int,
    ) -> None:
        self.queue_id = queue_id
        self.first_queue_offset = first_queue_offset
        self.count = count
        self.physical_offsets = physical_offsets
        self.end_offset = end_offset
        self.store_timestamp = store_timestamp


class MessageStore:
    def __init__(self, config: StoreConfig) -> None:
        config.validate()
        self.config = config
        self._files = files = StoreFiles(config)
        self._dir = files.directory
        self._encoder = RecordEncoder(config.store_host)
        self._commitlog = files.commitlog
        self._queues = files.queues
        self._sizer = RecordSizer(config.max_message_bytes)
        self._corruption = files.corruption
        self.corruption: dict[str, int] = self._corruption.counts
        """Corruption found, by kind (see :data:`storage.corruption.CORRUPTION_KINDS`): the broker's metric."""
        self._rebuilt = self._corruption.rebuilt
        self.truncate_listeners: list[Callable[[int], None]] = []
        """Called with the new end after :meth:`truncate` cut records (indexes built from the
        CommitLog, such as the broker's timer, drop what was cut)."""
        self.index = files.index
        """The key index (None when ``index_enable`` is off)."""
        self._scrub = Scrub(self._commitlog, self._dir)
        self.repairs = StoreRepair(files, self._scrub, self.get)
        """Repair from a replica, the scrub and an operator's skip (``storage.store_repair``)."""
        self._residency = cold_read.residency_for(lambda: self._commitlog.write_pos)

    @property
    def damaged(self) -> list[Damage]:
        """CommitLog ranges recovery found unreadable and kept in place (reads fail there)."""
        return self._corruption.damaged

    @damaged.setter
    def damaged(self, ranges: list[Damage]) -> None:
        self._corruption.damaged = ranges

    # -- lifecycle -------------------------------------------------------------------------

    def open(self) -> None:
        """Load and recover the store; any truncation is durable before this returns."""
        self._files.open()
        self._scrub.load()

    def close(self) -> None:
        """Flush everything, write the checkpoint and remove the abort marker (a clean stop)."""
        self._files.close()

    def _check_open(self) -> None:
        if not self._files.is_open:
            raise StoreError("store is not open")

    # -- offsets ---------------------------------------------------------------------------

    @property
    def max_offset(self) -> int:
        """CommitLog write position."""
        return self._commitlog.write_pos

    @property
    def min_offset(self) -> int:
        """First CommitLog offset still on disk."""
        return self._commitlog.min_offset

    @property
    def flushed_offset(self) -> int:
        return self._files.flushed

    def commitlog_segments(self) -> list[tuple[int, int]]:
        """(start, end) offsets of each CommitLog segment file, oldest first (the last one may
        end past :attr:`max_offset`: segments are pre-allocated)."""
        return [(seg.start, seg.end) for seg in self._commitlog.segments]

    @property
    def confirm_offset(self) -> int:
        """Replication confirm offset (what every SyncStateSet member has; consumers read up to
        it); persisted in the checkpoint. Never above :attr:`max_offset`."""
        return self._files.confirm

    @confirm_offset.setter
    def confirm_offset(self, offset: int) -> None:
        """Raise the confirm offset to ``offset``, clamped at :attr:`max_offset`. It never moves
        back here (a lower value is ignored): only :meth:`truncate` lowers it, with the log."""
        self._files.raise_confirm(offset)

    def queue_max_offset(self, topic: str, queue_id: int) -> int:
        queue = self._queues.get(topic, queue_id)
        if queue is None:  # none yet: a deleted topic's queue name starts where it ended
            return self._queues.retired_next(topic, queue_id)
        return queue.max_offset

    def queue_min_offset(self, topic: str, queue_id: int) -> int:
        queue = self._queues.get(topic, queue_id)
        if queue is None:  # none yet: a deleted topic's queue name starts where it ended
            return self._queues.retired_next(topic, queue_id)
        return queue.min_offset

    def queue_visible_max_offset(
        self, topic: str, queue_id: int, max_physical_offset: int | None
    ) -> int:
        """The queue offset after the last record ending at or before ``max_physical_offset``
        (None: every record): the max offset a reader limited like :meth:`get` can reach."""
        queue = self._queues.get(topic, queue_id)
        if queue is None:
            return 0
        lo, hi = queue.min_offset, queue.max_offset
        if max_physical_offset is None or lo == hi:
            return hi
        physical, size, _ = queue.entry(hi - 1)
        if physical + size <= max_physical_offset:
            return hi
        # Entries ascend in CommitLog offset: find the first one past the limit.
        while lo < hi:
            mid = (lo + hi) // 2
            physical, size, _ = queue.entry(mid)
            if physical + size <= max_physical_offset:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def queue_ids(self, topic: str) -> list[int]:
        return self._queues.queue_ids(topic)

    def queues_pending(self, topic: str) -> int:
        """Queues of ``topic`` not loaded since a clean start: reading the bounds of one loads
        it (its files opened and searched), which the first reads after a start pay."""
        return self._queues.pending_in(topic)

    def queue_ids_pending(self, topic: str) -> list[int]:
        """The ids of ``topic``'s queues not loaded since a clean start, ascending: the first
        read of each (e.g. :meth:`queue_min_offset`) loads it."""
        return self._queues.pending_ids(topic)

    def topics(self) -> list[str]:
        return self._queues.topics()

    def retire_topic(self, topic: str, at_least: Mapping[int, int] | None = None) -> dict[int, int]:
        """Delete ``topic``'s ConsumeQueues (deleteTopic; the CommitLog keeps its records until
        retention). A queue of that name created later starts empty where the old one ended,
        at least at ``at_least``'s offset (see :meth:`storage.queues.ConsumeQueues.retire_topic`).
        Returns where each queue ended, by queue id."""
        self._check_open()
        return self._queues.retire_topic(topic, at_least or {})

    def was_retired(self, topic: str) -> bool:
        """Was a topic of this name deleted here (:meth:`retire_topic`)?"""
        return self._queues.was_retired(topic)

    # -- writing ---------------------------------------------------------------------------

    def set_max_message_bytes(self, limit: int) -> None:
        """Accept records up to ``limit`` from the next put on (a broker's live config change)."""
        self.config.max_message_bytes = limit
        self._sizer = RecordSizer(limit)

    def put(self, topic: str, queue_id: int, messages: Sequence[Message], now_ms: int) -> PutResult:
        """Append a batch to one queue with one CommitLog append; returns where it went.

        Raises :class:`MessageTooLargeError` (a message over ``max_message_bytes``, a batch over
        a segment) or :class:`DiskFullError`, in both cases having written nothing.
        """
        self._check_open()
        commitlog = self._commitlog
        queue = self._queues.get(topic, queue_id)
        if queue is None:
            error = topic_error(topic) or queue_id_error(queue_id)
            if error is not None:
                raise StoreError(error)
        if not messages:
            first = 0 if queue is None else queue.max_offset
            return PutResult(queue_id, first, 0, [], commitlog.write_pos, now_ms)
        topic_raw = topic.encode()
        # The property filter index's digests from the bytes the records get (else it reads
        # each record back from the CommitLog: storage.filter_index).
        digesting = self._queues.on_append is not None
        batch = self._sizer.size(topic_raw, messages, digesting)
        if batch.total + BLANK_MIN > commitlog.segment_bytes:
            raise MessageTooLargeError(
                f"a {batch.total}-byte batch does not fit in a {commitlog.segment_bytes}-byte segment"
            )
        if queue is None:
            queue = self._queues.get_or_create(topic, queue_id)
        first = queue.max_offset
        try:
            queue.reserve(first, len(messages))
            seg, rel = commitlog.reserve(batch.total)
        except StoreError:
            self._queues.forget_if_unused(queue)
            raise
        physical_offsets, end = encode_batch(
            self._encoder, seg, rel, topic_raw, queue_id, first, messages, batch, now_ms
        )
        queue.append(
            first,
            physical_offsets,
            batch.sizes,
            batch.tag_hashes,
            (batch.digests_lo, batch.digests_hi) if digesting else None,
        )
        commitlog.advance(end, seg, now_ms)
        if self.index is not None:
            self.index.add_put(commitlog, topic_raw, messages, physical_offsets, now_ms)
        return PutResult(queue_id, first, len(messages), physical_offsets, end, now_ms)

    # -- reading ---------------------------------------------------------------------------

    def get(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        max_bytes: int,
        max_physical_offset: int | None = None,
        tag_hashes: frozenset[int] | PropertyNeed | None = None,
        scan: int = 0,
    ) -> GetResult:
        """Up to ``max_count`` records (at least one if any is available, even past
        ``max_bytes``) from queue ``offset``, copied out of the CommitLog with physically
        adjacent records in one slice. Only records ending at or before
        ``max_physical_offset`` are served.

        With ``tag_hashes``, entries whose ConsumeQueue tag hash is not in it are passed over
        without reading their record, looking at up to ``scan`` entries (at least
        ``max_count``): FOUND then may hold fewer records than entries passed (``count`` 0
        when none matched), ``next_offset`` is past every entry looked at, and the records'
        queue offsets have gaps. The hash only tells which records surely do not match: the
        caller confirms on each record's tags (two tags may share a hash). A SQL92 filter's
        :class:`~protocol.property_index.PropertyNeed` passes over entries the same way on their
        property digests (``storage.filter_index``); the caller confirms on the records."""
        self._check_open()
        queue = self._queues.get(topic, queue_id)
        early = queue_read.bounds(queue, offset)
        if early is not None:
            return early
        assert queue is not None  # bounds() answers for a queue that does not exist
        read = queue_read.scan(
            queue,
            self._commitlog,
            offset,
            max_count,
            max_bytes,
            max_physical_offset,
            tag_hashes,
            scan,
        )
        lo, hi = queue.min_offset, queue.max_offset
        if read.count or read.next_offset > offset:  # served, or passed over non-matching ones
            return GetResult(GetStatus.FOUND, read.next_offset, lo, hi, read.body, read.count)
        if read.problem is None:
            return GetResult(GetStatus.NO_MATCHED_MESSAGE, offset, lo, hi, b"", 0)
        answer = self._corruption.unreadable(queue, offset, read.problem)
        if answer is not None:
            return answer
        # The queue was rebuilt from the CommitLog: read it again.
        return self.get(
            topic,
            queue_id,
            offset,
            max_count,
            max_bytes,
            max_physical_offset,
            tag_hashes,
            scan,
        )

    def cold_spans(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        max_bytes: int,
        max_physical_offset: int | None = None,
        tag_hashes: object = None,
        scan: int = 0,
    ) -> list[cold_read.ColdSpan]:
        """The CommitLog bytes a :meth:`get` with these arguments would copy that are not in
        the page cache, each with what follows it (``storage.cold_read.READ_AHEAD``): what to
        load off the event loop before it."""
        self._check_open()
        queue = self._queues.get(topic, queue_id)
        if queue is None or queue_read.bounds(queue, offset) is not None:
            return []
        spans = cold_read.read_spans(
            queue,
            self._commitlog,
            offset,
            max_count,
            max_bytes,
            max_physical_offset,
            tag_hashes,
            scan,
        )
        return cold_read.cold_spans(spans, self._residency, self._commitlog.write_pos)

    def offset_by_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset whose record was stored at or after ``timestamp_ms``
        (the max offset if none was)."""
        self._check_open()
        queue = self._queues.get(topic, queue_id)
        if queue is None:
            return 0
        lo, hi = queue.min_offset, queue.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            physical, size, _ = queue.entry(mid)
            seg = self._commitlog.segment_at(physical)
            if seg is None or size <= 0:
                lo = mid + 1  # deleted or invalid: treat as older
                continue
            if store_timestamp(seg.view, physical - seg.start) >= timestamp_ms:
                hi = mid
            else:
                lo = mid + 1
        return lo

    # -- lookups ---------------------------------------------------------------------------

    def read_message(self, offset: int, max_physical_offset: int | None = None) -> Found:
        """The message starting at CommitLog ``offset`` (a message id's offset), ending at or
        before ``max_physical_offset``; raises :class:`MessageNotFoundError`, and
        :class:`UnreadableMessageError` for a record there that fails its checks (known by its
        size for ``repairs.repairer``, as a read's)."""
        self._check_open()
        visible = self._commitlog.write_pos
        if max_physical_offset is not None:
            visible = min(visible, max_physical_offset)
        try:
            return read_message(self._commitlog, offset, visible)
        except UnreadableMessageError as exc:
            self._corruption.sizes[exc.offset] = exc.size
            raise

    def query_by_key(
        self,
        topic: str,
        key: str,
        begin_ms: int,
        end_ms: int,
        max_count: int,
        max_physical_offset: int | None = None,
    ) -> list[Found]:
        """The messages of ``topic`` with ``key`` (one of its KEYS, or its UNIQ_KEY) stored in
        ``[begin_ms, end_ms]`` and ending at or before ``max_physical_offset``, oldest first
        (at most ``max_count``, the newest). Raises :class:`StoreError` with the index off."""
        self._check_open()
        if self.index is None:
            raise StoreError("the key index is off on this broker (index_enable = false)")
        visible = self._commitlog.write_pos
        if max_physical_offset is not None:
            visible = min(visible, max_physical_offset)
        self.index.catch_up(self._commitlog)
        return find_by_key(
            self.index,
            self._commitlog,
            topic=topic,
            key=key,
            begin_ms=begin_ms,
            end_ms=end_ms,
            max_count=max_count,
            visible=visible,
        )

    def oldest_store_timestamp(self) -> int | None:
        """Store time of the oldest record still in the CommitLog (None when it is empty)."""
        self._check_open()
        commitlog = self._commitlog
        if commitlog.min_offset >= commitlog.write_pos:
            return None
        seg = commitlog.segments[0]
        if peek_prefix(seg.view, 0)[1] != MESSAGE_MAGIC:
            return None
        return store_timestamp(seg.view, 0)

    # -- durability ------------------------------------------------------------------------

    def flush(self, consumequeue_least_pages: int = 0) -> int:
        """fsync the CommitLog, then the ConsumeQueues, then write the checkpoint; returns the
        CommitLog offset now durable (the write position when the flush started). With
        ``consumequeue_least_pages``, only the ConsumeQueue segments whose new entries cross that
        many page boundaries are fsynced, the others left for a later flush, and the
        checkpoint's dispatched offset (where recovery replays the CommitLog into the queues
        from) does not pass the entries left (``storage.store_files``).

        Safe to run in one worker thread while the event-loop thread puts and gets."""
        return self._files.flush(consumequeue_least_pages)

    # -- retention -------------------------------------------------------------------------

    def delete_expired(
        self, now_ms: int, disk_used_ratio: float | None = None, keep_from: int | None = None
    ) -> int:
        """Delete CommitLog segments past retention (or oldest first while the disk is too
        full; the ratio is measured when not given), then the ConsumeQueue segments that only
        point below the new min offset. Returns the number of CommitLog segments deleted.

        ``keep_from``: retention by age keeps the segment holding this offset and every later
        one (the broker's scheduled messages not delivered yet); a disk too full does not."""
        self._check_open()
        usage = retention.disk_usage(self._dir)
        count = retention.segments_to_delete(
            self._commitlog.segments,
            self._commitlog.max_timestamps,
            now_ms=now_ms,
            retention_ms=int(self.config.retention_hours * 3_600_000),
            used_ratio=usage.used_ratio if disk_used_ratio is None else disk_used_ratio,
            max_used_ratio=self.config.disk_max_used_ratio,
            total_bytes=usage.total_bytes,
            keep_from=keep_from,
        )
        if not count:
            return 0
        for _ in range(count):
            self._commitlog.delete_oldest()
        queue_segments = self._queues.delete_below(self._commitlog.min_offset)
        if self.index is not None:
            self.index.delete_below(self._commitlog.min_offset)
        log.info(
            f"retention deleted {count} commitlog segments, {queue_segments} consume queue "
            f"segments; commitlog now starts at {self._commitlog.min_offset}",
            commitlog_segments=count,
            consumequeue_segments=queue_segments,
            min_offset=self._commitlog.min_offset,
        )
        return count

    # -- replication -----------------------------------------------------------------------

    def read_raw(self, offset: int, max_bytes: int) -> memoryview:
        """Whole records (and blank tails) from CommitLog ``offset``, up to ``max_bytes`` (at
        least one record), never crossing a segment end; empty at ``max_offset``.

        The view aliases the mapped segment: use it (send it) before the next retention or
        truncation, and do not keep it."""
        self._check_open()
        return whole_records(self._commitlog, offset, max_bytes)

    def read_checked(self, offset: int, max_bytes: int) -> tuple[memoryview, int]:
        """As :meth:`read_raw`, but only records that pass their checks (CRC, size, offset),
        and the extent of the damage that ends them (0: none; ``storage.scrub``). Damage at
        ``offset`` itself (an empty view) is made known by its extent for ``repairs.repairer`` (a
        replay, such as the timer's, passes over it and says so; a read or the scrub meeting
        it still counts and logs it as theirs)."""
        self._check_open()
        view, damage = checked_records(self._commitlog, offset, max_bytes)
        if damage and not len(view):
            self._corruption.sizes.setdefault(offset, damage)
        return view, damage

    def append_raw(self, offset: int, data: bytes | memoryview) -> int:
        """Append CommitLog bytes as a master wrote them (whole records and blank tails within
        one segment) at ``offset``, which must be ``max_offset``. Every record is validated
        (CRC, offsets, queue continuity) before anything is written, then ConsumeQueues are
        dispatched by the same code recovery uses. Returns the new ``max_offset``."""
        self._check_open()
        commitlog = self._commitlog
        # One copy of a view makes the records' slices plain bytes, cheaper to hash and compare.
        raw = data if isinstance(data, bytes) else bytes(data)
        seg_end = append_end(commitlog, offset, len(raw))
        if not raw:
            return offset
        index = self.index
        replayer = Replayer(
            self._queues,
            keys=index is not None and not index.behind,
            digests=self._queues.on_append is not None,
        )
        scan = replayer.scan(
            raw,
            base=offset,
            start=0,
            limit=len(raw),
            segment_end=seg_end - offset,
            zeros_end_data=False,
        )
        if scan.error is not None:
            raise scan.error
        # Reserve everything first, so a full disk leaves nothing half-written.
        replayer.reserve(scan)
        seg = commitlog.writable_segment()
        write_file(seg, offset - seg.start, raw)
        replayer.apply(scan)
        commitlog.advance(offset + len(raw), seg, scan.newest)
        if index is not None:
            index.add_replayed(
                commitlog, offset, scan.key_hashes, scan.key_physicals, scan.key_stored
            )
        return commitlog.write_pos

    def truncate(self, offset: int) -> None:
        """Durably cut the CommitLog, the ConsumeQueues and their max offsets back to
        ``offset`` (a record boundary); ``confirm_offset`` is lowered to it if above."""
        self._check_open()
        end = self._files.cut(offset)
        # The scrub goes on from a record boundary: bytes written after the cut may place their
        # records elsewhere than the cut ones did.
        self._scrub.position = min(self._scrub.position, offset)
        if offset < end:
            log.info(f"commitlog truncated from {end} to {offset}", offset=offset, previous=end)
            for listener in self.truncate_listeners:
                listener(offset)
