"""What a broker's message store is configured with (``StoreConfig``), and its checks.

The broker builds it from its own config (``broker/message_service.py``); tools and benches
build it directly. :meth:`StoreConfig.validate` raises :class:`~storage.errors.StoreError` naming the
first field out of range; :class:`storage.store.MessageStore` calls it before touching a file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from protocol.message import HEAD_SIZE
from storage.errors import StoreError
from storage.index.service import IndexConfig

__all__ = ["StoreConfig"]


@dataclass(kw_only=True)
class StoreConfig:
    data_dir: Path
    store_host: str = "127.0.0.1:10911"
    """Goes into every record's storeHost (and so into message ids)."""
    commitlog_segment_bytes: int = 1 << 30
    consumequeue_segment_entries: int = 300_000
    """Entries (20 bytes each) per ConsumeQueue segment file."""
    consumequeue_allocate_bytes: int = 64 * 1024
    """ConsumeQueue segments are sparse and given their blocks in chunks of this many bytes,
    before entries are written there (``storage.consumequeue``); a multiple of 4096."""
    consumequeue_open_files: int = 2048
    """ConsumeQueue segment files kept open for the reads and writes past the mapped ones, the
    least lately used replaced only by one used more often, and one spare
    (``storage.consumequeue.SegmentFiles``; 0: opened for each)."""
    retention_hours: float = 72.0
    disk_max_used_ratio: float = 0.85
    """Above this, retention deletes the oldest segments even if they are young."""
    max_message_bytes: int = 4 * 1024 * 1024
    """Largest encoded record accepted by :meth:`storage.store.MessageStore.put`."""
    warm_ahead_bytes: int = 64 * 1024 * 1024
    """flush() pre-faults this much of the segment past the write position (0: off)."""
    index_enable: bool = True
    """Keep the key index (``storage.index``): lookups of messages by key."""
    index_slots: int = 250_000
    index_max_entries: int = 1_000_000
    index_file_span_ms: int = 3_600_000
    filter_index: bool = False
    """Keep the property filter index (``storage.filter_index``): a digest of each record's
    properties beside its ConsumeQueue entry, so SQL92 filters pass over records unread."""

    def validate(self) -> None:
        if self.commitlog_segment_bytes < 4096:
            raise StoreError("commitlog_segment_bytes must be at least 4096")
        if self.consumequeue_segment_entries < 1:
            raise StoreError("consumequeue_segment_entries must be at least 1")
        if self.consumequeue_allocate_bytes < 4096 or self.consumequeue_allocate_bytes % 4096:
            raise StoreError("consumequeue_allocate_bytes must be a multiple of 4096")
        if self.consumequeue_open_files < 0:
            raise StoreError("consumequeue_open_files must be at least 0")
        if self.retention_hours <= 0:
            raise StoreError("retention_hours must be positive")
        if not 0 < self.disk_max_used_ratio <= 1:
            raise StoreError("disk_max_used_ratio must be in (0, 1]")
        if self.max_message_bytes < HEAD_SIZE:
            raise StoreError(f"max_message_bytes must be at least {HEAD_SIZE}")
        self.index_config().validate()

    def index_config(self) -> IndexConfig:
        return IndexConfig(
            directory=Path(self.data_dir) / "index",
            slot_count=self.index_slots,
            max_entries=self.index_max_entries,
            file_span_ms=self.index_file_span_ms,
        )
