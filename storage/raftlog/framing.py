"""Entry framing in log segments, and the scan that finds where a segment stops being valid.

Segment file: an 8-byte magic ``RAFTSEG1`` then entries back to back. One entry (big-endian)::

    +-----------+-----------+-----------+------------+----------+-------------+
    | length u32| crc32 u32 | term u64  | index u64  | type u8  | data ...    |
    +-----------+-----------+-----------+------------+----------+-------------+
                            |<----------- length bytes, covered by crc ------->|

``length`` = 17 + len(data). An entry never crosses a segment; a segment is named by the index
of its first entry, zero-padded to 20 digits (``00000000000000000001.log``), so ``ls`` sorts it.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Final

from protocol.raft_types import Entry, EntryType

SEGMENT_MAGIC: Final = b"RAFTSEG1"
FRAME_HEAD: Final = struct.Struct(">II")
ENTRY_HEAD: Final = struct.Struct(">QQB")
MAX_ENTRY_BYTES: Final = 256 << 20
_ENTRY_TYPES: Final = frozenset(int(t) for t in EntryType)


def encode_entry(entry: Entry) -> bytes:
    body = ENTRY_HEAD.pack(entry.term, entry.index, int(entry.type)) + entry.data
    return FRAME_HEAD.pack(len(body), zlib.crc32(body)) + body


@dataclass(frozen=True, slots=True, kw_only=True)
class ScanResult:
    entries: list[Entry]
    offsets: list[int]
    """File offset of each entry's frame."""
    valid_bytes: int
    """Bytes from the start of the file that hold a valid header and whole, valid entries."""
    error: str | None
    """Why the scan stopped before the end of the data (None: the data ended cleanly)."""


def scan_segment(data: bytes, first_index: int) -> ScanResult:
    """Decode entries until the data ends or the first torn, corrupt or out-of-sequence entry."""
    entries: list[Entry] = []
    offsets: list[int] = []
    if len(data) < len(SEGMENT_MAGIC) or data[: len(SEGMENT_MAGIC)] != SEGMENT_MAGIC:
        reason = "torn segment header" if len(data) < len(SEGMENT_MAGIC) else "bad segment magic"
        return ScanResult(entries=entries, offsets=offsets, valid_bytes=0, error=reason)
    pos = len(SEGMENT_MAGIC)
    end = len(data)
    expect = first_index
    error: str | None = None
    while pos < end:
        if end - pos < FRAME_HEAD.size:
            error = f"torn entry header at offset {pos}"
            break
        length, crc = FRAME_HEAD.unpack_from(data, pos)
        if length < ENTRY_HEAD.size or length > MAX_ENTRY_BYTES:
            error = f"bad entry length {length} at offset {pos}"
            break
        body_start = pos + FRAME_HEAD.size
        if body_start + length > end:
            error = f"torn entry at offset {pos}"
            break
        body = data[body_start : body_start + length]
        if zlib.crc32(body) != crc:
            error = f"CRC mismatch at offset {pos}"
            break
        term, index, kind = ENTRY_HEAD.unpack_from(body, 0)
        if index != expect:
            error = f"entry index {index} at offset {pos}, expected {expect}"
            break
        if kind not in _ENTRY_TYPES:
            error = f"unknown entry type {kind} at offset {pos}"
            break
        entries.append(
            Entry(term=term, index=index, type=EntryType(kind), data=body[ENTRY_HEAD.size :])
        )
        offsets.append(pos)
        pos = body_start + length
        expect += 1
    return ScanResult(entries=entries, offsets=offsets, valid_bytes=pos, error=error)


def segment_name(first_index: int) -> str:
    return f"{first_index:020d}.log"


def parse_segment_name(name: str) -> int | None:
    stem, dot, ext = name.partition(".")
    if dot != "." or ext != "log" or len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem)
