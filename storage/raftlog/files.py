"""Small durable files: the hard state and snapshots, each written atomically.

Atomic replacement: write ``NAME.tmp``, fsync it, rename it over ``NAME``, fsync the directory.
A reader therefore sees the old file or the new one, never a mix; each file also ends with a
CRC32 of everything before it, so damage is detected rather than trusted.

Hard state file ``hardstate``: two slots of ``HARD_STATE_SLOT`` bytes, written in place and
in turn (a term or vote change costs one ``fdatasync`` of a file whose size never changes: no
new file, no rename, no directory fsync). Each slot (big-endian, zero-padded)::

    magic "RAFTHS02" | seq u64 | term u64 | commit u64 | vote length u16 | vote UTF-8 | crc32 u32

The valid slot with the higher ``seq`` holds the hard state; a write torn by a crash damages
only the slot it was writing, never the other one, which still holds the state before it (that
write had not returned, so nothing was promised on it). The first version of the file was one
record, replaced atomically (read still, then rewritten as slots)::

    magic "RAFTHS01" | term u64 | commit u64 | vote length u16 | vote UTF-8 | crc32 u32

Commit hint file ``commit`` (rewritten in place, never fsynced; advisory)::

    magic "RAFTCM01" | commit u64 | crc32 u32

Snapshot file ``snap/<index:020d>-<term:020d>.snap``::

    magic "RAFTSNP1" | index u64 | term u64 | voters: count u16, (len u16, UTF-8)* |
    learners: count u16, (len u16, UTF-8)* | data length u64 | data | crc32 u32
"""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path
from typing import Final

from protocol.raft_types import ConfState, HardState, Snapshot, SnapshotMeta

HARD_STATE_MAGIC: Final = b"RAFTHS01"
HARD_STATE_SLOT_MAGIC: Final = b"RAFTHS02"
HARD_STATE_SLOT: Final = 512
"""Bytes per hard state slot: one disk sector; a node id is at most 255 bytes, so every record
fits."""
COMMIT_MAGIC: Final = b"RAFTCM01"
SNAPSHOT_MAGIC: Final = b"RAFTSNP1"
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_TWO_U64 = struct.Struct(">QQ")


class CorruptFile(Exception):
    """A small file failed its magic, layout or CRC check."""


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, fsync: bool = True) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        if fsync:
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if fsync:
        fsync_dir(path.parent)


def _with_crc(body: bytes) -> bytes:
    return body + _U32.pack(zlib.crc32(body))


def _check_crc(raw: bytes, magic: bytes) -> bytes:
    if len(raw) < len(magic) + _U32.size or raw[: len(magic)] != magic:
        raise CorruptFile("bad magic or truncated file")
    body = raw[: -_U32.size]
    (crc,) = _U32.unpack_from(raw, len(raw) - _U32.size)
    if zlib.crc32(body) != crc:
        raise CorruptFile("CRC mismatch")
    return body


def _pack_str(value: str) -> bytes:
    raw = value.encode()
    if len(raw) > 0xFFFF:
        raise ValueError("string too long")
    return _U16.pack(len(raw)) + raw


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes, pos: int) -> None:
        self.data = data
        self.pos = pos

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise CorruptFile("truncated field")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def u16(self) -> int:
        (value,) = _U16.unpack(self.take(_U16.size))
        return int(value)

    def u64(self) -> int:
        (value,) = _U64.unpack(self.take(_U64.size))
        return int(value)

    def text(self) -> str:
        try:
            return self.take(self.u16()).decode()
        except UnicodeDecodeError:
            raise CorruptFile("bad UTF-8") from None


def encode_hard_state(hs: HardState) -> bytes:
    body = HARD_STATE_MAGIC + _TWO_U64.pack(hs.term, hs.commit) + _pack_str(hs.vote or "")
    return _with_crc(body)


def decode_hard_state(raw: bytes) -> HardState:
    reader = _Reader(_check_crc(raw, HARD_STATE_MAGIC), len(HARD_STATE_MAGIC))
    term = reader.u64()
    commit = reader.u64()
    vote = reader.text()
    return HardState(term=term, vote=vote or None, commit=commit)


def encode_hard_state_slot(hs: HardState, seq: int) -> bytes:
    """One slot of the ``hardstate`` file: ``seq`` orders the writes (the higher one wins)."""
    body = (
        HARD_STATE_SLOT_MAGIC
        + _U64.pack(seq)
        + _TWO_U64.pack(hs.term, hs.commit)
        + _pack_str(hs.vote or "")
    )
    record = _with_crc(body)
    if len(record) > HARD_STATE_SLOT:
        raise ValueError(f"hard state record of {len(record)} bytes does not fit a slot")
    return record.ljust(HARD_STATE_SLOT, b"\0")


