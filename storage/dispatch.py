"""Validating CommitLog records and replaying them into ConsumeQueue entries.

Recovery (rebuilding ConsumeQueues past the last dispatched offset) and replication
(``MessageStore.append_raw``) run this same code: :meth:`Replayer.scan` validates the records of
one segment in order, checks that each continues its queue and gathers their ConsumeQueue
entries queue by queue; :meth:`Replayer.apply` writes them, one write per queue.

The scan is the replica's hot path (a slave catching up replays every byte the master wrote),
so it is one loop: each record costs one struct unpack, one CRC and one dictionary lookup of
its tail (topic and properties, which repeat from record to record; an idempotent producer's
records differ in their ``__PSEQ`` value alone, which no index reads, so they are looked up
without it); a record continuing the queue of the record before it skips the per-queue
lookups. Anything unusual (a blank tail, zeros, an invalid record, another queue) leaves the
loop's fast path for code that says exactly what it is. A replica's scan (``keys``,
``digests``) also gathers, from the same decoding of each tail, the key index's hashes and the
property filter index's digests, so the batch is parsed once, not again by each index.
"""

from __future__ import annotations

import mmap
import struct
import zlib
from dataclasses import dataclass, field
from typing import Final

from protocol.message import (
    BLANK_MAGIC,
    DISPATCH_HEAD,
    HEAD_SIZE,
    MESSAGE_MAGIC,
    MIN_RECORD_SIZE,
    PROP_TAGS,
    RecordError,
    check_record,
    read_tail_properties,
    read_tail_tags,
    seq_value_at,
    seq_value_span,
    tag_hash,
)
from protocol.property_index import digest_of
from storage.errors import CorruptRecordError
from storage.index.format import record_keys, topic_seed
from storage.queues import ConsumeQueues, queue_id_error, topic_error

BLANK_MIN: Final = 8
_I64: Final = struct.Struct(">q")
_PREFIX: Final = struct.Struct(">II")
_PHYSICAL_AT: Final = 28
_STORE_TIMESTAMP_AT: Final = 44
_TAIL_CACHE_LIMIT: Final = 4096
_UNLIMITED: Final = 1 << 62
_U32: Final = struct.Struct(">I")
_U16: Final = struct.Struct(">H")
_MESSAGE_MAGIC_RAW: Final = _U32.pack(MESSAGE_MAGIC)
_BLANK_MAGIC_RAW: Final = _U32.pack(BLANK_MAGIC)

Buffer = bytes | bytearray | memoryview
QueueKey = tuple[str, int]
Described = tuple[str, int, list[int], int, int]
"""What a record's tail says: topic, tag hash, key index hashes, filter digest (low, high)."""
_NO_KEYS: Final[list[int]] = []


def record_reason(exc: RecordError) -> str:
    """A codec error without its buffer-relative position (callers name the CommitLog offset)."""
    text = str(exc)
    head, sep, tail = text.rpartition(" at ")
    return head if sep and tail.isdigit() else text


def store_timestamp(buf: Buffer, pos: int) -> int:
    return int(_I64.unpack_from(buf, pos + _STORE_TIMESTAMP_AT)[0])


@dataclass(slots=True)
class QueueRun:
    """The entries one scan gathered for one queue: from queue offset ``first``, in order."""

    first: int
    physical_offsets: list[int] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    tag_hashes: list[int] = field(default_factory=list)
    digests_lo: list[int] = field(default_factory=list)
    """The property digests of the entries (a scan with ``digests``; else empty)."""
    digests_hi: list[int] = field(default_factory=list)


@dataclass(slots=True)
class Scan:
    """What :meth:`Replayer.scan` found in ``buf[start:limit)``."""

    end: int
    """Where valid data ends (relative to the buffer): at ``limit``, at the segment end, at the
    first zero header (``zeros_end_data``), at the first invalid record (``error``), or where
    the scan stopped after ``max_bytes`` (``more``)."""
    complete: bool
    """The segment is full: its blank tail (or a zero tail too short for one) was seen."""
    more: bool
    """Stopped after ``max_bytes``: scan again from ``end``."""
    error: CorruptRecordError | None
    """The invalid record at ``end``; every record before it is valid and in ``queues``."""
    newest: int
    """Newest store timestamp of the valid records (0 if none)."""
    queues: dict[QueueKey, QueueRun]
    """The entries of the records from ``dispatch_from`` on, by queue."""
    key_hashes: list[list[int]] = field(default_factory=list)
    """A scan with ``keys``: the key index hashes of each record that has keys, in log order,
    with its CommitLog offset (``key_physicals``) and store timestamp (``key_stored``)."""
    key_physicals: list[int] = field(default_factory=list)
    key_stored: list[int] = field(default_factory=list)

    @property
    def dispatched(self) -> int:
        """Records whose entries are in ``queues``."""
        return sum(len(run.sizes) for run in self.queues.values())


