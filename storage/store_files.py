"""The message store's files as a whole: who owns the directory, opening it, and what is durable.

:class:`StoreFiles` holds the CommitLog, the ConsumeQueues and the key index of one
``data_dir`` through their lifecycle, and the two offsets the checkpoint persists:

- :meth:`~StoreFiles.open` takes the directory's ``lock`` (one store per directory), loads the
  CommitLog, brings it and the ConsumeQueues back into agreement (``storage.recovery``; queues
  with unwritten entries are rebuilt by ``storage.corruption``), counts what recovery found, makes
  every recovered byte durable, writes the checkpoint, opens the key index and leaves the
  ``abort`` marker that tells the next open whether this one ended cleanly;
- :meth:`~StoreFiles.flush` fsyncs the CommitLog, then the ConsumeQueues (every segment written
  since it was last synced, or only those with a few pages of new entries: below), then writes
  the checkpoint (flushed, dispatched and confirm offsets);
- :meth:`~StoreFiles.cut` durably truncates the CommitLog and the ConsumeQueues to a record
  boundary, lowering the offsets with them;
- :meth:`~StoreFiles.close` flushes, writes the checkpoint and removes the abort marker.

A ConsumeQueue is derived data: recovery rebuilds every entry of a record past the checkpoint's
dispatched offset from the CommitLog. So a flush may leave a queue's segment unsynced, as
RocketMQ's does (``flushConsumeQueueLeastPages``): with ``least_pages`` it fsyncs only the
segments whose new entries cross that many page boundaries and leaves the others marked, and the
checkpoint's dispatched offset then stays where the last flush that synced every written segment
put it (``least_pages`` 0: the broker's thorough flush every
``flush_consumequeue_thorough_interval_ms``, and every flush of a store's own close, open and
cut). What this saves at many queues: a put writes one entry into its queue's page, and a page
fsynced between two puts to it is clean and write-protected again, so the next put takes a page
fault and the file system's work of dirtying it; with 10,000 queues in turn almost every put did
(docs/architecture.md, "How it scales").

:class:`storage.store.MessageStore` composes it with the appends and reads. Threading: as the
store's: :meth:`~StoreFiles.flush` may run in one worker thread while the event-loop thread
appends, reads and runs everything else; the flush lock orders it against close and cut.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import threading
import time
from pathlib import Path

import structlog

from storage.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from storage.commitlog import CommitLog
from storage.confirm_file import ConfirmFile, ConfirmFileError, read_confirm_file
from storage.consumequeue import ConsumeQueue
from storage.corruption import SKIPPED_FILE, Corruption
from storage.errors import StoreError
from storage.filter_index import FilterIndex
from storage.index.service import KeyIndex
from storage.queues import ConsumeQueues
from storage.recovery import recover
from storage.replica_bytes import is_record_boundary
from storage.segment import Segment
from storage.small_file import FileSystemSync, fsync_dir
from storage.store_config import StoreConfig
from storage.tracker import FileTracker

__all__ = ["StoreFiles"]

log = structlog.get_logger(__name__)

SYNCFS_FROM = 256
"""Tracked files and directories from which a flush makes them durable with one ``syncfs``
of their file system rather than an fsync each (it also writes back whatever else is dirty
there, so not for a few)."""


class StoreFiles:
    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        self.directory = Path(config.data_dir)
        self.tracker = FileTracker()
        self.fs_sync = FileSystemSync()
        self.commitlog = CommitLog(
            self.directory / "commitlog", config.commitlog_segment_bytes, self.tracker
        )
        self.queues = ConsumeQueues(
            self.directory / "consumequeue",
            config.consumequeue_segment_entries,
            self.tracker,
            open_files=config.consumequeue_open_files,
            allocate_bytes=config.consumequeue_allocate_bytes,
        )
        if config.filter_index:
            self.queues.on_append = FilterIndex(self.commitlog).appended
        self.corruption = Corruption(self.commitlog, self.queues)
        self.queues.on_load = self._queue_loaded
        self.index: KeyIndex | None = (
            KeyIndex(config.index_config()) if config.index_enable else None
        )
        """The key index (None when ``index_enable`` is off)."""
        self.is_open = False
        self.flushed = 0
        """CommitLog offset known durable (fsynced)."""
        self.dispatched = 0
        """CommitLog offset below which every record's ConsumeQueue entry is durable: the write
        position when the last flush that synced every written ConsumeQueue segment began."""
        self.confirm = 0
        """Replication confirm offset; never above the CommitLog's write position. Kept in
        ``<data_dir>/confirm`` at every change (:mod:`storage.confirm_file`) and in the
        checkpoint at every flush."""
        self._confirm_file: ConfirmFile | None = None
        self._flush_lock = threading.Lock()
        self._checkpointed: tuple[int, int, int] | None = None
        self._lock_fd: int | None = None
        self._recovering = False

    # -- paths -----------------------------------------------------------------------------

    @property
    def _checkpoint_path(self) -> Path:
        return self.directory / "checkpoint"

    @property
    def _confirm_path(self) -> Path:
        return self.directory / "confirm"

    @property
    def _abort_path(self) -> Path:
        return self.directory / "abort"

    # -- open and close --------------------------------------------------------------------

    def open(self) -> None:
        """Load and recover the files; any truncation is durable before this returns."""
        if self.is_open:
            raise StoreError("store is already open")
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock_dir()
        try:
            self._open_locked()
        except BaseException:
            self._close_files()
            raise
        self.is_open = True

    def _open_locked(self) -> None:
        for sub in ("commitlog", "consumequeue"):
            (self.directory / sub).mkdir(exist_ok=True)
            self.fs_sync.watch(self.directory / sub)  # before anything is written
        fsync_dir(self.directory)
        self.commitlog.load()
        try:
            checkpoint = load_checkpoint(self._checkpoint_path)
        except StoreError as exc:
            log.warning(f"ignoring the checkpoint: {exc}; validating the whole commitlog")
            checkpoint = None
        unclean = self._abort_path.exists()
        if unclean:
            log.warning("store was not closed cleanly: recovering", data_dir=str(self.directory))
        repaired = bool(self.commitlog.repaired)
        corruption = self.corruption
        corruption.load_skipped(self.directory / SKIPPED_FILE)
        self._recovering = True
        try:
            result = recover(
                self.commitlog,
                self.queues,
                checkpoint=checkpoint,
                clean=not unclean and not repaired and checkpoint is not None,
                given_up=corruption.given_up,
            )
        finally:
            self._recovering = False
        for queue in self.queues:
            self._queue_loaded(queue)
        corruption.resolve_skipped()
        corruption.damaged = [d for d in result.damaged if not d.cut]
        counts = corruption.counts
        counts["segment_short"] += len(self.commitlog.repaired)
        counts["recovery_quarantined"] += sum(
            1 for d in corruption.damaged if not corruption.given_up(d.offset, d.size)
        )
        counts["recovery_cut"] += len(result.damaged) - len(corruption.damaged)
        self.queues.delete_below(self.commitlog.min_offset, pending_files=False)
        # Recovered bytes may exist only in the page cache: make them durable before serving.
        synced = {*self.commitlog.segments_between(result.scanned_from, result.end)}
        for seg in synced.union(result.touched):
            seg.fsync()
        self._sync_tracked(0)
        fsync_dir(self.commitlog.directory)
        self.flushed = self.dispatched = result.end
        self.confirm = min(self._last_confirm(checkpoint), result.end)
        self._confirm_file = ConfirmFile.open(self._confirm_path, self.confirm)
        self._write_checkpoint(force=True)
        self._open_index()
        self._abort_path.touch()
        fsync_dir(self.directory)

    def _last_confirm(self, checkpoint: Checkpoint | None) -> int:
        """The confirm offset before this open: the larger of the checkpoint's (as of the last
        flush) and the confirm file's (as of the last change, unless the machine itself
        crashed)."""
        try:
            kept = read_confirm_file(self._confirm_path)
        except ConfirmFileError as exc:
            log.warning(f"ignoring the confirm offset file: {exc}; using the checkpoint's")
            kept = None
        return max(checkpoint.confirm_offset if checkpoint else 0, kept or 0)

    def _queue_loaded(self, queue: ConsumeQueue) -> None:
        """A queue just loaded (at the open, or when first used after a clean stop): one whose
        load found unwritten entries inside it, or whose segment files were gone, is rebuilt
        from the CommitLog (a lost one once the recovery's replay is done, which it replaces)."""
        if queue in self.queues.lost:
            if not self._recovering:
                self.corruption.restore_lost(queue)
            return
        if queue.holes:
            self.corruption.rebuild_queue(queue, queue.holes[0], "is unwritten inside the queue")

    def _open_index(self) -> None:
        """Load the key index and index what it lacks (or, with the index off, remove its files:
        turned on again later, it is rebuilt rather than trusted across the gap)."""
        if self.index is None:
            directory = self.config.index_config().directory
            if directory.exists():
                shutil.rmtree(directory)
                log.info("index_enable is off: key index files removed")
            return
        began = time.monotonic()
        try:
            indexed = self.index.open(self.commitlog)
        except (StoreError, OSError) as exc:  # the messages are fine; lookups by key lag
            log.error(f"key index not opened: {exc}; it is rebuilt on the next write")
            return
        stats = self.index.stats()
        if indexed or stats.rebuilt_files:
            log.info(
                f"key index: {indexed} commitlog bytes indexed on open",
                files=stats.files,
                rebuilt_files=stats.rebuilt_files,
                seconds=round(time.monotonic() - began, 3),
            )

    def close(self) -> None:
        """Flush everything, write the checkpoint and remove the abort marker (a clean stop)."""
        if not self.is_open:
            return
        self.flush()
        with self._flush_lock:
            self._write_checkpoint(force=True)
            self.is_open = False
        self._abort_path.unlink(missing_ok=True)
        fsync_dir(self.directory)
        self._close_files()

    def _close_files(self) -> None:
        """Close the index, the CommitLog, the ConsumeQueues and the sync thread, then give up
        the directory's lock: the end of a clean stop and of an open that failed."""
        if self.index is not None:
            self.index.close()
        if self._confirm_file is not None:
            self._confirm_file.close()
            self._confirm_file = None
        self.commitlog.close()
        self.queues.close()
        self.fs_sync.close()
        self._unlock_dir()

    def _lock_dir(self) -> None:
        fd = os.open(self.directory / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise StoreError(f"{self.directory} is in use by another store") from None
        self._lock_fd = fd

    def _unlock_dir(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- durability ------------------------------------------------------------------------

    def raise_confirm(self, offset: int) -> None:
        """Raise the confirm offset to ``offset``, clamped at the CommitLog's write position. It
        never moves back here (a lower value is ignored): only :meth:`cut` lowers it."""
        offset = min(offset, self.commitlog.write_pos)
        if offset > self.confirm:
            self._set_confirm(offset)

    def _set_confirm(self, offset: int) -> None:
        """The confirm offset now, and in the confirm file (once open)."""
        self.confirm = offset
        if self._confirm_file is not None:
            self._confirm_file.write(offset)

    def flush(self, least_pages: int = 0) -> int:
        """fsync the CommitLog, then the ConsumeQueue segments written since they were last
        synced (with ``least_pages``, only those whose new entries cross that many page
        boundaries), then write the checkpoint; returns the CommitLog offset now durable (the
        write position when the flush started). The checkpoint's dispatched offset moves to it
        only when no written segment is left unsynced.

        Safe to run in one worker thread while the event-loop thread puts and gets."""
        with self._flush_lock:
            if not self.is_open:
                return self.flushed
            # Every record below the write position has its entries written and marked: a put
            # (or a replica's append) writes them before it moves the write position.
            target = self.commitlog.write_pos
            for seg in self.commitlog.segments_between(self.flushed, target):
                seg.fsync()
            if self._sync_tracked(least_pages):
                self.dispatched = max(self.dispatched, target)
            self.flushed = max(self.flushed, target)
            self._write_checkpoint()
            self.commitlog.warm(target, self.config.warm_ahead_bytes)
            return target

    def cut(self, offset: int) -> int:
        """Durably cut the CommitLog, the ConsumeQueues and their max offsets back to ``offset``
        (a record boundary), lowering the flushed and confirm offsets to it if above, dropping
        the damaged ranges and key index entries past it. Returns the write position before."""
        commitlog = self.commitlog
        end = commitlog.write_pos
        if not commitlog.min_offset <= offset <= end:
            raise StoreError(
                f"cannot truncate to {offset}: the commitlog is [{commitlog.min_offset}, {end}]"
            )
        if not is_record_boundary(commitlog, offset):
            raise StoreError(f"cannot truncate to {offset}: not a record boundary")
        with self._flush_lock:
            _, touched = commitlog.truncate(offset, dirty_end=end)
            for seg_ in touched:
                seg_.fsync()
            self.queues.truncate_physical(offset)
            self._sync_tracked(0)
            fsync_dir(commitlog.directory)
            self.dispatched = offset  # every written entry synced, none at or past the cut
            self.flushed = min(self.flushed, offset)
            if offset < self.confirm:
                self._set_confirm(offset)
            self._write_checkpoint(force=True)
        corruption = self.corruption
        corruption.damaged = [
            d for d in corruption.damaged if d.offset < offset
        ]  # cut with the log
        if self.index is not None:
            self.index.truncate(offset, commitlog)
        return end

    def _sync_tracked(self, least_pages: int) -> bool:
        """Make every marked directory durable, and every marked file (with ``least_pages``,
        those whose writes cross that many page boundaries; when that makes enough of them
        for one ``syncfs``, which writes back everything anyway, every one). Returns whether no
        file is left marked with writes. When that fails, they stay marked (and the checkpoint
        is not moved past them): the next flush tries them again rather than trusting files it
        never synced."""
        tracker = self.tracker
        files, dirs = tracker.take(least_pages)
        try:
            if len(files) + len(dirs) >= SYNCFS_FROM and self.fs_sync.available:
                if least_pages > 0:
                    files += tracker.take(0)[0]  # taken before the syncfs that covers them
                    least_pages = 0
                if self._syncfs(files, dirs):
                    return True
            for seg in files:
                seg.fsync()
            for directory in dirs:
                with contextlib.suppress(FileNotFoundError):
                    fsync_dir(directory)
        except BaseException:
            for seg in files:
                tracker.mark(seg)
            for directory in dirs:
                tracker.mark_dir(directory)
            raise
        return least_pages <= 0 or not tracker.holds_writes()

    def _syncfs(self, files: list[Segment], dirs: list[Path]) -> bool:
        """Many files and directories to make durable (new queues: each a file and a
        directory): one ``syncfs`` of each file system they are on instead of an fsync each
        (50,000 new queues took the flush minutes). False where the system has none."""
        by_device: dict[int, Path] = {}
        for path in [*(seg.path for seg in files), *dirs]:
            try:
                by_device.setdefault(os.stat(path).st_dev, path)
            except FileNotFoundError:
                continue  # deleted since it was marked: nothing to make durable
        return all(self.fs_sync.sync(path) for path in by_device.values())

    def _write_checkpoint(self, *, force: bool = False) -> None:
        """Persist the flushed, dispatched (never above the flushed) and confirm offsets; caller
        holds the flush lock or is opening."""
        dispatched = min(self.dispatched, self.flushed)
        state = (self.flushed, dispatched, self.confirm)
        if not force and state == self._checkpointed:
            return
        save_checkpoint(
            self._checkpoint_path,
            Checkpoint(
                flushed_offset=self.flushed,
                dispatched_offset=dispatched,
                confirm_offset=self.confirm,
                timestamp_ms=time.time_ns() // 1_000_000,
            ),
        )
        self._checkpointed = state
