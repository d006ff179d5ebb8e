"""A new ConsumeQueue file is made durable by the flush, not on the putting thread (issue 34).

Creating a queue's first segment file fsynced it on the event loop (about 5 ms on the shared
disk, for every new queue on the master and on each replica). Now the flush that makes the
queue's first entries durable fsyncs the file and its directory, before the checkpoint trusts
any of them; after a power loss a queue's only file whose allocation did not reach the disk
(missing, empty, short) and that holds no entry the checkpoint trusts is dropped at the open and
its entries are rebuilt from the CommitLog, as every entry past the checkpoint is. A queue's later
segment is still fsynced when it is created, so a short one, or a file whose trusted entries are
cut, is damage to flushed data: the open refuses it, as it did before.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from protocol.message import MessageRecord
from storage import small_file, store_files
from storage.consumequeue import ENTRY_SIZE
from storage.errors import StoreError
from tests.storage.support import (
    SEGMENT,
    TOPIC,
    commitlog_files,
    crash_copy,
    messages,
    open_store,
    read_queue,
)

NOW = 1_700_000_000_000
NEW = "NewTopic"
NEW_QUEUES = 12
PER_SEGMENT = 1000
"""tests/storage/support.py's consumequeue_segment_entries."""
REPO = Path(__file__).resolve().parents[2]


def bodies(records: list[MessageRecord]) -> list[bytes]:
    return [r.body for r in records]


def record_fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The path of every file and directory fsynced from now on, in order."""
    synced: list[str] = []
    fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    return synced


def test_a_new_queue_file_is_fsynced_by_the_flush_not_by_the_put(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(tmp_path)
    store.put(TOPIC, 0, messages(3), NOW)
    store.flush()
    synced = record_fsyncs(monkeypatch)
    for queue_id in range(NEW_QUEUES):
        store.put(NEW, queue_id, messages(2, prefix=f"q{queue_id}-"), NOW)
    root = tmp_path / "consumequeue"
    at_put = [path for path in synced if path.startswith(str(root))]
    assert at_put == [], f"ConsumeQueue files fsynced while putting: {at_put}"
    store.flush()
    flushed = set(synced)
    for queue_id in range(NEW_QUEUES):
        directory = root / NEW / str(queue_id)
        files = [str(p) for p in directory.iterdir()]
        assert len(files) == 1
        assert files[0] in flushed, f"{files[0]} not fsynced by the flush"
        assert str(directory) in flushed, f"{directory} not fsynced by the flush"
    assert str(root / NEW) in flushed and str(root) in flushed
    store.close()


def _lose_allocations(crashed: Path) -> list[str]:
    """What a power loss may do to ConsumeQueue files created since the last flush (never
    fsynced): one missing, one empty, one cut short, one not whole entries; the rest whole."""
    done = []
    for queue_id in range(NEW_QUEUES):
        (path,) = (crashed / "consumequeue" / NEW / str(queue_id)).iterdir()
        match queue_id % 4:
            case 0:
                path.unlink()
            case 1:
                os.truncate(path, 0)
            case 2:
                os.truncate(path, path.stat().st_size // 2)
            case 3:
                os.truncate(path, 7)
        done.append(f"{queue_id}:{path.stat().st_size if path.exists() else 'gone'}")
    return done


def _filled_then_crashed(tmp_path: Path) -> tuple[Path, int, dict[tuple[str, int], list[bytes]]]:
    """A store flushed, then given new queues (and an older queue a second file) and copied as
    the disk held it at a crash before the next flush: the copy, the flushed offset and every
    queue's bodies."""
    store = open_store(tmp_path / "live")
    for i in range(0, PER_SEGMENT - 10, 110):  # batches that fit in a CommitLog segment
        store.put(TOPIC, 0, messages(110, size=40, prefix=f"old{i}-"), NOW)
    flushed = store.flush()
    store.put(TOPIC, 0, messages(30, size=40, prefix="late-"), NOW)  # into a second file
    for queue_id in range(NEW_QUEUES):
        store.put(NEW, queue_id, messages(3, prefix=f"q{queue_id}-"), NOW)
    expected = {(NEW, q): bodies(read_queue(store, NEW, q)) for q in range(NEW_QUEUES)} | {
        (TOPIC, 0): bodies(read_queue(store, TOPIC, 0))
    }
    crashed = crash_copy(store, tmp_path / "crashed")
    store.close()
    return crashed, flushed, expected