class Replayer:
    """Validates and dispatches records; remembers the next offset of every queue it has seen,
    so scans may run ahead of :meth:`apply` (``append_raw`` validates a whole batch before
    writing anything; recovery applies one chunk of records at a time)."""

    __slots__ = (
        "_damage",
        "_digests",
        "_keys",
        "_next",
        "_queues",
        "_seq_described",
        "_seq_prefix",
        "_seq_size",
        "_seq_start",
        "_seq_stop",
        "_seq_suffix",
        "_seq_tails",
        "_tails",
    )

    def __init__(self, queues: ConsumeQueues, *, keys: bool = False, digests: bool = False) -> None:
        """With ``keys`` a scan gathers the key index's hashes of its records
        (``Scan.key_hashes``); with ``digests`` their property filter digests, which
        :meth:`apply` hands to the queues (else each queue reads its new records again)."""
        self._queues = queues
        self._next: dict[QueueKey, int] = {}
        self._tails: dict[bytes, Described] = {}
        self._seq_tails: dict[bytes, Described] = {}
        """Tails with a ``__PSEQ`` property, by the tail without its value (:func:`seq_blind`):
        every record of an idempotent producer has a tail of its own, so :attr:`_tails` would
        miss on each of them (and be cleared every :data:`_TAIL_CACHE_LIMIT` records)."""
        self._seq_prefix = self._seq_suffix = b""
        self._seq_size = -1
        self._seq_start = self._seq_stop = 0
        self._seq_described: Described = ("", 0, _NO_KEYS, 0, 0)
        """The last tail described that had a ``__PSEQ`` value: its length, where the value
        was (``[_seq_start, _seq_stop)``), the bytes around it and what it says. A tail of that
        length with the same bytes around digits and dots there (:func:`seq_value_at`) has
        the same blind form, so it says the same: found without a look-up, no hash of a tail
        that differs from every other and no blind copy built (-1: none yet)."""
        self._damage: tuple[int, int] | None = None
        self._keys = keys
        self._digests = digests

    def skip_damage(self, offset: int, size: int) -> None:
        """Records were lost in CommitLog bytes ``[offset, offset + size)`` (recovery quarantined
        them): from now on a record may skip queue offsets, and each skipped offset gets an entry
        pointing at the damage, so a reader of it gets an error naming the offset instead of the
        queue silently closing over the loss."""
        self._damage = (offset, size)
        self._digests = False  # the filler entries' digests are read from the damage, as before

    def scan(
        self,
        buf: Buffer,
        *,
        base: int,
        start: int,
        limit: int,
        segment_end: int,
        zeros_end_data: bool,
        dispatch_from: int = 0,
        max_bytes: int = _UNLIMITED,
    ) -> Scan:
        """Validate the records in ``buf[start:limit)``, one segment's worth, in order.

        ``base`` is the CommitLog offset of ``buf[0]``; ``segment_end`` is where the segment
        ends (relative to ``buf``, at or past ``limit``), which a blank record must reach
        exactly. With ``zeros_end_data`` an all-zero record header ends the scan quietly (the
        end of written data); otherwise it is invalid. Records from ``dispatch_from``
        (relative) on are also decoded and checked against their queues, and their entries
        gathered; records before it are only validated. Stops at the first invalid record
        (``Scan.error`` names its CommitLog offset), never raising for one, and at the first
        record boundary ``max_bytes`` or more past ``start`` (``Scan.more``).
        """
        view = memoryview(buf).cast("B")
        if not 0 <= start <= limit <= segment_end or limit > len(view):
            raise ValueError(f"bad scan range [{start}, {limit}) in a segment of {segment_end}")
        if not isinstance(buf, bytes):
            buf = view
        # Tails are looked up as bytes: slices of ``buf`` when it is bytes (the replica's case,
        # where bytes(b) is b), copies otherwise.
        to_bytes = bytes
        runs: dict[QueueKey, QueueRun] = {}
        tails = self._tails
        nexts = self._next
        head = DISPATCH_HEAD.unpack_from
        crc32 = zlib.crc32
        magic_ok, size_min, head_size = MESSAGE_MAGIC, MIN_RECORD_SIZE, HEAD_SIZE
        last_head = limit - MIN_RECORD_SIZE
        stop = min(limit, start + max_bytes)
        # The queue of the previous record: a record continuing it needs no lookups.
        run_topic: str | None = None
        run_queue_id = run_next = 0
        unused = QueueRun(0)  # bound until the first record names its queue
        add_physical, add_size, add_hash = (
            unused.physical_offsets.append,
            unused.sizes.append,
            unused.tag_hashes.append,
        )
        add_lo, add_hi = unused.digests_lo.append, unused.digests_hi.append
        digesting = self._digests
        key_hashes: list[list[int]] = []
        key_physicals: list[int] = []
        key_stored: list[int] = []
        newest = 0
        pos = start
        complete = False
        error: CorruptRecordError | None = None
        try:
            while pos < stop:
                if pos <= last_head:
                    size, magic, crc, queue_id, queue_offset, physical, timestamp, blen = head(
                        buf, pos
                    )
                    end = pos + size
                else:
                    size = magic = 0
                if (
                    magic != magic_ok
                    or size < size_min
                    or end > limit
                    or crc32(view[pos + 12 : end]) != crc
                    or physical != base + pos
                ):
                    pos, complete = _not_a_message(
                        buf, pos, base, limit, segment_end, zeros_end_data
                    )
                    break
                if timestamp > newest:
                    newest = timestamp
                if pos < dispatch_from:
                    pos = end
                    continue
                tail = to_bytes(buf[pos + head_size + blen : end])
                if (
                    len(tail) == self._seq_size
                    and seq_value_at(tail, self._seq_start, self._seq_stop)
                    and tail.startswith(self._seq_prefix)
                    and tail.endswith(self._seq_suffix)
                ):
                    described = self._seq_described
                else:
                    cached = tails.get(tail)
                    described = self._describe(tail, base + pos) if cached is None else cached
                topic, tags_hash, hashes, lo, hi = described
                if queue_offset != run_next or queue_id != run_queue_id or topic != run_topic:
                    if run_topic is not None:
                        nexts[(run_topic, run_queue_id)] = run_next
                    first = self._check_queue(topic, queue_id, queue_offset, base + pos)
                    run = runs.get((topic, queue_id))
                    if run is None:
                        run = runs[(topic, queue_id)] = QueueRun(first)
                    if first < queue_offset:
                        _fill(run, queue_offset - first, self._damage)
                    add_physical = run.physical_offsets.append
                    add_size = run.sizes.append
                    add_hash = run.tag_hashes.append
                    add_lo, add_hi = run.digests_lo.append, run.digests_hi.append
                    run_topic, run_queue_id = topic, queue_id
                add_physical(physical)
                add_size(size)
                add_hash(tags_hash)
                if digesting:
                    add_lo(lo)
                    add_hi(hi)
                if hashes:
                    key_hashes.append(hashes)
                    key_physicals.append(physical)
                    key_stored.append(timestamp)
                run_next = queue_offset + 1
                pos = end
            else:
                complete = pos == segment_end
        except CorruptRecordError as exc:
            error = exc.with_traceback(None)  # no frames (and views of a mapped segment) kept
        if run_topic is not None:
            nexts[(run_topic, run_queue_id)] = run_next
        more = error is None and not complete and stop <= pos < limit
        return Scan(pos, complete, more, error, newest, runs, key_hashes, key_physicals, key_stored)

    def _describe(self, tail: bytes, offset: int) -> Described:
        """What a record tail says (:data:`Described`), remembered for the records that
        repeat it. The key hashes and the digest are those the key index
        (``storage.index.service``) and the filter index (``storage.filter_index``) take from
        the record when they read it themselves. A tail with a ``__PSEQ`` property is
        remembered without that property's value (:func:`seq_blind`): neither index reads it
        (the filter digest notes the property's presence only), so the tails of one producer's
        records on one topic, alike but for their sequence, are described once."""
        span = seq_value_span(tail)
        blind: bytes | None = None
        if span is not None:
            blind = tail[: span[0]] + tail[span[1] :]
            described = self._seq_tails.get(blind)
            if described is not None:
                self._seq_last(tail, span, described)
                return described
        lo = hi = 0
        try:
            if self._digests:
                # The properties decoded once, for the tags and the digest.
                topic, props = read_tail_properties(tail)
                tags = props.get(PROP_TAGS, "")
                lo, hi = digest_of(props)
            else:
                topic, tags = read_tail_tags(tail)
        except RecordError as exc:
            raise CorruptRecordError(offset, f"undecodable record: {exc}") from None
        hashes = _NO_KEYS
        if self._keys:
            (tl,) = _U16.unpack_from(tail, 0)
            keys = record_keys(tail[2 + tl + 2 :])
            if keys:
                seed = topic_seed(tail[2 : 2 + tl])
                crc32 = zlib.crc32
                hashes = [crc32(key, seed) for key in keys]
        described = (topic, tag_hash(tags), hashes, lo, hi)
        if blind is None:
            tails, key = self._tails, tail
        else:
            tails, key = self._seq_tails, blind
        if len(tails) >= _TAIL_CACHE_LIMIT:
            tails.clear()
        tails[key] = described
        if span is not None:
            self._seq_last(tail, span, described)
        return described

    def _seq_last(self, tail: bytes, span: tuple[int, int], described: Described) -> None:
        """Remember ``tail``, whose ``__PSEQ`` value is at ``span``, as the last idempotent
        record's (:attr:`_seq_described`)."""
        start, stop = span
        self._seq_prefix = tail[:start]
        self._seq_suffix = tail[stop:]
        self._seq_size = len(tail)
        self._seq_start = start
        self._seq_stop = stop
        self._seq_described = described

    def _check_queue(self, topic: str, queue_id: int, queue_offset: int, offset: int) -> int:
        """Check that a record (CommitLog ``offset``) continues its queue and note the queue's
        next offset; raises :class:`CorruptRecordError`. Returns the queue offset the entries
        must start at: ``queue_offset``, or below it when offsets lost to damage are skipped."""
        key = (topic, queue_id)
        if 0 <= queue_offset < self._queues.retired_next(topic, queue_id):
            # A record of a deleted topic's old life (a replica behind its master, recovery
            # replaying): taken here, left out of the queue by reserve and apply.
            self._next[key] = queue_offset + 1
            return queue_offset
        expected = self._next.get(key)
        exact = True
        if expected is None:
            queue = self._queues.get(topic, queue_id)
            if queue is None:
                error = topic_error(topic) or queue_id_error(queue_id)
                if error is not None:
                    raise CorruptRecordError(offset, error)
                expected, exact = 0, False
            else:
                # An empty queue accepts any offset at or past its max (a replica that starts
                # mid-queue, a queue rebuilt from a log whose start was deleted).
                expected, exact = queue.max_offset, not queue.is_empty
        first = queue_offset
        if queue_offset != expected and (exact or queue_offset < expected):
            if self._damage is None or queue_offset < expected:
                raise CorruptRecordError(
                    offset,
                    f"queue offset {queue_offset} of {topic}:{queue_id} does not follow {expected}",
                )
            first = expected
        self._next[key] = queue_offset + 1
        return first

    def reserve(self, scan: Scan) -> None:
        """Allocate the ConsumeQueue segments the entries of ``scan`` need (may raise
        DiskFullError, writing nothing)."""
        for (topic, queue_id), run in scan.queues.items():
            skip = self._retired_entries(topic, queue_id, run)
            if skip < len(run.sizes):
                self._queues.get_or_create(topic, queue_id).reserve(
                    run.first + skip, len(run.sizes) - skip
                )

    def apply(self, scan: Scan) -> None:
        """Write the ConsumeQueue entries of ``scan``, one write per queue."""
        for (topic, queue_id), run in scan.queues.items():
            skip = self._retired_entries(topic, queue_id, run)
            if skip >= len(run.sizes):
                continue
            queue = self._queues.get_or_create(topic, queue_id)
            first = run.first + skip
            queue.reserve(first, len(run.sizes) - skip)
            lo, hi = run.digests_lo, run.digests_hi
            digested = len(lo) == len(run.sizes)
            if skip:
                queue.append(
                    first,
                    run.physical_offsets[skip:],
                    run.sizes[skip:],
                    run.tag_hashes[skip:],
                    (lo[skip:], hi[skip:]) if digested else None,
                )
            else:
                queue.append(
                    first,
                    run.physical_offsets,
                    run.sizes,
                    run.tag_hashes,
                    (lo, hi) if digested else None,
                )

    def _retired_entries(self, topic: str, queue_id: int, run: QueueRun) -> int:
        """How many of the run's first entries belong to a deleted topic's old queue."""
        return max(0, self._queues.retired_next(topic, queue_id) - run.first)