def _decode_slot(raw: bytes) -> tuple[int, HardState]:
    """``(seq, hard state)`` of one slot; CorruptFile when it fails its checks."""
    if raw[: len(HARD_STATE_SLOT_MAGIC)] != HARD_STATE_SLOT_MAGIC:
        raise CorruptFile("bad magic")
    reader = _Reader(raw, len(HARD_STATE_SLOT_MAGIC))
    seq = reader.u64()
    term = reader.u64()
    commit = reader.u64()
    vote = reader.text()
    end = reader.pos
    (crc,) = _U32.unpack(reader.take(_U32.size))
    if zlib.crc32(raw[:end]) != crc:
        raise CorruptFile("CRC mismatch")
    return seq, HardState(term=term, vote=vote or None, commit=commit)


def decode_hard_state_file(raw: bytes) -> tuple[int, HardState]:
    """``(seq, hard state)`` of a ``hardstate`` file of either version: the newest slot (``seq``
    0 for the first version's single record). CorruptFile when a slot that was written fails
    its checks: a slot damaged after its write was flushed cannot be told from a write torn by
    a power cut, and taking the other slot's older term and vote could let this node vote twice
    in a term. A slot is one 512-byte sector written in place, which the disk writes whole."""
    if raw[: len(HARD_STATE_MAGIC)] == HARD_STATE_MAGIC:
        return 0, decode_hard_state(raw)
    if len(raw) != 2 * HARD_STATE_SLOT:
        raise CorruptFile(f"{len(raw)} bytes, not two slots of {HARD_STATE_SLOT}")
    best: tuple[int, HardState] | None = None
    for i in range(2):
        raw_slot = raw[i * HARD_STATE_SLOT : (i + 1) * HARD_STATE_SLOT]
        if not any(raw_slot):
            continue  # never written
        try:
            found = _decode_slot(raw_slot)
        except CorruptFile as exc:
            raise CorruptFile(f"slot {i}: {exc}") from None
        if best is None or found[0] > best[0]:
            best = found
    if best is None:
        raise CorruptFile("no hard state in either slot")
    return best


def encode_commit(commit: int) -> bytes:
    return _with_crc(COMMIT_MAGIC + _U64.pack(commit))


def decode_commit(raw: bytes) -> int:
    reader = _Reader(_check_crc(raw, COMMIT_MAGIC), len(COMMIT_MAGIC))
    commit = reader.u64()
    if reader.pos != len(raw) - _U32.size:
        raise CorruptFile("trailing bytes")
    return commit


def encode_snapshot(snapshot: Snapshot) -> bytes:
    meta = snapshot.meta
    parts = [SNAPSHOT_MAGIC, _TWO_U64.pack(meta.index, meta.term)]
    for group in (meta.conf_state.voters, meta.conf_state.learners):
        parts.append(_U16.pack(len(group)))
        parts.extend(_pack_str(node_id) for node_id in group)
    parts.append(_U64.pack(len(snapshot.data)))
    parts.append(snapshot.data)
    return _with_crc(b"".join(parts))


def decode_snapshot(raw: bytes) -> Snapshot:
    body = _check_crc(raw, SNAPSHOT_MAGIC)
    reader = _Reader(body, len(SNAPSHOT_MAGIC))
    index = reader.u64()
    term = reader.u64()
    voters = tuple(reader.text() for _ in range(reader.u16()))
    learners = tuple(reader.text() for _ in range(reader.u16()))
    data = reader.take(reader.u64())
    if reader.pos != len(body):
        raise CorruptFile("trailing bytes")
    try:
        conf = ConfState(voters=voters, learners=learners)
    except ValueError as exc:
        raise CorruptFile(str(exc)) from None
    return Snapshot(meta=SnapshotMeta(index=index, term=term, conf_state=conf), data=data)


def snapshot_name(index: int, term: int) -> str:
    return f"{index:020d}-{term:020d}.snap"


def parse_snapshot_name(name: str) -> tuple[int, int] | None:
    stem, dot, ext = name.partition(".")
    left, dash, right = stem.partition("-")
    if dot != "." or ext != "snap" or dash != "-":
        return None
    if len(left) != 20 or len(right) != 20 or not (left.isdigit() and right.isdigit()):
        return None
    return int(left), int(right)
