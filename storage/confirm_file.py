"""The confirm offset kept in place: ``<data_dir>/confirm``, rewritten in memory each time the
offset moves, so a crash of the broker's process loses none of it.

The confirm offset is what every SyncStateSet member acknowledged; a returning member refuses to
truncate below it (``broker.ha.truncation``). The checkpoint keeps it too, but the checkpoint is
written at each flush (``flush_interval_ms``), so on its own it could be up to one flush behind
what was acknowledged, and a replica killed in that window would later cut acknowledged
messages after an unclean election. This file closes that window: it is mapped into memory and
its offset rewritten on every change, which the kernel keeps when the process dies (kill -9
included), as it keeps the CommitLog's unflushed pages. It is not fsynced
on each change: after a crash of the machine itself it may be as old as its last write-back, as
unflushed CommitLog bytes may be lost; the store then takes the larger of it and the
checkpoint's value, never above the recovered log's end.

Layout (40 bytes, big-endian)::

    0   4  magic   b"RMQC"
    4   4  zero
    8  16  slot A  offset (int64), CRC32 of those 8 bytes (uint32), 4 zero bytes
    24 16  slot B  the same

A change writes slot A, then slot B. A process killed in the middle of one slot's write leaves
that slot failing its CRC and the other whole (the new value in A, or the one before in B); the
reader takes the larger whole slot (the store clamps it at the log's end, which a truncation
lowered before the offset).
"""

from __future__ import annotations

import mmap
import os
import struct
import zlib
from pathlib import Path
from typing import Final

from storage.small_file import fsync_dir

MAGIC: Final = b"RMQC"
_HEAD: Final = struct.Struct(">4sI")
_SLOT: Final = struct.Struct(">qII")
_SLOTS_AT: Final = (_HEAD.size, _HEAD.size + _SLOT.size)
SIZE: Final = _HEAD.size + 2 * _SLOT.size


def _slot(offset: int) -> bytes:
    value = offset.to_bytes(8, "big", signed=True)
    return value + zlib.crc32(value).to_bytes(4, "big") + bytes(4)


class ConfirmFileError(Exception):
    """The file exists but is not a confirm file (its size or magic is wrong)."""


def read_confirm_file(path: Path) -> int | None:
    """The offset the file at ``path`` holds; None when there is none. Raises
    :class:`ConfirmFileError` when the file is not one."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    if len(raw) != SIZE or raw[:4] != MAGIC:
        raise ConfirmFileError(
            f"{path} is not a confirm offset file ({len(raw)} bytes, starting {raw[:4]!r})"
        )
    whole: list[int] = []
    for at in _SLOTS_AT:
        offset, crc, _ = _SLOT.unpack_from(raw, at)
        if crc == zlib.crc32(raw[at : at + 8]) and offset >= 0:
            whole.append(offset)
    if not whole:
        raise ConfirmFileError(f"{path}: neither copy of the confirm offset is whole")
    return max(whole)


class ConfirmFile:
    """The mapped file, open for writing (:meth:`open`); :meth:`write` on every change."""

    __slots__ = ("_map", "path")

    def __init__(self, path: Path, mapped: mmap.mmap) -> None:
        self.path = path
        self._map = mapped

    @classmethod
    def open(cls, path: Path, offset: int) -> ConfirmFile:
        """Make the file hold ``offset`` (created, or rewritten whole when it was not a confirm
        file) and map it. A new file is written to a temporary name, fsynced and renamed, so
        it is never seen half made."""
        try:
            whole = read_confirm_file(path) is not None
        except ConfirmFileError:
            whole = False
        if not whole:
            tmp = path.with_name(path.name + ".tmp")
            with tmp.open("wb") as f:
                f.write(_HEAD.pack(MAGIC, 0) + _slot(offset) * 2)
                f.flush()
                os.fsync(f.fileno())
            tmp.replace(path)
            fsync_dir(path.parent)
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        try:
            mapped = mmap.mmap(fd, SIZE)
        finally:
            os.close(fd)
        made = cls(path, mapped)
        made.write(offset)
        return made

    def write(self, offset: int) -> None:
        """The offset now: slot A, then slot B, in the mapped page."""
        slot = _slot(offset)
        a, b = _SLOTS_AT
        self._map[a : a + _SLOT.size] = slot
        self._map[b : b + _SLOT.size] = slot

    def close(self) -> None:
        self._map.close()