def _fill(run: QueueRun, count: int, damage: tuple[int, int] | None) -> None:
    """``count`` entries pointing at the damaged range (queue offsets whose records it held)."""
    assert damage is not None
    physical, size = damage
    run.physical_offsets.extend([physical] * count)
    run.sizes.extend([size] * count)
    run.tag_hashes.extend([0] * count)


def next_record(
    buf: Buffer, base: int, pos: int, segment_end: int, search_end: int | None = None
) -> int | None:
    """The position (relative) of the first valid record or blank tail after ``pos`` in one
    segment's ``buf``: where reading resumes past damaged bytes. None if there is none.

    A record is recognised by its magic, its CRC and the CommitLog offset it carries, so bytes
    of a damaged record are not mistaken for one. ``search_end`` bounds where a record's header
    is looked for (the end of what was ever written: recovery does not search a pre-allocated
    segment's unwritten tail)."""
    limit = segment_end if search_end is None else min(search_end, segment_end)
    view = memoryview(buf).cast("B")
    obj = view.obj
    # Search the mapping (or bytes) itself: copying a whole segment to search it would cost more.
    raw: bytes | bytearray | mmap.mmap = (
        obj
        if isinstance(obj, (bytes, bytearray, mmap.mmap)) and len(obj) == len(view)
        else bytes(view[:segment_end])
    )
    blank_at: int | None = None
    probe = pos + 1
    while True:
        found = raw.find(_BLANK_MAGIC_RAW, probe + 4, limit)
        if found < 0:
            break
        at = found - 4
        if _U32.unpack_from(view, at)[0] == segment_end - at:
            blank_at = at
            break
        probe = at + 1
    probe = pos + 1
    while True:
        found = raw.find(_MESSAGE_MAGIC_RAW, probe + 4, limit if blank_at is None else blank_at)
        if found < 0:
            return blank_at
        at = found - 4
        try:
            check_record(view, at, segment_end)
        except RecordError:
            pass
        else:
            if _I64.unpack_from(view, at + _PHYSICAL_AT)[0] == base + at:
                return at
        probe = at + 1


