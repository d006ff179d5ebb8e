"""The epoch file (RocketMQ's EpochFileCache): which master epoch wrote which CommitLog range.

Each entry ``(epoch, startOffset)`` says that epoch began at that CommitLog offset. Entries are
ascending: epochs strictly increase, start offsets never decrease (an epoch in which nothing was
written has an empty range). An entry ends where the next one starts; the last one ends at the
node's max offset, which the caller passes in (:meth:`EpochFile.entries_with_end`).

On disk it is ``<data_dir>/epochFileCheckpoint``, written through :mod:`storage.small_file`
(temp file, fsync, the previous version renamed to ``.bak``, rename, directory fsync; a CRC32
framing detects a torn or corrupt file, and the ``.bak`` is read instead). The payload is text,
as RocketMQ writes it::

    <number of entries>\\n
    <epoch>-<startOffset>\\n      one line per entry, ascending

An empty history is ``0\\n`` and reloads as empty. Every mutating call returns only after the new
content is durable, so a caller that appends an epoch entry before appending that epoch's bytes
never finds bytes on disk without their entry. The methods do blocking file I/O; the class is not
thread-safe.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from protocol.ha import EpochEntry, EpochRange, check_epoch_entries, with_end_offsets
from storage.errors import StoreError
from storage.small_file import read_atomic, write_atomic

FILE_NAME: Final = "epochFileCheckpoint"


class EpochFileError(StoreError):
    """The epoch file (and its ``.bak``) cannot be read, or a change would break its order."""


def encode_entries(entries: tuple[EpochEntry, ...]) -> bytes:
    lines = [str(len(entries))] + [f"{e.epoch}-{e.start_offset}" for e in entries]
    return ("\n".join(lines) + "\n").encode()


def decode_entries(payload: bytes) -> tuple[EpochEntry, ...]:
    """Parse a payload; raises :class:`EpochFileError` if it is not a valid ascending history."""
    try:
        lines = payload.decode("ascii").split("\n")
        if lines[-1] != "":
            raise ValueError("missing final newline")
        count = int(lines[0])
        body = lines[1:-1]
        if count != len(body):
            raise ValueError(f"header says {count} entries, found {len(body)}")
        entries = []
        for line in body:
            epoch, sep, start = line.partition("-")
            if not sep:
                raise ValueError(f"bad entry line {line!r}")
            entries.append(EpochEntry(epoch=int(epoch), start_offset=int(start)))
        result = tuple(entries)
        check_epoch_entries(result)
    except (UnicodeDecodeError, ValueError) as exc:
        raise EpochFileError(f"invalid epoch file content: {exc}") from None
    return result


class EpochFile:
    """The node's epoch history, loaded from ``data_dir`` and persisted on every change."""

    __slots__ = ("_entries", "_path")

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        """Load the history (empty when no file exists yet).

        Raises :class:`EpochFileError` when a file exists but neither it nor its ``.bak``
        verifies: an unreadable history is an operator matter, never silently an empty one.
        """
        self._path = Path(data_dir) / FILE_NAME
        try:
            payload = read_atomic(self._path)
        except StoreError as exc:
            raise EpochFileError(str(exc)) from None
        self._entries: tuple[EpochEntry, ...] = () if payload is None else decode_entries(payload)

    @property
    def path(self) -> Path:
        return self._path

    def entries(self) -> tuple[EpochEntry, ...]:
        return self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def last_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    def last_epoch(self) -> int | None:
        """The newest epoch, or None when the history is empty."""
        return self._entries[-1].epoch if self._entries else None

    def find(self, epoch: int) -> EpochEntry | None:
        for e in reversed(self._entries):
            if e.epoch == epoch:
                return e
            if e.epoch < epoch:
                break
        return None

    def entries_with_end(self, max_offset: int) -> tuple[EpochRange, ...]:
        """Every entry with its end offset; the last ends at ``max_offset``."""
        return with_end_offsets(self._entries, max_offset)

    def append(self, epoch: int, start_offset: int) -> bool:
        """Append ``(epoch, start_offset)`` durably; False when it already is the last entry.

        Raises :class:`EpochFileError` unless ``epoch`` is above the last epoch and
        ``start_offset`` is not below the last start offset.
        """
        entry = EpochEntry(epoch=epoch, start_offset=start_offset)
        last = self.last_entry()
        if last is not None:
            if entry == last:
                return False
            if epoch <= last.epoch:
                raise EpochFileError(f"epoch {epoch} is not above the last epoch {last.epoch}")
            if start_offset < last.start_offset:
                raise EpochFileError(
                    f"epoch {epoch} would start at {start_offset}, before epoch {last.epoch} "
                    f"at {last.start_offset}"
                )
        self._store((*self._entries, entry))
        return True

    def truncate_suffix_from_offset(self, offset: int) -> None:
        """Drop every entry starting at or after ``offset`` (log truncation to ``offset``)."""
        self._store(tuple(e for e in self._entries if e.start_offset < offset))

    def truncate_from_epoch(self, epoch: int) -> None:
        """Drop every entry whose epoch is ``epoch`` or above (on becoming master of ``epoch``)."""
        self._store(tuple(e for e in self._entries if e.epoch < epoch))

    def flush(self) -> None:
        """Write the current history even if unchanged (e.g. to repair a primary from .bak)."""
        write_atomic(self._path, encode_entries(self._entries))

    def _store(self, entries: tuple[EpochEntry, ...]) -> None:
        if entries == self._entries:
            return
        write_atomic(self._path, encode_entries(entries))
        self._entries = entries