def test_new_queue_files_a_power_loss_cut_are_rebuilt_from_the_commitlog(tmp_path: Path) -> None:
    """The CommitLog reached the disk (its fsync ran), the queues' files and the checkpoint
    did not: every message is still read through its queue."""
    crashed, _, expected = _filled_then_crashed(tmp_path)
    _lose_allocations(crashed)
    again = open_store(crashed)
    for (topic, queue_id), want in expected.items():
        assert bodies(read_queue(again, topic, queue_id)) == want, (topic, queue_id)
    assert again.queue_max_offset(TOPIC, 0) == PER_SEGMENT + 20
    assert again.put(NEW, 1, messages(1), NOW).first_queue_offset == 3
    again.close()
    reopened = open_store(crashed)  # what the open rebuilt was made durable and agrees
    for (topic, queue_id), want in expected.items():
        got = bodies(read_queue(reopened, topic, queue_id))
        assert got[: len(want)] == want, (topic, queue_id)
    reopened.close()


def test_new_queue_files_lost_with_the_unflushed_commitlog_leave_the_flushed_state(
    tmp_path: Path,
) -> None:
    """Nothing past the flush reached the disk: the store opens with exactly what was flushed,
    and the lost queues start again at offset 0."""
    crashed, flushed, expected = _filled_then_crashed(tmp_path)
    _lose_allocations(crashed)
    for path in commitlog_files(crashed):
        start = int(path.name)
        if start > flushed:
            path.unlink()
        elif start <= flushed < start + SEGMENT:
            with path.open("r+b") as f:
                f.seek(flushed - start)
                f.write(bytes(SEGMENT - (flushed - start)))
    again = open_store(crashed)
    assert again.max_offset == flushed
    assert bodies(read_queue(again, TOPIC, 0)) == expected[(TOPIC, 0)][: PER_SEGMENT - 10]
    for queue_id in range(NEW_QUEUES):
        assert read_queue(again, NEW, queue_id) == []
        assert again.put(NEW, queue_id, messages(1), NOW).first_queue_offset == 0
    again.close()


def test_a_later_segment_is_fsynced_when_it_is_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a queue's first file waits for the flush: the file a queue goes on into is
    fsynced at once, so after any crash it has its full size."""
    store = open_store(tmp_path)
    for _ in range(0, PER_SEGMENT - 10, 110):  # batches that fit in a CommitLog segment
        store.put(TOPIC, 0, messages(110, size=40), NOW)
    store.flush()
    synced = record_fsyncs(monkeypatch)
    store.put(TOPIC, 0, messages(30, size=40), NOW)  # into a second file
    second = tmp_path / "consumequeue" / TOPIC / "0" / f"{PER_SEGMENT * ENTRY_SIZE:020d}"
    assert any(path.startswith(str(second)) for path in synced), synced
    store.close()


@pytest.mark.parametrize("damage", ["later-file-empty", "first-file-cut"])
def test_flushed_queue_files_cut_short_are_refused_not_dropped(tmp_path: Path, damage: str) -> None:
    """A file the checkpoint trusts entries in, or a later segment (fsynced when created), found
    short after an unclean stop is damage, not an allocation a power loss undid: dropping it
    would lose flushed messages from their queue and hand their queue offsets out again. The
    open refuses, naming the file."""
    crashed, _, _ = _filled_then_crashed(tmp_path)
    queue = crashed / "consumequeue" / TOPIC / "0"
    if damage == "later-file-empty":
        os.truncate(queue / f"{PER_SEGMENT * ENTRY_SIZE:020d}", 0)
    else:
        first = queue / f"{0:020d}"
        os.truncate(first, first.stat().st_size // 2)
    with pytest.raises(StoreError, match=str(queue)):
        open_store(crashed)


def test_kill9_after_creating_queues_keeps_every_message_in_its_queue(tmp_path: Path) -> None:
    """A real process creates queues after its last flush and is killed: the page cache keeps
    every file, and every message is read through its queue after the restart."""
    script = textwrap.dedent(
        f"""
        import os, signal, sys
        from pathlib import Path
        sys.path.insert(0, {str(REPO)!r})
        from tests.storage.support import messages, open_store
        store = open_store(Path({str(tmp_path)!r}))
        store.put("TopicTest", 0, messages(5), 1)
        print(store.flush(), flush=True)
        for q in range({NEW_QUEUES}):
            store.put({NEW!r}, q, messages(q + 1, prefix=f"q{{q}}-"), 1)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    again = open_store(tmp_path)
    for queue_id in range(NEW_QUEUES):
        records = read_queue(again, NEW, queue_id)
        assert [r.queue_offset for r in records] == list(range(queue_id + 1))
        assert [r.body for r in records] == [
            m.body for m in messages(queue_id + 1, prefix=f"q{queue_id}-")
        ]
    again.close()


