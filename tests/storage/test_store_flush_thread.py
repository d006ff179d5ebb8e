"""flush() in a worker thread while the loop thread puts, gets, rolls and deletes segments."""

from __future__ import annotations

import threading
from pathlib import Path

from storage.checkpoint import load_checkpoint
from tests.storage.support import SEGMENT, TOPIC, messages, open_store, read_queue

T0 = 1_700_000_000_000


def test_flush_runs_concurrently_with_puts_gets_and_retention(tmp_path: Path) -> None:
    store = open_store(tmp_path, retention_hours=1, consumequeue_segment_entries=64)
    stop = threading.Event()
    flushed: list[int] = []
    errors: list[BaseException] = []

    def flusher() -> None:
        try:
            while not stop.is_set():
                flushed.append(store.flush())
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    worker = threading.Thread(target=flusher)
    worker.start()
    try:
        batch = messages(8, size=700)
        for i in range(400):
            store.put(TOPIC, i % 4, batch, T0 + i * 60_000)
            if i % 50 == 49:
                store.delete_expired(T0 + i * 60_000, disk_used_ratio=0.1)
            store.get(TOPIC, i % 4, store.queue_min_offset(TOPIC, i % 4), 16, 1 << 20)
    finally:
        stop.set()
        worker.join(timeout=30)
    assert not errors
    assert flushed == sorted(flushed)
    assert store.max_offset > 10 * SEGMENT
    assert store.min_offset > 0  # retention ran while flushing
    final = store.flush()
    assert final == store.max_offset == store.flushed_offset
    checkpoint = load_checkpoint(tmp_path / "checkpoint")
    assert checkpoint is not None and checkpoint.flushed_offset == final
    counts = {
        q: store.queue_max_offset(TOPIC, q) - store.queue_min_offset(TOPIC, q) for q in range(4)
    }
    store.close()
    again = open_store(tmp_path, retention_hours=1, consumequeue_segment_entries=64)
    for q in range(4):
        assert len(read_queue(again, TOPIC, q, start=again.queue_min_offset(TOPIC, q))) == counts[q]
    again.close()
