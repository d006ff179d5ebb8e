"""The store checkpoint: how far the CommitLog and ConsumeQueues are known to be durable.

Written as an atomic small file (``<data_dir>/checkpoint``) after every flush that advanced, on
truncation and on close. Recovery trusts ConsumeQueue entries only below ``dispatched_offset``
and replays CommitLog records from there.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from storage.errors import StoreError
from storage.small_file import read_atomic, write_atomic


@dataclass(frozen=True, slots=True, kw_only=True)
class Checkpoint:
    flushed_offset: int
    """CommitLog bytes below this offset are durable."""
    dispatched_offset: int
    """ConsumeQueue entries of every record ending at or below this offset are durable; never
    above ``flushed_offset``, and below it while a flush has left ConsumeQueue segments
    unsynced (``storage.store_files``): recovery replays the records from here into them."""
    confirm_offset: int
    """The replication confirm offset the broker last set (consumer visibility)."""
    timestamp_ms: int
    """Wall-clock time the checkpoint was taken."""


def load_checkpoint(path: Path) -> Checkpoint | None:
    raw = read_atomic(path)
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
        return Checkpoint(
            flushed_offset=int(doc["flushed_offset"]),
            dispatched_offset=int(doc["dispatched_offset"]),
            confirm_offset=int(doc["confirm_offset"]),
            timestamp_ms=int(doc["timestamp_ms"]),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise StoreError(f"checkpoint {path} is not valid: {exc}") from None


def save_checkpoint(path: Path, checkpoint: Checkpoint) -> None:
    write_atomic(path, json.dumps(asdict(checkpoint), sort_keys=True).encode())
