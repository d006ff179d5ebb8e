"""Atomic small files: checksummed, replaced by rename, previous content kept as .bak."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import structlog

from storage.errors import StoreError
from storage.small_file import backup_path, decode, encode, read_atomic, temp_path, write_atomic


def test_missing_file_reads_as_none(tmp_path: Path) -> None:
    assert read_atomic(tmp_path / "nothing") is None


def test_round_trip_and_previous_content_kept_as_bak(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "topics.json"
    write_atomic(path, b"one")
    assert read_atomic(path) == b"one"
    assert not backup_path(path).exists()
    write_atomic(path, b"two")
    assert read_atomic(path) == b"two"
    assert backup_path(path).name == "topics.json.bak"
    assert decode(backup_path(path).read_bytes()) == b"one"
    assert not temp_path(path).exists()


def test_corrupt_primary_falls_back_to_bak_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint"
    write_atomic(path, b"old")
    write_atomic(path, b"new")
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0xFF
    path.write_bytes(bytes(raw))
    with structlog.testing.capture_logs() as logs:
        assert read_atomic(path) == b"old"
    assert any("fails its checksum" in entry["event"] for entry in logs)


def test_truncated_primary_falls_back_to_bak(tmp_path: Path) -> None:
    path = tmp_path / "f"
    write_atomic(path, b"old")
    write_atomic(path, b"new content")
    path.write_bytes(path.read_bytes()[:-3])
    assert read_atomic(path) == b"old"


def test_missing_primary_reads_bak(tmp_path: Path) -> None:
    # A crash between "primary -> .bak" and "temp -> primary" leaves just these.
    path = tmp_path / "f"
    write_atomic(path, b"old")
    write_atomic(path, b"new")
    path.unlink()
    assert read_atomic(path) == b"old"


def test_torn_temp_file_is_ignored_and_replaced(tmp_path: Path) -> None:
    path = tmp_path / "f"
    write_atomic(path, b"good")
    temp_path(path).write_bytes(encode(b"half-writ")[:7])
    assert read_atomic(path) == b"good"
    write_atomic(path, b"next")
    assert read_atomic(path) == b"next"
    assert not temp_path(path).exists()


def test_both_copies_corrupt_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"garbage")
    backup_path(path).write_bytes(b"more garbage")
    with pytest.raises(StoreError, match="both missing or corrupt"):
        read_atomic(path)


def test_corrupt_primary_without_bak_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"RMQS\x00\x00\x00\x01\x00\x00\x00\x00x")
    with pytest.raises(StoreError):
        read_atomic(path)


def test_a_corrupt_primary_never_replaces_a_good_bak(tmp_path: Path) -> None:
    path = tmp_path / "f"
    write_atomic(path, b"v1")
    write_atomic(path, b"v2")
    path.write_bytes(b"torn")
    write_atomic(path, b"v3")
    assert read_atomic(path) == b"v3"
    assert decode(backup_path(path).read_bytes()) == b"v1"


@pytest.mark.parametrize("payload", [b"", b"x", bytes(range(256)) * 10])
def test_codec_round_trip(payload: bytes) -> None:
    assert decode(encode(payload)) == payload
    assert decode(encode(payload)[:-1]) is None if payload else decode(b"RMQ") is None


def test_a_failed_write_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A new user's trial: a broker's disk filled up; its log said 'flush failed', 'timer
    # progress failed' and 'persisting consumer offsets failed', each with only "OSError:
    # [Errno 28] No space left on device": a write by descriptor names no file.
    path = tmp_path / "checkpoint"
    write_atomic(path, b"before")

    def full(fd: int, data: object) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError) as failed:
        write_atomic(path, b"after")
    assert failed.value.errno == errno.ENOSPC
    assert str(failed.value) == f"[Errno 28] No space left on device: '{path}'"
    monkeypatch.undo()
    assert read_atomic(path) == b"before"
    assert not (tmp_path / "checkpoint.tmp").exists()
