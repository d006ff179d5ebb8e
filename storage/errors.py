"""The exceptions the message store raises; a caller catches :class:`StoreError` for all of them."""

from __future__ import annotations


class StoreError(Exception):
    """Base class: the store refused or failed an operation and is still consistent."""


class DiskFullError(StoreError):
    """No space to pre-allocate a segment; nothing of the failed write remains on disk."""


class MessageTooLargeError(StoreError):
    """A message exceeds ``max_message_bytes``, or a batch does not fit in one segment."""


class CorruptRecordError(StoreError):
    """A CommitLog record is invalid: what recovery truncates at and what ``append_raw`` refuses."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"corrupt record at offset {offset}: {reason}")
        self.offset = offset
        self.reason = reason
