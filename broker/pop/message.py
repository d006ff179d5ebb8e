"""One message a POP hands out (a leaf module: the service and FIFO POP both build them)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PopMessage"]


@dataclass(slots=True)
class PopMessage:
    """One message handed out: its stored bytes, its receipt handle and attempt number."""

    queue_offset: int
    raw: bytes
    """The record's bytes as stored (the answer's body carries them)."""
    handle: str
    attempt: int
