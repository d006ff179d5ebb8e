"""Validating CommitLog records and replaying them into ConsumeQueue entries.

Recovery (rebuilding ConsumeQueues past the last dispatched offset) and replication
(``MessageStore.append_raw``) run this same code: :class:`SegmentWalk` validates the records of
one segment in order, :class:`Dispatcher` checks that each record continues its queue and writes
its ConsumeQueue entry.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from typing import Final

from protocol.message import (
    BLANK_MAGIC,
    RecordError,
    RecordInfo,
    check_record,
    read_info,
)
from storage.errors import CorruptRecordError
from storage.queues import ConsumeQueues, queue_id_error, topic_error

BLANK_MIN: Final = 8
_I64: Final = struct.Struct(">q")
_PREFIX: Final = struct.Struct(">II")
_PHYSICAL_AT: Final = 28
_STORE_TIMESTAMP_AT: Final = 44

Buffer = bytes | bytearray | memoryview


def record_reason(exc: RecordError) -> str:
    """A codec error without its buffer-relative position (callers name the CommitLog offset)."""
    text = str(exc)
    head, sep, tail = text.rpartition(" at ")
    return head if sep and tail.isdigit() else text


def store_timestamp(buf: Buffer, pos: int) -> int:
    return int(_I64.unpack_from(buf, pos + _STORE_TIMESTAMP_AT)[0])


class SegmentWalk:
    """Validate the records in ``buf[start:limit)``, one segment's worth, in order.

    ``base`` is the CommitLog offset of ``buf[0]``; ``segment_end`` is where the segment ends
    (relative to ``buf``), which a blank record must reach exactly. Iterating yields
    ``(position, size)`` of each valid message record. When iteration ends, ``end`` is where
    valid data ends and ``complete`` tells whether the segment is full (its blank tail seen).
    With ``zeros_end_data`` an all-zero record header ends the walk quietly (the end of
    written data); otherwise, and for any invalid record, :class:`CorruptRecordError` is raised
    naming the record's CommitLog offset.
    """

    __slots__ = ("_base", "_buf", "_limit", "_segment_end", "_zeros_end", "complete", "end")

    def __init__(
        self,
        buf: Buffer,
        *,
        base: int,
        start: int,
        limit: int,
        segment_end: int,
        zeros_end_data: bool,
    ) -> None:
        self._buf = buf
        self._base = base
        self._limit = limit
        self._segment_end = segment_end
        self._zeros_end = zeros_end_data
        self.end = start
        self.complete = False

    def __iter__(self) -> Iterator[tuple[int, int]]:
        buf, base, limit, seg_end = self._buf, self._base, self._limit, self._segment_end
        unpack_prefix = _PREFIX.unpack_from
        unpack_i64 = _I64.unpack_from
        pos = self.end
        while pos < limit:
            if seg_end - pos < BLANK_MIN:
                # A tail too short for any record: only zeros may fill it.
                if any(bytes(buf[pos:seg_end])):
                    raise CorruptRecordError(
                        base + pos, f"{seg_end - pos} stray bytes at segment end"
                    )
                pos = seg_end
                break
            if limit - pos < BLANK_MIN:
                raise CorruptRecordError(base + pos, "truncated record header")
            size, magic = unpack_prefix(buf, pos)
            if magic == BLANK_MAGIC:
                if pos + size != seg_end:
                    raise CorruptRecordError(
                        base + pos, f"blank record of {size} bytes does not end its segment"
                    )
                if pos + size > limit:
                    raise CorruptRecordError(base + pos, "truncated blank record")
                pos = seg_end
                break
            if size == 0 and magic == 0 and self._zeros_end:
                self.end = pos
                return
            try:
                size = check_record(buf, pos, limit)
            except RecordError as exc:
                raise CorruptRecordError(base + pos, record_reason(exc)) from None
            physical = unpack_i64(buf, pos + _PHYSICAL_AT)[0]
            if physical != base + pos:
                raise CorruptRecordError(base + pos, f"record says it is at offset {physical}")
            self.end = pos
            yield pos, size
            pos += size
        self.end = pos
        self.complete = pos == seg_end


class Dispatcher:
    """Checks that replayed records continue their queues, then writes their entries.

    Checks run ahead of :meth:`apply` (``append_raw`` validates a whole batch first; recovery
    applies in chunks): the dispatcher remembers the next offset of every queue it has checked
    records for.
    """

    __slots__ = ("_next", "_queues")

    def __init__(self, queues: ConsumeQueues) -> None:
        self._queues = queues
        self._next: dict[tuple[str, int], int] = {}

    def check(self, buf: Buffer, pos: int, size: int, offset: int) -> RecordInfo:
        """Decode what dispatch needs of the valid record at ``buf[pos:]`` (CommitLog
        ``offset``) and check its queue offset; raises :class:`CorruptRecordError`."""
        try:
            info = read_info(buf, pos, size)
        except (RecordError, UnicodeDecodeError, struct.error) as exc:
            raise CorruptRecordError(offset, f"undecodable record: {exc}") from None
        key = (info.topic, info.queue_id)
        expected = self._next.get(key)
        exact = True
        if expected is None:
            queue = self._queues.get(info.topic, info.queue_id)
            if queue is None:
                error = topic_error(info.topic) or queue_id_error(info.queue_id)
                if error is not None:
                    raise CorruptRecordError(offset, error)
                expected, exact = 0, False
            else:
                # An empty queue accepts any offset at or past its max (a replica that starts
                # mid-queue, a queue rebuilt from a log whose start was deleted).
                expected, exact = queue.max_offset, not queue.is_empty
        if info.queue_offset != expected and (exact or info.queue_offset < expected):
            raise CorruptRecordError(
                offset,
                f"queue offset {info.queue_offset} of {info.topic}:{info.queue_id} "
                f"does not follow {expected}",
            )
        self._next[key] = info.queue_offset + 1
        return info

    def reserve(self, infos: Sequence[RecordInfo]) -> None:
        """Allocate the ConsumeQueue segments the entries of ``infos`` need (may raise
        DiskFullError, writing nothing)."""
        for (topic, queue_id), (first, physical, _, _) in _group(infos).items():
            self._queues.get_or_create(topic, queue_id).reserve(first, len(physical))

    def apply(self, infos: Sequence[RecordInfo]) -> None:
        """Write the ConsumeQueue entries of checked records, one write per queue."""
        for (topic, queue_id), (first, physical, sizes, hashes) in _group(infos).items():
            queue = self._queues.get_or_create(topic, queue_id)
            queue.reserve(first, len(physical))
            queue.append(first, physical, sizes, hashes)


_Group = tuple[int, list[int], list[int], list[int]]


def _group(infos: Sequence[RecordInfo]) -> dict[tuple[str, int], _Group]:
    """Per queue: (first queue offset, CommitLog offsets, sizes, tag hashes), in order."""
    groups: dict[tuple[str, int], _Group] = {}
    for info in infos:
        key = (info.topic, info.queue_id)
        group = groups.get(key)
        if group is None:
            group = groups[key] = (info.queue_offset, [], [], [])
        group[1].append(info.physical_offset)
        group[2].append(info.size)
        group[3].append(info.tags_hash)
    return groups