def _not_a_message(
    buf: Buffer, pos: int, base: int, limit: int, segment_end: int, zeros_end_data: bool
) -> tuple[int, bool]:
    """What lies at ``pos``, where no valid message record does: the segment's blank tail
    (``(segment_end, True)``), the end of written data (``(pos, False)``), or an invalid
    record (raises :class:`CorruptRecordError` naming its CommitLog offset)."""
    if segment_end - pos < BLANK_MIN:
        # A tail too short for any record: only zeros may fill it.
        if any(bytes(buf[pos:segment_end])):
            raise CorruptRecordError(base + pos, f"{segment_end - pos} stray bytes at segment end")
        return segment_end, True
    if limit - pos < BLANK_MIN:
        raise CorruptRecordError(base + pos, "truncated record header")
    size, magic = _PREFIX.unpack_from(buf, pos)
    if magic == BLANK_MAGIC:
        if pos + size != segment_end:
            raise CorruptRecordError(
                base + pos, f"blank record of {size} bytes does not end its segment"
            )
        if pos + size > limit:
            raise CorruptRecordError(base + pos, "truncated blank record")
        return segment_end, True
    if size == 0 and magic == 0 and zeros_end_data:
        return pos, False
    try:
        check_record(buf, pos, limit)
    except RecordError as exc:
        raise CorruptRecordError(base + pos, record_reason(exc)) from None
    physical = _I64.unpack_from(buf, pos + _PHYSICAL_AT)[0]
    if physical != base + pos:
        raise CorruptRecordError(base + pos, f"record says it is at offset {physical}")
    raise AssertionError(f"the record at {base + pos} is valid")  # the caller found it was not