@pytest.mark.parametrize("has_syncfs", [True, False])
def test_many_new_queues_are_made_durable_by_one_syncfs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, has_syncfs: bool
) -> None:
    """A flush with many new files and directories (new queues) makes them durable with one
    syncfs of their file system, not an fsync each (one journal commit each: the flush of
    50,000 new queues took minutes); where the system has no syncfs, an fsync each."""
    store = open_store(tmp_path)
    queues = store_files.SYNCFS_FROM
    for queue_id in range(queues):
        store.put(NEW, queue_id, messages(1), NOW)
    calls: list[Path] = []
    fs_sync = store._files.fs_sync
    held = dict(fs_sync._fds)
    real_sync = fs_sync.sync

    def recording_sync(path: Path) -> bool:
        calls.append(path)
        return real_sync(path) if has_syncfs else False

    synced = record_fsyncs(monkeypatch)
    monkeypatch.setattr(fs_sync, "sync", recording_sync)
    store.flush()
    if fs_sync.available:
        # Through the descriptor opened when the store opened (it is told every write-back
        # error since then), not one opened for the call.
        assert held and fs_sync._fds == held
    root = str(tmp_path / "consumequeue")
    queue_files = [p for p in synced if p.startswith(root)]
    if has_syncfs:
        assert len(calls) == 1, calls
        assert queue_files == [], f"{len(queue_files)} ConsumeQueue files and directories fsynced"
    else:
        assert len(queue_files) == 2 * queues + 2  # each file and directory, the topic's, root's
    store.close()
    again = open_store(tmp_path)
    for queue_id in range(0, queues, 37):
        assert bodies(read_queue(again, NEW, queue_id)) == [m.body for m in messages(1)]
    again.close()


@pytest.mark.parametrize(
    ("release", "reports"),
    [
        ("6.18.0-1-amd64", True),
        ("5.8.0", True),
        ("5.7.19", False),
        ("4.19.0-25", False),
        ("x", False),
    ],
)
def test_syncfs_is_used_only_where_it_reports_write_back_errors(
    release: str, reports: bool
) -> None:
    """Before Linux 5.8 syncfs returned 0 whatever failed to write: an fsync each there."""
    assert small_file.reports_write_back_errors(release) is reports


def test_a_flush_that_fails_to_sync_leaves_its_files_for_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A flush whose fsync of a new queue's file fails raises and moves no checkpoint, and the
    files it had taken stay marked: the next flush syncs them (before, they were dropped, and
    the next good checkpoint trusted entries in files never synced)."""
    store = open_store(tmp_path)
    store.flush()
    for queue_id in range(3):
        store.put(NEW, queue_id, messages(1), NOW)
    fsync = os.fsync
    failed: list[str] = []

    def failing_once(fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if not failed and NEW in path:
            failed.append(path)
            raise OSError(5, "Input/output error")
        fsync(fd)

    monkeypatch.setattr(os, "fsync", failing_once)
    with pytest.raises(OSError):
        store.flush()
    synced = record_fsyncs(monkeypatch)
    store.flush()
    assert failed and failed[0] in synced, (failed, synced)
    store.close()
