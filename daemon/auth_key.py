"""The cluster's auth key file, as every daemon that holds it reads it."""

from __future__ import annotations

from pathlib import Path

from protocol.sealing import SealError, check_key


def load_auth_key(path: Path) -> bytes:
    """The key material in ``path``; ValueError when it cannot be read, is shorter than
    MIN_KEY_BYTES, or others may read it (group or world permission bits)."""
    try:
        mode = path.stat().st_mode
        data = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from None
    if mode & 0o077:
        raise ValueError(f"{path} may be read by others (mode {mode & 0o777:o}); chmod 600 it")
    try:
        return check_key(data)
    except SealError as exc:
        raise ValueError(f"{path}: {exc}") from None
