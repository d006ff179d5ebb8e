"""Small files that must never be seen half-written: checkpoint, topic config, consumer offsets.

On-disk layout (big-endian)::

    0  4  magic   b"RMQS"
    4  4  length  uint32, payload bytes
    8  4  crc     CRC32 of the payload
    12 n  payload

A write goes to ``<name>.tmp``, is fsynced, the current primary (if it verifies) is renamed to
``<name>.bak``, the temp file is renamed over the primary and the directory is fsynced. Every
rename is atomic, so at any crash point a reader finds either the new content, or no primary and
the previous content in ``.bak``. A torn temp file is never read.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import struct
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Final

import structlog

from storage.errors import StoreError

MAGIC: Final = b"RMQS"
_HEADER = struct.Struct(">4sII")

log = structlog.get_logger(__name__)


def backup_path(path: Path) -> Path:
    return path.with_name(path.name + ".bak")


def temp_path(path: Path) -> Path:
    return path.with_name(path.name + ".tmp")


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _libc_syncfs() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        func: Callable[[int], int] = libc.syncfs
    except (OSError, AttributeError):
        return None
    return func


def reports_write_back_errors(release: str) -> bool:
    """Linux ``release`` 5.8 or later: only from there does ``syncfs(2)`` return the write-back
    errors of the file system's files (before, it returned 0 whatever failed)."""
    parts = release.split(".")
    try:
        return (int(parts[0]), int(parts[1].split("-")[0])) >= (5, 8)
    except (IndexError, ValueError):
        return False


_SYNCFS = _libc_syncfs() if reports_write_back_errors(os.uname().release) else None


class FileSystemSync:
    """``syncfs(2)`` of the file systems a store's files are on, through descriptors held open
    from the store's open to its close. A descriptor is told each write-back error of its file
    system that happened since it was opened, once, whoever else was told it (the kernel keeps
    an error mark per open file): a descriptor opened for each call would miss an error that
    another process's sync, or a sync of our own between two flushes, consumed first. Off (every
    call False, the caller fsyncs each file) where the system has no ``syncfs`` or its kernel is
    older than 5.8."""

    def __init__(self) -> None:
        self._fds: dict[int, int] = {}

    @property
    def available(self) -> bool:
        return _SYNCFS is not None

    def watch(self, path: Path) -> None:
        """Hold a descriptor of ``path``'s file system from now on."""
        if _SYNCFS is not None:
            self._descriptor(path)

    def _descriptor(self, path: Path) -> int:
        """The descriptor held for ``path``'s file system, opened on its first use."""
        device = os.stat(path).st_dev
        fd = self._fds.get(device)
        if fd is None:
            fd = self._fds[device] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        return fd

    def sync(self, path: Path) -> bool:
        """Make every file and directory of the file system holding ``path`` durable, with one
        call: one journal commit instead of one a file, 0.28 s against 6.5 s for 3,000 new files
        and their directories here. False (nothing done) when off; raises OSError as ``fsync``
        would."""
        if _SYNCFS is None:
            return False
        if _SYNCFS(self._descriptor(path)) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs {path}: {os.strerror(err)}")
        return True

    def close(self) -> None:
        fds, self._fds = self._fds, {}
        for fd in fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)


def encode(data: bytes) -> bytes:
    return _HEADER.pack(MAGIC, len(data), zlib.crc32(data)) + data


def decode(raw: bytes) -> bytes | None:
    """The payload, or None when ``raw`` is torn or corrupt."""
    if len(raw) < _HEADER.size:
        return None
    magic, length, crc = _HEADER.unpack_from(raw)
    payload = raw[_HEADER.size :]
    if magic != MAGIC or length != len(payload) or zlib.crc32(payload) != crc:
        return None
    return payload


def _read_verified(path: Path) -> tuple[bool, bytes | None]:
    """(exists, payload or None when corrupt)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return False, None
    return True, decode(raw)


def write_atomic(path: Path, data: bytes) -> None:
    """Durably replace ``path`` with ``data``, keeping the previous content as ``<name>.bak``."""
    write_atomic_parts(path, (data,))


def write_atomic_parts(path: Path, parts: Iterable[bytes]) -> None:
    """:func:`write_atomic` of the concatenation of ``parts``, which are encoded, checksummed and
    written one at a time (a large document is never built whole in memory). An OSError names
    the file (a write or fsync by descriptor says only, e.g., "No space left on device")."""
    try:
        _write_atomic_parts(path, parts)
    except OSError as exc:
        if exc.filename is not None or exc.errno is None:
            raise
        raise OSError(exc.errno, exc.strerror, str(path)) from exc


def _write_atomic_parts(path: Path, parts: Iterable[bytes]) -> None:
    directory = path.parent
    directory.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        length, crc = 0, 0
        _write_all(fd, bytes(_HEADER.size))  # the real header once the payload is written
        for part in parts:
            _write_all(fd, part)
            length += len(part)
            crc = zlib.crc32(part, crc)
        os.pwrite(fd, _HEADER.pack(MAGIC, length, crc), 0)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    os.close(fd)
    exists, previous = _read_verified(path)
    if previous is not None:
        os.replace(path, backup_path(path))
    elif exists:
        # A corrupt primary must not overwrite a good backup.
        os.unlink(path)
    os.replace(tmp, path)
    fsync_dir(directory)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def read_atomic(path: Path) -> bytes | None:
    """The payload of ``path``, else of its ``.bak``; None when neither exists.

    Raises :class:`StoreError` when a file exists but neither copy verifies.
    """
    exists, payload = _read_verified(path)
    if payload is not None:
        return payload
    bak = backup_path(path)
    bak_exists, bak_payload = _read_verified(bak)
    if bak_payload is not None:
        if exists:
            log.warning(f"{path} fails its checksum, using {bak.name}", path=str(path))
        return bak_payload
    if not exists and not bak_exists:
        return None
    raise StoreError(f"{path} and {bak.name} are both missing or corrupt")
