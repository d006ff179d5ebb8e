"""Reading messages back for a lookup: a record at a CommitLog offset, confirmed, and the
records the key index names, confirmed against their keys.

Only records ending at or before ``visible`` (the confirm offset in controller mode) are ever
returned: a lookup reads what consumers may read, never a record a failover could cut.
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol.message import (
    MESSAGE_MAGIC,
    MIN_RECORD_SIZE,
    MessageRecord,
    RecordError,
    decode_record,
    peek_prefix,
)
from storage.commitlog import CommitLog
from storage.errors import StoreError
from storage.index.format import keys_of
from storage.index.service import KeyIndex


class MessageNotFoundError(StoreError):
    """No readable, committed message at the offset (or none matches the key)."""


class UnreadableMessageError(MessageNotFoundError):
    """The record at the offset is there (its size and magic hold) but fails its checks: a
    repair from another replica may bring it back (``size`` bytes)."""

    def __init__(self, message: str, offset: int, size: int) -> None:
        super().__init__(message)
        self.offset = offset
        self.size = size


@dataclass(frozen=True, slots=True)
class Found:
    """A message a lookup found: decoded, and its record's bytes as stored."""

    record: MessageRecord
    raw: bytes


def read_message(commitlog: CommitLog, offset: int, visible: int) -> Found:
    """The message record starting exactly at CommitLog ``offset``, its CRC and position
    checked; raises :class:`MessageNotFoundError` saying why there is none."""
    if offset < 0:
        raise MessageNotFoundError(f"offset {offset} is negative")
    if offset < commitlog.min_offset:
        raise MessageNotFoundError(
            f"offset {offset} was deleted (the commitlog starts at {commitlog.min_offset})"
        )
    if offset >= min(visible, commitlog.write_pos):
        raise MessageNotFoundError(f"no committed message at offset {offset}")
    seg = commitlog.segment_at(offset)
    if seg is None:
        raise MessageNotFoundError(f"no commitlog segment holds offset {offset}")
    rel = offset - seg.start
    limit = min(seg.end, commitlog.write_pos) - seg.start
    if limit - rel < MIN_RECORD_SIZE:
        raise MessageNotFoundError(f"offset {offset} is not the start of a message")
    size, magic = peek_prefix(seg.view, rel)
    if magic != MESSAGE_MAGIC:
        raise MessageNotFoundError(f"offset {offset} is not the start of a message")
    if offset + size > visible:
        raise MessageNotFoundError(f"no committed message at offset {offset}")
    raw = bytes(seg.view[rel : min(limit, rel + size)])
    try:
        record = decode_record(raw)
    except (RecordError, ValueError) as exc:
        why = f"no readable message at offset {offset}: {exc}"
        if size >= MIN_RECORD_SIZE and len(raw) == size:
            raise UnreadableMessageError(why, offset, size) from None
        raise MessageNotFoundError(why) from None
    if record.physical_offset != offset:
        raise MessageNotFoundError(f"offset {offset} is not the start of a message")
    return Found(record, raw)


def has_key(record: MessageRecord, key: str) -> bool:
    try:
        props = record.properties
    except RecordError:
        return False
    return key in keys_of(props.get("KEYS", "")) or props.get("UNIQ_KEY") == key


def find_by_key(
    index: KeyIndex,
    commitlog: CommitLog,
    *,
    topic: str,
    key: str,
    begin_ms: int,
    end_ms: int,
    max_count: int,
    visible: int,
) -> list[Found]:
    """Up to ``max_count`` committed messages of ``topic`` with ``key`` stored within
    ``[begin_ms, end_ms]``, oldest first (the newest ``max_count`` when there are more)."""
    found: list[Found] = []
    for offset in index.candidates(topic, key, begin_ms, end_ms):
        try:
            hit = read_message(commitlog, offset, visible)
        except MessageNotFoundError:
            continue  # not committed yet, deleted, or a hash collision's stale slot
        record = hit.record
        if (
            record.topic == topic
            and begin_ms <= record.store_timestamp <= end_ms
            and has_key(record, key)
        ):
            found.append(hit)
            if len(found) >= max_count:
                break
    found.sort(key=lambda hit: hit.record.physical_offset)
    return found
