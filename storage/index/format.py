"""The index file format, pure: no files, no clocks.

One index file covers a contiguous CommitLog range ``[begin_offset, end_offset)`` and the store
times of its records ``[begin_timestamp, end_timestamp]``. The header's integers are big-endian,
the slots' and entries' little-endian (native integers on the machines the broker runs on)::

    header (64 bytes)
    0   4  magic             INDEX_MAGIC
    4   2  version           1
    6   2  flags             FLAG_CLEAN: the body CRC below is current; FLAG_SEALED: full
    8   4  slot_count
    12  4  max_entries
    16  4  entry_count
    20  8  begin_offset      CommitLog offset of the first record the file covers
    28  8  end_offset        every record below it is indexed ("indexed through")
    36  8  begin_timestamp   store time of the first entry (ms)
    44  8  end_timestamp     store time of the last entry (ms)
    52  4  body_crc          CRC32 of the slots and the used entries (FLAG_CLEAN only)
    56  4  header_crc        CRC32 of bytes [0, 56)
    60  4  reserved
    slots   slot_count x uint32: entry number + 1 of the newest entry in the slot, 0: none
    entries max_entries x 20 bytes:
        0  4  key_hash        :func:`key_hash` of topic and key
        4  8  physical_offset CommitLog offset of the record
        12 4  time_delta      store time - begin_timestamp (ms, saturating)
        16 4  previous        entry number + 1 of the next older entry in the slot, 0: none

An entry's ``previous`` and the slot heads are derived from the entries alone, so a file whose
CRC fails is never patched: it is rebuilt from the CommitLog.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Final

INDEX_MAGIC: Final = 0x524D5149  # "RMQI"
VERSION: Final = 1
FLAG_CLEAN: Final = 1
FLAG_SEALED: Final = 2
HEADER_SIZE: Final = 64
SLOT_SIZE: Final = 4
ENTRY_SIZE: Final = 20
MAX_TIME_DELTA: Final = 0xFFFFFFFF
PROP_KEYS_RAW: Final = b"KEYS\x01"
PROP_UNIQ_KEY_RAW: Final = b"UNIQ_KEY\x01"

_HEADER: Final = struct.Struct(">IHHIIIqqqqI")
_HEADER_CRC: Final = struct.Struct(">I")
_HEADER_CRC_AT: Final = _HEADER.size  # 56
SLOT: Final = struct.Struct("<I")
ENTRY: Final = struct.Struct("<IqII")
_ENTRIES: dict[int, struct.Struct] = {}


def entries_struct(count: int) -> struct.Struct:
    """``count`` entries back to back (one pack for a put's entries)."""
    packer = _ENTRIES.get(count)
    if packer is None:
        if len(_ENTRIES) >= 1024:
            _ENTRIES.clear()
        packer = _ENTRIES[count] = struct.Struct("<" + "IqII" * count)
    return packer


assert _HEADER.size == 56 and ENTRY.size == ENTRY_SIZE


class IndexFormatError(ValueError):
    """Bytes that are not a valid index file (header, sizes or CRC)."""


@dataclass(slots=True)
class Header:
    slot_count: int
    max_entries: int
    begin_offset: int
    end_offset: int
    entry_count: int = 0
    begin_timestamp: int = 0
    end_timestamp: int = 0
    flags: int = 0
    body_crc: int = 0

    @property
    def clean(self) -> bool:
        return bool(self.flags & FLAG_CLEAN)

    @property
    def sealed(self) -> bool:
        return bool(self.flags & FLAG_SEALED)


def file_size(slot_count: int, max_entries: int) -> int:
    return HEADER_SIZE + slot_count * SLOT_SIZE + max_entries * ENTRY_SIZE


def slot_position(slot: int) -> int:
    return HEADER_SIZE + slot * SLOT_SIZE


def entry_position(slot_count: int, number: int) -> int:
    """Byte position of entry ``number`` (0-based)."""
    return HEADER_SIZE + slot_count * SLOT_SIZE + number * ENTRY_SIZE


def body_end(slot_count: int, entry_count: int) -> int:
    """Where the used part of a file ends (what the body CRC covers, from HEADER_SIZE)."""
    return entry_position(slot_count, entry_count)


def encode_header(h: Header) -> bytes:
    raw = _HEADER.pack(
        INDEX_MAGIC,
        VERSION,
        h.flags,
        h.slot_count,
        h.max_entries,
        h.entry_count,
        h.begin_offset,
        h.end_offset,
        h.begin_timestamp,
        h.end_timestamp,
        h.body_crc,
    )
    return raw + _HEADER_CRC.pack(zlib.crc32(raw)) + bytes(HEADER_SIZE - _HEADER_CRC_AT - 4)


def decode_header(buf: bytes | bytearray | memoryview, size: int) -> Header:
    """The header of a file of ``size`` bytes; raises :class:`IndexFormatError` naming what is
    wrong (a torn or foreign header, sizes that do not add up)."""
    if size < HEADER_SIZE or len(buf) < HEADER_SIZE:
        raise IndexFormatError(f"{size} bytes: shorter than a header")
    (
        magic,
        version,
        flags,
        slot_count,
        max_entries,
        entry_count,
        begin_offset,
        end_offset,
        begin_ts,
        end_ts,
        body_crc,
    ) = _HEADER.unpack_from(buf, 0)
    if magic != INDEX_MAGIC:
        raise IndexFormatError(f"bad magic {magic:#x}")
    (crc,) = _HEADER_CRC.unpack_from(buf, _HEADER_CRC_AT)
    if zlib.crc32(bytes(buf[:_HEADER_CRC_AT])) != crc:
        raise IndexFormatError("header CRC mismatch")
    if version != VERSION:
        raise IndexFormatError(f"unknown version {version}")
    if slot_count < 1 or max_entries < 1 or file_size(slot_count, max_entries) != size:
        raise IndexFormatError(
            f"{slot_count} slots and {max_entries} entries do not make {size} bytes"
        )
    if not 0 <= entry_count <= max_entries:
        raise IndexFormatError(f"entry count {entry_count} outside 0..{max_entries}")
    if not 0 <= begin_offset <= end_offset:
        raise IndexFormatError(f"range [{begin_offset}, {end_offset}) is not a range")
    return Header(
        slot_count=slot_count,
        max_entries=max_entries,
        begin_offset=begin_offset,
        end_offset=end_offset,
        entry_count=entry_count,
        begin_timestamp=begin_ts,
        end_timestamp=end_ts,
        flags=flags,
        body_crc=body_crc,
    )


def body_crc(buf: bytes | bytearray | memoryview, slot_count: int, entry_count: int) -> int:
    return zlib.crc32(memoryview(buf)[HEADER_SIZE : body_end(slot_count, entry_count)])


def key_hash(topic_raw: bytes, key: bytes) -> int:
    """The 32-bit hash of (topic, key) an entry holds; equal hashes are confirmed against the
    record, so a collision costs a read, never a wrong answer."""
    return zlib.crc32(key, topic_seed(topic_raw))


def slot_of(hash_: int, slot_count: int) -> int:
    return hash_ % slot_count


def time_delta(store_timestamp: int, begin_timestamp: int) -> int:
    return max(0, min(MAX_TIME_DELTA, store_timestamp - begin_timestamp))


def record_keys(props_raw: bytes) -> list[bytes]:
    """The index keys of a record from its raw properties: each of ``KEYS`` split on spaces (as
    RocketMQ splits them), then ``UNIQ_KEY``; without duplicates, in that order."""
    if PROP_KEYS_RAW not in props_raw and PROP_UNIQ_KEY_RAW not in props_raw:
        return []
    keys = uniq = b""
    for item in props_raw.split(b"\x02"):
        name, sep, value = item.partition(b"\x01")
        if sep and name == b"KEYS":
            keys = value
        elif sep and name == b"UNIQ_KEY":
            uniq = value
    out: list[bytes] = []
    for k in keys.split(b" "):
        if k and k not in out:
            out.append(k)
    if uniq and uniq not in out:
        out.append(uniq)
    return out


def topic_seed(topic_raw: bytes) -> int:
    """The CRC state :func:`key_hash` continues from for every key of one topic."""
    return zlib.crc32(topic_raw + b"#")


def message_keys(keys: str, properties: Mapping[str, str]) -> list[bytes]:
    """The index keys of a message about to be stored (``keys`` is its KEYS property when
    set, else ``properties`` may hold one): what :func:`record_keys` will read from its
    record, in the same order."""
    text = keys or properties.get("KEYS", "")
    out = [text.encode()] if text and " " not in text else []
    if " " in text:
        for k in text.split(" "):
            raw = k.encode()
            if raw and raw not in out:
                out.append(raw)
    uniq = properties.get("UNIQ_KEY") if properties else None
    if uniq:
        raw = uniq.encode()
        if raw not in out:
            out.append(raw)
    return out


def keys_of(keys: str) -> list[str]:
    """A message's ``keys`` as the index splits them (space-separated, blanks dropped)."""
    return [k for k in keys.split(" ") if k]


def iter_chain(
    buf: bytes | bytearray | memoryview, slot_count: int, entry_count: int, slot: int
) -> Iterator[tuple[int, int, int]]:
    """(key hash, physical offset, time delta) of every entry in ``slot``, newest first. Stops
    at a link that does not point to an older used entry (a chain is strictly descending), so a
    damaged file cannot loop."""
    (head,) = SLOT.unpack_from(buf, slot_position(slot))
    limit = entry_count
    while 0 < head <= limit:
        number = head - 1
        hash_, physical, delta, previous = ENTRY.unpack_from(
            buf, entry_position(slot_count, number)
        )
        yield hash_, physical, delta
        limit = number
        head = previous
