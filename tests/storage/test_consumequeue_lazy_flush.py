"""A flush may leave ConsumeQueue segments with few new entries unsynced; the checkpoint then
never says they are durable, so a power loss loses none of their entries (issue 34: at 10,000
queues a put wrote an entry into a page of its own queue's file, which every flush had written
back, so nearly every put took a page fault and the file system's work of dirtying the page).

``MessageStore.flush(consumequeue_least_pages)`` fsyncs only the segments whose new entries cross
that many page boundaries (RocketMQ's ``flushConsumeQueueLeastPages``) and moves the checkpoint's
dispatched offset, where recovery replays the CommitLog into the queues from, only when no
segment with entries is left unsynced; ``flush()`` (0) fsyncs every one. The power loss is
simulated on a copy of the data directory: the CommitLog cut at the flushed offset, every
ConsumeQueue file put back to what it held when it was last fsynced (the worst a power loss may
do: none of the writes since reached the disk) or, never fsynced, emptied.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from storage import store_files
from storage.checkpoint import Checkpoint, load_checkpoint
from storage.store import MessageStore
from tests.storage.support import (
    SEGMENT,
    commitlog_files,
    crash_copy,
    messages,
    open_store,
    read_queue,
)

NOW = 1_700_000_000_000
QUEUES = 60
"""Queues of one message a round: few enough that no flush takes the ``syncfs`` path here."""
BUSY = ("Busy", 0)
"""A queue given 450 entries (9,000 bytes: two page boundaries) between two flushes."""


def queue(q: int) -> tuple[str, int]:
    return f"Lazy{q // 8:03d}", q % 8


def queue_fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The path of every ConsumeQueue file fsynced from now on, in order."""
    synced: list[str] = []
    fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if "/consumequeue/" in path and os.path.isfile(path):
            synced.append(path)
        fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    return synced


def durable_images(monkeypatch: pytest.MonkeyPatch) -> dict[str, bytes]:
    """What each ConsumeQueue file held when it was last fsynced (from now on), by path."""
    images: dict[str, bytes] = {}
    fsync = os.fsync

    def imaging_fsync(fd: int) -> None:
        fsync(fd)
        path = os.readlink(f"/proc/self/fd/{fd}")
        if "/consumequeue/" in path and os.path.isfile(path):
            images[path] = Path(path).read_bytes()

    monkeypatch.setattr(os, "fsync", imaging_fsync)
    return images


def checkpoint(store: MessageStore) -> Checkpoint:
    found = load_checkpoint(Path(store.config.data_dir) / "checkpoint")
    assert found is not None
    return found


def put_round(store: MessageStore, tag: str) -> None:
    """One message into each of the :data:`QUEUES` queues."""
    for q in range(QUEUES):
        topic, queue_id = queue(q)
        store.put(topic, queue_id, messages(1, prefix=f"{tag}{q}-"), NOW)


def put_busy(store: MessageStore, tag: str) -> None:
    for i in range(9):  # batches that fit in a CommitLog segment
        store.put(*BUSY, messages(50, size=10, prefix=f"{tag}{i}-"), NOW)


def test_a_flush_with_least_pages_syncs_only_queues_with_pages_of_new_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_files, "SYNCFS_FROM", 1 << 30)  # an fsync each, to count them
    store = open_store(tmp_path)
    put_round(store, "a")
    thorough = store.flush()
    assert checkpoint(store).dispatched_offset == thorough

    synced = queue_fsyncs(monkeypatch)
    put_round(store, "b")
    put_busy(store, "b")
    flushed = store.flush(consumequeue_least_pages=2)
    busy = tmp_path / "consumequeue" / BUSY[0] / str(BUSY[1]) / f"{0:020d}"
    assert synced == [str(busy)], (
        f"{len(synced)} ConsumeQueue files fsynced for {QUEUES} queues of one new entry and "
        "one of 450: only the busy one's expected"
    )
    point = checkpoint(store)
    assert (point.flushed_offset, point.dispatched_offset) == (flushed, thorough)

    synced.clear()
    store.flush()
    assert len(synced) == QUEUES, synced
    point = checkpoint(store)
    assert point.flushed_offset == point.dispatched_offset == flushed
    store.close()


def test_a_flush_of_enough_files_for_a_syncfs_syncs_all_of_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One ``syncfs`` writes back every file of the file system: so a flush with more segments
    to sync than :data:`storage.store_files.SYNCFS_FROM` takes every marked one, and the
    dispatched offset follows the flushed one."""
    store = open_store(tmp_path)
    put_round(store, "a")
    store.flush()
    monkeypatch.setattr(store_files, "SYNCFS_FROM", 1)
    put_round(store, "b")
    put_busy(store, "b")  # one segment to sync: the syncfs, covering every other one
    flushed = store.flush(consumequeue_least_pages=2)
    point = checkpoint(store)
    assert point.flushed_offset == point.dispatched_offset == flushed
    store.close()


def power_loss(store: MessageStore, images: dict[str, bytes], dest: Path) -> Path:
    """A copy of ``store``'s directory as a power loss could leave it now: CommitLog bytes past
    the flushed offset gone, each ConsumeQueue file as it was when last fsynced (empty if never;
    every file here is a queue's first, created without an fsync)."""
    flushed = store.flushed_offset
    crashed = crash_copy(store, dest)
    live = Path(store.config.data_dir)
    for path in commitlog_files(crashed):
        start = int(path.name)
        if start >= flushed - flushed % SEGMENT + SEGMENT:
            path.unlink()
        elif start <= flushed < start + SEGMENT:
            with path.open("r+b") as f:
                f.seek(flushed - start)
                f.write(bytes(SEGMENT - (flushed - start)))
    for path in (crashed / "consumequeue").rglob("*"):
        if path.is_file():
            image = images.get(str(live / path.relative_to(crashed)))
            path.write_bytes(b"" if image is None else image)
    return crashed


def test_a_power_loss_after_lazy_flushes_loses_no_flushed_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_files, "SYNCFS_FROM", 1 << 30)  # every durable image recorded
    images = durable_images(monkeypatch)
    store = open_store(tmp_path / "live")
    put_round(store, "a")
    store.flush()
    for tag in ("b", "c"):  # lazy flushes: the busy queue synced, the others not
        put_round(store, tag)
        put_busy(store, tag)
        store.flush(consumequeue_least_pages=2)
    everything = [*(queue(q) for q in range(QUEUES)), BUSY]
    kept = {key: [r.body for r in read_queue(store, *key)] for key in everything}
    put_round(store, "d")  # never flushed: the power loss may take it
    point = checkpoint(store)
    assert point.dispatched_offset < point.flushed_offset == store.flushed_offset
    crashed = power_loss(store, images, tmp_path / "crashed")
    store.close()

    again = open_store(crashed)
    for key in everything:
        records = read_queue(again, *key)
        assert [r.queue_offset for r in records] == list(range(len(records))), key
        assert [r.body for r in records] == kept[key], key
    assert again.max_offset == point.flushed_offset
    again.close()
