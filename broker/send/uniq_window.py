"""The optional per-topic duplicate window on UNIQ_KEY (docs/idempotence.md, "Clients without
the fields"): the driver of :class:`~protocol.idempotence.UniqKeyWindow`.

Off by default: ``uniq_key_window_topics`` names the topics it covers. A send to one of them
without an idempotent producer's fields, whose messages all carry ``UNIQ_KEY`` (the official
gRPC clients' message id, the classic clients' ``UNIQ_KEY``: what they keep across their
retries), is answered with the stored offsets when a send of the same keys was stored within
``uniq_key_window_ms``. A master builds the window per master epoch from the covered topics'
records stored within the window (each record its own entry: a batch retried after a failover
is recognised by the master that stored it only).
"""

from __future__ import annotations

import time
from typing import Final

import structlog

from broker.send.idempotence import IdempotenceHost
from broker.service_host import PerMasterEpoch
from protocol.idempotence import StoredBatch, UniqKeyWindow
from protocol.message import Message, RecordError, iter_records
from protocol.timer import PROP_UNIQ_KEY
from storage.store import GetStatus

__all__ = ["UniqKeyDedup"]

log = structlog.get_logger(__name__)

_READ_COUNT: Final = 1024
_READ_BYTES: Final = 16 * 1024 * 1024


class UniqKeyDedup(PerMasterEpoch[UniqKeyWindow]):
    """Loop thread only."""

    def __init__(self, host: IdempotenceHost) -> None:
        self.host: IdempotenceHost = host
        self.state: UniqKeyWindow | None = None
        self._epoch = -1
        cfg = host.cfg
        self.topics = frozenset(
            t.strip() for t in cfg.uniq_key_window_topics.split(",") if t.strip()
        )
        self.duplicates = 0
        host.metrics.counter_fn(
            "rmq_broker_uniq_key_duplicates",
            "Sends without idempotent producers' fields answered from the UNIQ_KEY window "
            "(uniq_key_window_topics) with the stored offsets, nothing stored again",
            lambda: self.duplicates,
        )

    def drop_unless_master(self) -> None:
        """A broker no longer master gives the window's memory back (built again once master)."""
        if self.state is not None and not self.host.gate.role.is_master:
            self.state = None

    def key(self, topic: str, messages: list[Message]) -> str | None:
        """The window's key of a send, None when the window does not cover it."""
        if topic not in self.topics:
            return None
        return UniqKeyWindow.key_of([m.properties.get(PROP_UNIQ_KEY, "") for m in messages])

    def find(self, topic: str, key: str) -> StoredBatch | None:
        found = self.ready().get(topic, key, _now_ms())
        if found is not None:
            self.duplicates += 1
        return found

    def stored(self, topic: str, key: str, batch: StoredBatch) -> None:
        if self.state is not None:
            self.state.put(topic, key, batch, _now_ms())

    def _rebuild(self) -> UniqKeyWindow:
        cfg = self.host.cfg
        store = self.host.store
        window = UniqKeyWindow(
            window_ms=cfg.uniq_key_window_ms, max_entries=cfg.uniq_key_window_max
        )
        since = _now_ms() - cfg.uniq_key_window_ms
        entries: list[tuple[int, str, str, StoredBatch]] = []
        for topic in sorted(self.topics):
            for queue_id in store.queue_ids(topic):
                offset = store.offset_by_timestamp(topic, queue_id, since)
                while True:
                    res = store.get(topic, queue_id, offset, _READ_COUNT, _READ_BYTES)
                    if res.status is not GetStatus.FOUND:
                        break
                    try:
                        for r in iter_records(res.body):
                            key = r.properties.get(PROP_UNIQ_KEY)
                            if key:
                                batch = StoredBatch(
                                    -1,
                                    queue_id,
                                    r.queue_offset,
                                    [r.physical_offset],
                                    r.physical_offset + r.size,
                                    r.store_timestamp,
                                )
                                entries.append((r.store_timestamp, topic, key, batch))
                    except RecordError as exc:
                        log.error("UNIQ_KEY window: record skipped", topic=topic, error=str(exc))
                    offset = res.next_offset
        for stored_at, topic, key, batch in sorted(entries, key=lambda e: e[0]):
            window.put(topic, key, batch, stored_at)
        window.expire(_now_ms())
        log.info("UNIQ_KEY duplicate window built", topics=len(self.topics), entries=len(window))
        return window


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
