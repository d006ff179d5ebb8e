"""All ConsumeQueues of a store, by topic and queue id: ``<data_dir>/consumequeue/<topic>/<id>/``.

A deleted topic's queues are *retired* (:meth:`ConsumeQueues.retire_topic`): their files go and
``<data_dir>/retiredQueues.json`` (a small file, ``{"version": 1, "retired": {topic: {queueId:
next}}}``) keeps where each ended. A queue of that name created again starts empty at that
offset, so queue offsets never repeat on any replica, and records of the old topic that a
replica replays later (a slave behind the master, recovery) are not dispatched: their queue
offsets lie below the mark (:class:`storage.dispatch.Replayer`).

After a clean stop the queues are loaded when first used (:meth:`ConsumeQueues.load` with
``lazy``): the store's clean-shutdown marker says they agree with the CommitLog, so the open only
lists the topics' queue directories, and each queue opens its files (and is checked as an eager
load checks it) the first time it is asked for. After an unclean stop every queue is loaded and
checked at the open, as before.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Final

import structlog

from storage.consumequeue import (
    ALLOCATE_BYTES,
    OPEN_SEGMENTS,
    ConsumeQueue,
    SegmentFiles,
    SegmentMaps,
)
from storage.errors import StoreError
from storage.segment import list_segment_files
from storage.small_file import read_atomic, write_atomic
from storage.tracker import FileTracker

MAX_TOPIC_CHARS: Final = 255
_TOPIC_RE: Final = re.compile(r"[A-Za-z0-9_%|.\-]+")
MAX_QUEUE_ID: Final = 0x7FFFFFFF

log = structlog.get_logger(__name__)


def topic_error(topic: str) -> str | None:
    """Why ``topic`` cannot name a ConsumeQueue directory, or None if it can."""
    if not topic or len(topic) > MAX_TOPIC_CHARS:
        return f"topic must be 1..{MAX_TOPIC_CHARS} characters"
    if topic in (".", "..") or _TOPIC_RE.fullmatch(topic) is None:
        return f"topic {topic!r} may hold only letters, digits and _ % | . -"
    return None


def queue_id_error(queue_id: int) -> str | None:
    if not 0 <= queue_id <= MAX_QUEUE_ID:
        return f"queue id {queue_id} out of range"
    return None


class ConsumeQueues:
    def __init__(
        self,
        root: Path,
        entries_per_segment: int,
        tracker: FileTracker,
        mapped_limit: int | None = None,
        open_files: int = OPEN_SEGMENTS,
        allocate_bytes: int = ALLOCATE_BYTES,
    ) -> None:
        self.root = root
        self._allocate_bytes = allocate_bytes
        """The chunk the queues' sparse segments are given blocks in."""
        self.maps = SegmentMaps(mapped_limit)
        """The queues' segments kept mapped, at most ``mapped_limit`` at once (None: as the
        process's descriptor limit allows, :func:`storage.consumequeue.mapped_limit`)."""
        self.files = SegmentFiles(open_files)
        """The queues' segment files kept open for the reads and writes past the mapped ones,
        at most ``open_files`` (0: none; fewer under a low descriptor limit,
        :func:`storage.consumequeue.open_limit`)."""
        self._per_segment = entries_per_segment
        self._tracker = tracker
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._by_topic: dict[str, dict[int, ConsumeQueue]] = {}
        self._retired_path = root.parent / "retiredQueues.json"
        self._retired: dict[str, dict[int, int]] = {}
        """Deleted topics (by name) and where each of their queues ended (next queue offset)."""
        self.on_append: Callable[[ConsumeQueue, int, Sequence[int]], None] | None = None
        """Given to every queue as :attr:`ConsumeQueue.appended` (the property filter index)."""
        self.on_load: Callable[[ConsumeQueue], None] | None = None
        """Called with a queue loaded when first used after a lazy :meth:`load` (the store
        rebuilds one whose load found unwritten entries inside it, as the open does)."""
        self._pending: dict[str, dict[int, None]] = {}
        """Queues on disk not loaded yet (a lazy :meth:`load`), by topic: their queue ids."""
        self._pending_count = 0
        self._pending_trusted = 0
        """What a lazy :meth:`load` trusted: a pending queue keeps its entries below it."""
        self._pending_floor = 0
        """Retention's CommitLog offset (:meth:`delete_below`), applied to a pending queue when
        it is loaded."""
        self.lost: list[ConsumeQueue] = []
        """Queues whose directory held no segment file when they were loaded: retention never
        deletes a queue's last one, so the files were deleted or lost. Each is kept, empty,
        until the store rebuilds it from the CommitLog (``Corruption.restore_lost``); without
        that a write would give its queue offsets again from 0, and its records stay unseen."""

    def __iter__(self) -> Iterator[ConsumeQueue]:
        """The loaded queues (after a lazy :meth:`load`, not the ones still pending)."""
        return iter(list(self._queues.values()))

    def __len__(self) -> int:
        """Every queue: loaded and pending."""
        return len(self._queues) + self._pending_count

    @property
    def loaded(self) -> int:
        """Queues whose files are open (the rest are pending: loaded when first used)."""
        return len(self._queues)

    def pending_in(self, topic: str) -> int:
        """Queues of ``topic`` not loaded yet (a lazy :meth:`load`): the first read of each
        opens and searches its files."""
        return len(self._pending.get(topic, ()))

    def pending_ids(self, topic: str) -> list[int]:
        """The ids of ``topic``'s queues not loaded yet, ascending (see :meth:`pending_in`)."""
        return sorted(self._pending.get(topic, ()))

    def load(self, trusted_physical: int, *, scrub: bool, lazy: bool = False) -> None:
        """Open every queue found on disk (see :meth:`ConsumeQueue.load`). With ``lazy`` (after
        a clean stop, never with ``scrub``) only list them: each is loaded, keeping its entries
        below ``trusted_physical``, when first asked for (:meth:`get`); a deleted topic's queues
        are loaded (and their directories removed) at once."""
        self.root.mkdir(parents=True, exist_ok=True)
        self._retired = _load_retired(self._retired_path)
        lazy = lazy and not scrub
        self._pending_trusted = trusted_physical
        with os.scandir(self.root) as entries:
            topic_dirs = sorted(entries, key=lambda e: e.name)
        for topic_dir in topic_dirs:
            topic = topic_dir.name
            if not topic_dir.is_dir() or topic_error(topic) is not None:
                log.warning(f"ignoring {topic_dir.path}: not a consume queue directory")
                continue
            with os.scandir(topic_dir.path) as entries:
                queue_dirs = sorted(entries, key=lambda e: e.name)
            ids: dict[int, None] = {}
            for queue_dir in queue_dirs:
                if not (queue_dir.is_dir() and queue_dir.name.isdigit()):
                    log.warning(f"ignoring {queue_dir.path}: not a consume queue directory")
                    continue
                if lazy and topic not in self._retired:
                    ids[int(queue_dir.name)] = None
                else:
                    self._load_one(topic, int(queue_dir.name), trusted_physical, scrub)
            if ids:
                self._pending[topic] = ids
                self._pending_count += len(ids)
            else:
                _remove_if_empty(Path(topic_dir.path))

    def _load_one(
        self, topic: str, queue_id: int, trusted_physical: int, scrub: bool
    ) -> ConsumeQueue | None:
        """Load one queue's files; None (and the queue not kept) when it has none, unless its
        directory held no segment file at all: then it is kept and listed in :attr:`lost`."""
        queue = self._new(topic, queue_id)
        lost = topic not in self._retired and not list_segment_files(queue.directory)
        queue.load(trusted_physical, scrub=scrub)
        if queue.segments:
            return queue
        if lost:
            self.lost.append(queue)
            return queue
        self._forget(queue)
        if topic in self._retired:
            # A deleted topic's queue: its files went, its directory goes now.
            shutil.rmtree(queue.directory, ignore_errors=True)
        return None

    def _load_pending(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """Load a pending queue (None: it is not pending, or has no files)."""
        ids = self._pending.get(topic)
        if ids is None or queue_id not in ids:
            return None
        del ids[queue_id]
        self._pending_count -= 1
        if not ids:
            del self._pending[topic]
        queue = self._load_one(topic, queue_id, self._pending_trusted, False)
        if queue is None:
            return None
        if queue in self.lost:
            # Rebuilt from the CommitLog by the store (or forgotten when it holds none of its
            # records, as a queue without files is): the queue now registered is the answer.
            if self.on_load is not None:
                self.on_load(queue)
            return self._queues.get((topic, queue_id))
        if self._pending_floor:
            queue.delete_below(self._pending_floor)
        if self.on_load is not None:
            self.on_load(queue)
        return queue

    def _load_topic(self, topic: str) -> None:
        for queue_id in list(self._pending.get(topic, ())):
            self._load_pending(topic, queue_id)

    def load_all(self) -> None:
        """Load every pending queue."""
        for topic in list(self._pending):
            self._load_topic(topic)

    def _new(self, topic: str, queue_id: int) -> ConsumeQueue:
        queue = ConsumeQueue(
            self.root / topic / str(queue_id),
            topic,
            queue_id,
            self._per_segment,
            self._tracker,
            self.maps,
            self.files,
            self._allocate_bytes,
        )
        mark = self._retired.get(topic, {}).get(queue_id) if self._retired else None
        if mark:  # a deleted topic's queue made again: empty, where the old one ended
            queue.min_offset = queue.max_offset = mark
        queue.appended = self.on_append
        self._queues[(topic, queue_id)] = queue
        self._by_topic.setdefault(topic, {})[queue_id] = queue
        return queue

    def _forget(self, queue: ConsumeQueue) -> None:
        del self._queues[(queue.topic, queue.queue_id)]
        by_id = self._by_topic[queue.topic]
        del by_id[queue.queue_id]
        if not by_id:
            del self._by_topic[queue.topic]

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """The queue, loaded first if pending; None if there is none."""
        queue = self._queues.get((topic, queue_id))
        if queue is None and self._pending:
            queue = self._load_pending(topic, queue_id)
        return queue

    def get_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        queue = self.get(topic, queue_id)
        if queue is None:
            error = topic_error(topic) or queue_id_error(queue_id)
            if error is not None:
                raise StoreError(error)
            queue = self._new(topic, queue_id)
        return queue

    def topics(self) -> list[str]:
        """Topics with queues (a pending queue's topic is listed before its files are read)."""
        return sorted(self._by_topic.keys() | self._pending.keys())

    def queue_ids(self, topic: str) -> list[int]:
        self._load_topic(topic)
        return sorted(self._by_topic.get(topic, ()))

    def expected_offset(self, topic: str, queue_id: int) -> tuple[int, bool]:
        """(next queue offset, exact): an empty queue accepts any offset at or past it."""
        queue = self.get(topic, queue_id)
        if queue is None:
            return 0, False
        return queue.max_offset, not queue.is_empty

    def retired_next(self, topic: str, queue_id: int) -> int:
        """Where the deleted topic's queue of this name ended (0: never retired). Records below
        it are the old topic's and are not dispatched again."""
        return self._retired.get(topic, {}).get(queue_id, 0) if self._retired else 0

    def was_retired(self, topic: str) -> bool:
        """Was a topic of this name ever deleted here (:meth:`retire_topic`)?"""
        return topic in self._retired

    def retire_topic(self, topic: str, at_least: Mapping[int, int]) -> dict[int, int]:
        """Delete ``topic``'s ConsumeQueues and mark where each ended (at least ``at_least``'s
        offset per queue id: the group master's marks, for a replica behind it). The marks are
        durable before any file goes. Returns every mark of the topic, by queue id."""
        self._load_topic(topic)
        marks = dict(self._retired.get(topic, {}))
        for queue_id, queue in self._by_topic.get(topic, {}).items():
            marks[queue_id] = max(marks.get(queue_id, 0), queue.max_offset)
        for queue_id, offset in at_least.items():
            marks[queue_id] = max(marks.get(queue_id, 0), offset)
        marks = {q: m for q, m in sorted(marks.items()) if m}
        retired = {**self._retired, topic: marks}
        if retired != self._retired:
            _save_retired(self._retired_path, retired)
            self._retired = retired
        for queue in list(self._by_topic.get(topic, {}).values()):
            for seg in queue.segments:
                self.files.drop(seg)
                self.maps.drop(seg)
                self._tracker.retire(seg)
            queue.segments = []
            self._forget(queue)
        return dict(marks)

    def truncate_physical(self, physical: int) -> bool:
        """Drop every entry for a record at or past CommitLog offset ``physical``. Pending
        queues hold none at or past what their lazy load trusted; below it, every one is loaded
        first (a cut is rare: a slave's truncation to its master, damage at the log's end)."""
        if self._pending and physical < self._pending_trusted:
            self.load_all()
        changed = False
        for queue in self._queues.values():
            changed |= queue.truncate_physical(physical)
        return changed

    def delete_below(self, physical: int, *, pending_files: bool = True) -> int:
        """Retention: each queue's segments wholly below CommitLog offset ``physical`` go (see
        :meth:`ConsumeQueue.delete_below`); returns how many. A pending queue takes the offset
        when it is loaded; with ``pending_files`` one with more than one segment file (retention
        never deletes the last) is loaded now, so its old files go as a loaded queue's do."""
        if pending_files and self._pending:
            for topic, ids in list(self._pending.items()):
                for queue_id in list(ids):
                    if _entries(self.root / topic / str(queue_id)) > 1:
                        self._load_pending(topic, queue_id)
        self._pending_floor = max(self._pending_floor, physical)
        return sum(queue.delete_below(physical) for queue in self._queues.values())

    def forget(self, queue: ConsumeQueue) -> None:
        """Drop a queue that has no segment (nothing of it is on disk)."""
        if self._queues.get(queue.key) is queue:
            self._forget(queue)

    def reset(self, queue: ConsumeQueue) -> ConsumeQueue:
        """Delete ``queue``'s segments and put an empty queue of its name in its place."""
        for seg in queue.segments:
            self.files.drop(seg)
            self.maps.drop(seg)
            self._tracker.retire(seg)
        queue.segments = []
        self.forget(queue)
        return self._new(queue.topic, queue.queue_id)

    def forget_if_unused(self, queue: ConsumeQueue) -> None:
        """Drop a queue that never got a segment (its first write failed)."""
        if not queue.segments and queue.max_offset == 0 and self._queues.get(queue.key) is queue:
            self._forget(queue)

    def close(self) -> None:
        for queue in self._queues.values():
            queue.close()
        self.files.close()
        self._queues.clear()
        self._by_topic.clear()
        self._pending.clear()
        self._pending_count = 0
        self.lost.clear()


def _entries(directory: Path) -> int:
    try:
        with os.scandir(directory) as entries:
            return sum(1 for _ in entries)
    except OSError:
        return 0


def _remove_if_empty(directory: Path) -> None:
    if directory.is_dir() and not any(directory.iterdir()):
        directory.rmdir()


def _load_retired(path: Path) -> dict[str, dict[int, int]]:
    raw = read_atomic(path)
    if raw is None:
        return {}
    try:
        doc = json.loads(raw)
        return {
            str(topic): {int(queue_id): int(offset) for queue_id, offset in queues.items()}
            for topic, queues in doc["retired"].items()
        }
    except (ValueError, KeyError, TypeError, AttributeError):
        raise StoreError(f"{path} is not a valid table of retired queues") from None


def _save_retired(path: Path, retired: Mapping[str, Mapping[int, int]]) -> None:
    table = {t: {str(q): m for q, m in sorted(marks.items())} for t, marks in retired.items()}
    write_atomic(path, json.dumps({"version": 1, "retired": table}, sort_keys=True).encode())
