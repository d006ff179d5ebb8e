"""Reading a system topic whole: a new master rebuilds its POP in-flight set and its open
transactions from the records under ``rmq_sys_`` topics, queue 0, oldest first."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

import structlog

from protocol.message import MessageRecord, iter_records
from storage.store import GetStatus, MessageStore

__all__ = ["read_system_topic"]

log = structlog.get_logger(__name__)

_READ_CHUNK: Final = 1024
_READ_BYTES: Final = 64 * 1024 * 1024


def read_system_topic(store: MessageStore, topic: str, start: int = 0) -> Iterator[MessageRecord]:
    """Every record of queue 0 of ``topic`` from ``start`` (its min offset if later) to its
    end, in queue order. Records retention removed meanwhile are skipped; an unreadable one is
    logged and skipped (the store knows it as damage from then on: the broker repairs it from a
    replica, and ``PerMasterEpoch`` builds its state again with it); a topic without queue 0
    has none."""
    offset = max(start, store.queue_min_offset(topic, 0))
    while True:
        res = store.get(topic, 0, offset, _READ_CHUNK, _READ_BYTES, None)
        if res.status is GetStatus.OFFSET_TOO_SMALL:
            offset = res.next_offset
            continue
        if res.status is not GetStatus.FOUND:
            if res.status is GetStatus.CORRUPT:
                log.error(
                    "system topic record unreadable",
                    topic=topic,
                    offset=res.corrupt_offset,
                    reason=res.reason,
                )
                offset += 1
                continue
            return
        yield from iter_records(res.body)
        offset = res.next_offset
