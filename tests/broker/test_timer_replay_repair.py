"""The timer's start-up replay and damaged CommitLog records (issue 31): a record the replay
cannot read (its size field damaged) is made known to the store as damage and passed over by its
extent; once the bytes are written back (as ``RecordRepair`` writes them from a replica) its
scheduled messages are indexed, each once: one a later delivery record names is not delivered
again. Until then the timer's dispatched mark stays below the span, so a restart replays it.
A real lone broker and its store; the timer's progress files are made unusable so that the
replay (a rebuild) runs over the whole CommitLog."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from broker.broker import Broker
from broker.timer.progress import DISPATCHED_FILE
from protocol.message import Message
from storage.small_file import read_atomic
from tests.broker.test_timer_service import config
from tests.support.wait import wait_until_async

HOUR_MS = 3_600_000


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def segment_file(data_dir: Path, offset: int) -> tuple[Path, int]:
    files = sorted((int(p.name), p) for p in (data_dir / "commitlog").iterdir() if p.name.isdigit())
    start, path = max((s, p) for s, p in files if s <= offset)
    return path, offset - start


def read_at(data_dir: Path, offset: int, size: int) -> bytes:
    path, rel = segment_file(data_dir, offset)
    with path.open("rb") as f:
        f.seek(rel)
        return f.read(size)


def flip(data_dir: Path, offset: int) -> None:
    """Flip the low bit of the byte at CommitLog ``offset`` (a stopped broker's file)."""
    path, rel = segment_file(data_dir, offset)
    with path.open("r+b") as f:
        f.seek(rel)
        byte = f.read(1)[0]
        f.seek(rel)
        f.write(bytes([byte ^ 1]))


async def test_a_replay_passes_over_a_damaged_size_field_and_indexes_it_once_repaired(
    tmp_path: Path,
) -> None:
    cfg = config(tmp_path)
    broker = Broker(cfg)
    await broker.start()
    try:
        timer, store = broker.ctx.timer, broker.ctx.store
        # Delivered at once: its delivery record follows its scheduled record in the log.
        sent = timer.put_at(Message(topic="T", body=b"soon"), "T", 0, now_ms())
        await wait_until_async(
            lambda: store.queue_max_offset("T", 0) == 1, "the due one delivered", 10
        )
        hour = now_ms() + HOUR_MS
        later = [
            timer.put_at(Message(topic="T", body=f"later {i}".encode()), "T", 0, hour + i)
            for i in range(3)
        ]
        timer.put_at(Message(topic="T", body=b"last"), "T", 0, hour + 10)  # valid after damage
    finally:
        await broker.stop()
    delivered_at = sent.physical_offsets[0]
    rotten_at = later[1].physical_offsets[0]
    spans = {
        at: read_at(cfg.data_dir, at, end - at)
        for at, end in (
            (delivered_at, sent.end_offset),
            (rotten_at, later[1].end_offset),
        )
    }
    for at in spans:
        flip(cfg.data_dir, at + 1)  # the size field's second byte: 64 KiB more
    for name in ("progress", "progress.bak"):  # unusable: the timer is rebuilt from the log
        path = cfg.data_dir / "timer" / name
        if path.exists():
            path.write_bytes(b"not a progress file")

    cfg = dataclasses.replace(cfg, listen="127.0.0.1:0")
    again = Broker(cfg)
    await again.start()
    try:
        timer, store = again.ctx.timer, again.ctx.store
        assert timer.pending_count == 3  # later[1] passed over
        assert {at for at, _ in store.repairs.unrepaired()} == set(spans)
        timer.checkpoint()
        timer.checkpoint()  # noted, then saved: never past the first span
        raw = read_atomic(cfg.data_dir / "timer" / DISPATCHED_FILE)
        assert raw is not None and int(raw) <= delivered_at
    finally:
        await again.stop()

    # A restart before the repair: the replay starts below the spans and passes over them again.
    third = Broker(dataclasses.replace(cfg, listen="127.0.0.1:0"))
    await third.start()
    try:
        timer, store = third.ctx.timer, third.ctx.store
        assert timer.pending_count == 3
        assert {at for at, _ in store.repairs.unrepaired()} == set(spans)
        for at, raw in spans.items():
            store.repairs.repair(at, raw)()  # what RecordRepair writes back from a replica
        await wait_until_async(
            lambda: timer.pending_count == 4, "the repaired span's message indexed", 10
        )
        wheel = timer.wheel
        assert wheel is not None
        due = wheel.due(hour + 2 * HOUR_MS)
        offsets = [e.commitlog_offset for e in due]
        # Each once, in order; the one delivered before is not handed out again.
        assert sorted(offsets) == sorted({*(r.physical_offsets[0] for r in later), offsets[-1]})
        assert len(offsets) == 4 and delivered_at not in offsets
        assert timer.replay_repaired() == 0  # each span once
        assert store.queue_max_offset("T", 0) == 1
    finally:
        await third.stop()
