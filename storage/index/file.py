"""One index file: a mapped :class:`~storage.segment.Segment` in the layout of
:mod:`storage.index.format`, named by the CommitLog offset it begins at.

The header on disk is rewritten only when the file is opened for writing (flags cleared: the
body CRC no longer holds), sealed or closed (count, range, times and body CRC current, then
fsynced); between those the counts live here. A file is therefore trusted on open only with its
FLAG_CLEAN set and a body CRC that matches; anything else is rebuilt from the CommitLog.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from storage.index import format as fmt
from storage.segment import Segment


class IndexFile:
    __slots__ = ("_entries_at", "_slots", "header", "segment")

    def __init__(self, segment: Segment, header: fmt.Header) -> None:
        self.segment = segment
        self.header = header
        self._entries_at = fmt.entry_position(header.slot_count, 0)
        # The slots as native uint32s (they are little-endian on disk).
        self._slots: memoryview | None = (
            segment.view[fmt.HEADER_SIZE : self._entries_at].cast("I")
            if sys.byteorder == "little"
            else None
        )

    # -- lifecycle ---------------------------------------------------------------------------

    @classmethod
    def create(
        cls, directory: Path, begin_offset: int, slot_count: int, max_entries: int
    ) -> IndexFile:
        """A new empty file covering nothing from ``begin_offset`` (may raise DiskFullError)."""
        seg = Segment.create(directory, begin_offset, fmt.file_size(slot_count, max_entries))
        index = cls(seg, fmt.Header(slot_count, max_entries, begin_offset, begin_offset))
        index.write_header()
        return index

    @classmethod
    def load(cls, path: Path, begin_offset: int) -> IndexFile:
        """Open an existing file and check it: raises :class:`~storage.index.format.
        IndexFormatError` (the caller rebuilds the file) unless its header verifies, it was
        closed cleanly, its body CRC matches and it begins where its name says."""
        seg = Segment.open(path, begin_offset)
        try:
            header = fmt.decode_header(seg.view, seg.size)
            if header.begin_offset != begin_offset:
                raise fmt.IndexFormatError(
                    f"header begins at {header.begin_offset}, the name at {begin_offset}"
                )
            if not header.clean:
                raise fmt.IndexFormatError("not closed cleanly")
            crc = fmt.body_crc(seg.view, header.slot_count, header.entry_count)
            if crc != header.body_crc:
                raise fmt.IndexFormatError("body CRC mismatch")
        except BaseException:
            seg.close()
            raise
        return cls(seg, header)

    def write_header(self) -> None:
        self.segment.view[: fmt.HEADER_SIZE] = fmt.encode_header(self.header)

    def open_for_writing(self) -> None:
        """Clear FLAG_CLEAN on disk before the first new entry (a crash from now on is seen)."""
        self.header.flags &= ~fmt.FLAG_CLEAN
        self.write_header()
        self.segment.fsync()

    def finish(self, *, seal: bool) -> None:
        """Write the current header with FLAG_CLEAN and the body CRC (and FLAG_SEALED with
        ``seal``: no entry is added any more), then fsync."""
        h = self.header
        h.body_crc = fmt.body_crc(self.segment.view, h.slot_count, h.entry_count)
        h.flags |= fmt.FLAG_CLEAN | (fmt.FLAG_SEALED if seal else 0)
        self.write_header()
        self.segment.fsync()

    def close(self) -> None:
        if self._slots is not None:
            self._slots.release()
            self._slots = None
        self.segment.close()

    def delete(self) -> None:
        self.close()
        self.segment.unlink()

    # -- contents ----------------------------------------------------------------------------

    @property
    def begin_offset(self) -> int:
        return self.header.begin_offset

    @property
    def end_offset(self) -> int:
        return self.header.end_offset

    @property
    def full(self) -> bool:
        return self.header.entry_count >= self.header.max_entries

    def room(self) -> int:
        return self.header.max_entries - self.header.entry_count

    def add(self, hashes: Sequence[int], offsets: Sequence[int], store_timestamp: int) -> None:
        """Append one entry per (hash, CommitLog offset), all stored at ``store_timestamp``
        (the caller checked :meth:`room`). The send path's inner loop: kept flat."""
        h = self.header
        first = number = h.entry_count
        if number == 0:
            h.begin_timestamp = store_timestamp
        slot_count = h.slot_count
        delta = fmt.time_delta(store_timestamp, h.begin_timestamp)
        slots = self._slots
        flat: list[int] = []
        extend = flat.extend
        if slots is not None:
            for hash_, physical in zip(hashes, offsets, strict=True):
                slot = hash_ % slot_count
                extend((hash_, physical, delta, slots[slot]))
                number += 1
                slots[slot] = number
        else:  # a big-endian host: the slots through struct
            view = self.segment.view
            for hash_, physical in zip(hashes, offsets, strict=True):
                slot_at = fmt.HEADER_SIZE + (hash_ % slot_count) * fmt.SLOT_SIZE
                extend((hash_, physical, delta, fmt.SLOT.unpack_from(view, slot_at)[0]))
                number += 1
                fmt.SLOT.pack_into(view, slot_at, number)
        fmt.entries_struct(number - first).pack_into(
            self.segment.view, self._entries_at + first * fmt.ENTRY_SIZE, *flat
        )
        h.entry_count = number
        if store_timestamp > h.end_timestamp:
            h.end_timestamp = store_timestamp

    def add_one(self, hash_: int, physical_offset: int, store_timestamp: int) -> None:
        """:meth:`add` for one entry (a single send's)."""
        h = self.header
        number = h.entry_count
        if number == 0:
            h.begin_timestamp = store_timestamp
        slot = hash_ % h.slot_count
        slots = self._slots
        if slots is not None:
            previous = slots[slot]
            slots[slot] = number + 1
        else:
            slot_at = fmt.HEADER_SIZE + slot * fmt.SLOT_SIZE
            (previous,) = fmt.SLOT.unpack_from(self.segment.view, slot_at)
            fmt.SLOT.pack_into(self.segment.view, slot_at, number + 1)
        fmt.ENTRY.pack_into(
            self.segment.view,
            self._entries_at + number * fmt.ENTRY_SIZE,
            hash_,
            physical_offset,
            fmt.time_delta(store_timestamp, h.begin_timestamp),
            previous,
        )
        h.entry_count = number + 1
        if store_timestamp > h.end_timestamp:
            h.end_timestamp = store_timestamp

    def lookup(self, hash_: int, begin_ms: int, end_ms: int) -> Iterator[tuple[int, int]]:
        """(physical offset, store time) of the entries with ``hash_`` stored within
        ``[begin_ms, end_ms]``, newest first."""
        h = self.header
        slot = fmt.slot_of(hash_, h.slot_count)
        base = h.begin_timestamp
        for entry_hash, physical, delta in fmt.iter_chain(
            self.segment.view, h.slot_count, h.entry_count, slot
        ):
            if entry_hash != hash_:
                continue
            stored = base + delta
            if begin_ms <= stored <= end_ms:
                yield physical, stored

    def overlaps(self, begin_ms: int, end_ms: int) -> bool:
        h = self.header
        return h.entry_count > 0 and h.begin_timestamp <= end_ms and begin_ms <= h.end_timestamp
