"""Helpers for the storage tests: small stores, messages, and a simulated kill -9."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from protocol.message import Message, MessageRecord, iter_records
from storage.store import GetStatus, MessageStore, StoreConfig

SEGMENT = 64 * 1024
TOPIC = "TopicTest"


def config(data_dir: Path, **overrides: Any) -> StoreConfig:
    settings: dict[str, Any] = {
        "data_dir": data_dir,
        "commitlog_segment_bytes": SEGMENT,
        "consumequeue_segment_entries": 1000,
        "index_slots": 1024,
        "index_max_entries": 4096,
    }
    settings.update(overrides)
    return StoreConfig(**settings)


def open_store(data_dir: Path, **overrides: Any) -> MessageStore:
    store = MessageStore(config(data_dir, **overrides))
    store.open()
    return store


def messages(count: int, size: int = 100, *, tag: str = "", prefix: str = "m") -> list[Message]:
    out = []
    for i in range(count):
        head = f"{prefix}{i}:".encode()
        out.append(
            Message(
                topic=TOPIC,
                body=head + b"x" * max(0, size - len(head)),
                tags=tag,
                keys=f"k{i}",
                born_timestamp=1_700_000_000_000 + i,
                born_host="10.0.0.7:4242",
            )
        )
    return out


def crash_copy(store: MessageStore, dest: Path) -> Path:
    """The data directory as a kill -9 would leave it right now (the page cache survives)."""
    shutil.copytree(store.config.data_dir, dest)
    return dest


def read_queue(
    store: MessageStore, topic: str, queue_id: int, start: int = 0
) -> list[MessageRecord]:
    """Every record of a queue from ``start``, in order."""
    out: list[MessageRecord] = []
    offset = start
    while True:
        result = store.get(topic, queue_id, offset, 64, 1 << 20)
        if result.status is not GetStatus.FOUND:
            return out
        out.extend(iter_records(result.body))
        offset = result.next_offset


def commitlog_files(data_dir: Path) -> list[Path]:
    return sorted((data_dir / "commitlog").iterdir())


def commitlog_bytes(store: MessageStore) -> bytes:
    """The CommitLog content from its min offset to its max offset."""
    out = bytearray()
    offset = store.min_offset
    while offset < store.max_offset:
        chunk = store.read_raw(offset, 1 << 20)
        out += chunk
        offset += len(chunk)
    return bytes(out)
