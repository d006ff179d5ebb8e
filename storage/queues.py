"""All ConsumeQueues of a store, by topic and queue id: ``<data_dir>/consumequeue/<topic>/<id>/``.

A deleted topic's queues are *retired* (:meth:`ConsumeQueues.retire_topic`): their files go and
``<data_dir>/retiredQueues.json`` (a small file, ``{"version": 1, "retired": {topic: {queueId:
next}}}``) keeps where each ended. A queue of that name created again starts empty at that
offset, so queue offsets never repeat on any replica, and records of the old topic that a
replica replays later (a slave behind the master, recovery) are not dispatched: their queue
offsets lie below the mark (:class:`storage.dispatch.Replayer`).
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Final

import structlog

from storage.consumequeue import ConsumeQueue, SegmentMaps
from storage.errors import StoreError
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
    ) -> None:
        self.root = root
        self.maps = SegmentMaps(mapped_limit)
        """The queues' segments kept mapped, at most ``mapped_limit`` at once (None: as the
        process's descriptor limit allows, :func:`storage.consumequeue.mapped_limit`)."""
        self._per_segment = entries_per_segment
        self._tracker = tracker
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._by_topic: dict[str, dict[int, ConsumeQueue]] = {}
        self._retired_path = root.parent / "retiredQueues.json"
        self._retired: dict[str, dict[int, int]] = {}
        """Deleted topics (by name) and where each of their queues ended (next queue offset)."""
        self.on_append: Callable[[ConsumeQueue, int, Sequence[int]], None] | None = None
        """Given to every queue as :attr:`ConsumeQueue.appended` (the property filter index)."""

    def __iter__(self) -> Iterator[ConsumeQueue]:
        return iter(list(self._queues.values()))

    def __len__(self) -> int:
        return len(self._queues)

    def load(self, trusted_physical: int, *, scrub: bool) -> None:
        """Open every queue found on disk (see :meth:`ConsumeQueue.load`)."""
        self.root.mkdir(parents=True, exist_ok=True)
        self._retired = _load_retired(self._retired_path)
        for topic_dir in sorted(self.root.iterdir()):
            if not topic_dir.is_dir() or topic_error(topic_dir.name) is not None:
                log.warning(f"ignoring {topic_dir}: not a consume queue directory")
                continue
            for queue_dir in sorted(topic_dir.iterdir()):
                if not (queue_dir.is_dir() and queue_dir.name.isdigit()):
                    log.warning(f"ignoring {queue_dir}: not a consume queue directory")
                    continue
                queue = self._new(topic_dir.name, int(queue_dir.name))
                queue.load(trusted_physical, scrub=scrub)
                if not queue.segments:
                    self._forget(queue)
                    if topic_dir.name in self._retired:
                        # A deleted topic's queue: its files went, its directory goes now.
                        shutil.rmtree(queue_dir, ignore_errors=True)
            if topic_dir.is_dir() and not any(topic_dir.iterdir()):
                topic_dir.rmdir()

    def _new(self, topic: str, queue_id: int) -> ConsumeQueue:
        queue = ConsumeQueue(
            self.root / topic / str(queue_id),
            topic,
            queue_id,
            self._per_segment,
            self._tracker,
            self.maps,
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
        return self._queues.get((topic, queue_id))

    def get_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        queue = self._queues.get((topic, queue_id))
        if queue is None:
            error = topic_error(topic) or queue_id_error(queue_id)
            if error is not None:
                raise StoreError(error)
            queue = self._new(topic, queue_id)
        return queue

    def topics(self) -> list[str]:
        return sorted(self._by_topic)

    def queue_ids(self, topic: str) -> list[int]:
        return sorted(self._by_topic.get(topic, ()))

    def expected_offset(self, topic: str, queue_id: int) -> tuple[int, bool]:
        """(next queue offset, exact): an empty queue accepts any offset at or past it."""
        queue = self._queues.get((topic, queue_id))
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
                self._tracker.retire(seg)
            queue.segments = []
            self._forget(queue)
        return dict(marks)

    def truncate_physical(self, physical: int) -> bool:
        """Drop every entry for a record at or past CommitLog offset ``physical``."""
        changed = False
        for queue in self._queues.values():
            changed |= queue.truncate_physical(physical)
        return changed

    def delete_below(self, physical: int) -> int:
        return sum(queue.delete_below(physical) for queue in self._queues.values())

    def forget_if_unused(self, queue: ConsumeQueue) -> None:
        """Drop a queue that never got a segment (its first write failed)."""
        if not queue.segments and queue.max_offset == 0 and self._queues.get(queue.key) is queue:
            self._forget(queue)

    def close(self) -> None:
        for queue in self._queues.values():
            queue.close()
        self._queues.clear()
        self._by_topic.clear()


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
