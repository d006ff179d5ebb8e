"""Cutting the master's CommitLog into transfer batches that never cross an epoch boundary.

A batch starts at the next offset the slave needs and ends at the first of: ``max_batch_bytes``
later, the end of the epoch that offset belongs to (the next epoch entry's start), the master's
max offset. Every byte of a batch therefore belongs to one epoch, and the batch is labelled with
it (``epoch``, ``epoch_start_offset``) so the slave can record the epoch before the bytes.

Batches may also be cut at record boundaries, so a slave never holds half a record:

- :func:`next_batch` takes an optional ``align(start, limit) -> end`` callback that returns the
  last record boundary in ``(start, limit]``, or, when the record at ``start`` is longer than
  ``limit - start``, that record's end (which must not pass ``start + Batch.max_length``);
- or the driver reads ``Batch.length`` bytes and keeps :func:`record_aligned_length` of them.

Epoch ends and the master's max offset are record boundaries (a master appends whole records,
and becomes master at its max offset after cutting any torn tail), so aligned batches stay
within their epoch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from protocol.ha import Buffer, EpochEntry, epoch_index_at
from protocol.message import BLANK_MAGIC, MESSAGE_MAGIC, peek_prefix

__all__ = [
    "DEFAULT_MAX_BATCH_BYTES",
    "Batch",
    "RecordBoundary",
    "epoch_at",
    "next_batch",
    "record_aligned_length",
]

DEFAULT_MAX_BATCH_BYTES: Final = 4 * 1024 * 1024

RecordBoundary = Callable[[int, int], int]
"""``(start, limit) -> end``: the last record boundary in ``(start, limit]``, or the end of the
record at ``start`` when that record is longer than ``limit - start``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Batch:
    """Bytes ``[offset, offset + length)`` of epoch ``epoch``, to send with ``confirm_offset``.

    ``max_length`` is how far the batch could grow without leaving its epoch or the log; a
    driver that must extend a batch to a whole record stays within it.
    """

    offset: int
    epoch: int
    epoch_start_offset: int
    length: int
    confirm_offset: int
    max_length: int

    def __init__(
        self,
        *,
        offset: int,
        epoch: int,
        epoch_start_offset: int,
        length: int,
        confirm_offset: int,
        max_length: int,
    ) -> None:
        # Written out, as protocol.message.RecordInfo's is (frozen): a native constructor
        # compiled, one per transfer batch.
        object.__setattr__(self, "offset", offset)
        object.__setattr__(self, "epoch", epoch)
        object.__setattr__(self, "epoch_start_offset", epoch_start_offset)
        object.__setattr__(self, "length", length)
        object.__setattr__(self, "confirm_offset", confirm_offset)
        object.__setattr__(self, "max_length", max_length)

    @property
    def end_offset(self) -> int:
        return self.offset + self.length


def epoch_at(entries: Sequence[EpochEntry], offset: int) -> EpochEntry:
    """The entry the byte at ``offset`` belongs to; ValueError when it precedes every epoch."""
    i = epoch_index_at(entries, offset)
    if i < 0:
        raise ValueError(f"offset {offset} precedes every epoch entry")
    return entries[i]


def next_batch(
    from_offset: int,
    max_offset: int,
    epoch_entries: Sequence[EpochEntry],
    max_batch_bytes: int,
    confirm_offset: int,
    *,
    align: RecordBoundary | None = None,
) -> Batch | None:
    """The next batch starting at ``from_offset``, or None when there is nothing to send.

    Raises ValueError on inputs a correct master never has: ``from_offset`` beyond
    ``max_offset`` or before the first epoch, a non-positive ``max_batch_bytes``, or an
    ``align`` answer outside the batch's limits.
    """
    if max_batch_bytes <= 0:
        raise ValueError("max_batch_bytes must be positive")
    if from_offset > max_offset:
        raise ValueError(f"from_offset {from_offset} is beyond max offset {max_offset}")
    if from_offset == max_offset:
        return None
    i = epoch_index_at(epoch_entries, from_offset)
    if i < 0:
        raise ValueError(f"offset {from_offset} precedes every epoch entry")
    entry = epoch_entries[i]
    # The next entry starts strictly after from_offset (i is the last one at or before it).
    epoch_end = epoch_entries[i + 1].start_offset if i + 1 < len(epoch_entries) else max_offset
    hard_end = min(epoch_end, max_offset)
    end = min(from_offset + max_batch_bytes, hard_end)
    if align is not None:
        aligned = align(from_offset, end)
        if not from_offset < aligned <= hard_end:
            raise ValueError(
                f"record boundary {aligned} for batch at {from_offset} is outside "
                f"({from_offset}, {hard_end}]"
            )
        end = aligned
    return Batch(
        offset=from_offset,
        epoch=entry.epoch,
        epoch_start_offset=entry.start_offset,
        length=end - from_offset,
        confirm_offset=confirm_offset,
        max_length=hard_end - from_offset,
    )


def record_aligned_length(buf: Buffer) -> int:
    """Length of the whole records (blank tails included) at the start of ``buf``.

    0 means the first record is longer than ``buf``: read ``peek_prefix(buf, 0)[0]`` bytes
    instead. Raises ValueError on bytes that are not records (bad magic or size).
    """
    pos = 0
    end = len(buf)
    while end - pos >= 8:
        size, magic = peek_prefix(buf, pos)
        if magic not in (MESSAGE_MAGIC, BLANK_MAGIC) or size < 8:
            raise ValueError(f"no record at buffer position {pos} (magic {magic:#x}, size {size})")
        if size > end - pos:
            break
        pos += size
    return pos
