"""All ConsumeQueues of a store, by topic and queue id: ``<data_dir>/consumequeue/<topic>/<id>/``."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import structlog

from storage.consumequeue import ConsumeQueue
from storage.errors import StoreError
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
    def __init__(self, root: Path, entries_per_segment: int, tracker: FileTracker) -> None:
        self.root = root
        self._per_segment = entries_per_segment
        self._tracker = tracker
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._by_topic: dict[str, dict[int, ConsumeQueue]] = {}

    def __iter__(self) -> Iterator[ConsumeQueue]:
        return iter(list(self._queues.values()))

    def __len__(self) -> int:
        return len(self._queues)

    def load(self, trusted_physical: int, *, scrub: bool) -> None:
        """Open every queue found on disk (see :meth:`ConsumeQueue.load`)."""
        self.root.mkdir(parents=True, exist_ok=True)
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

    def _new(self, topic: str, queue_id: int) -> ConsumeQueue:
        queue = ConsumeQueue(
            self.root / topic / str(queue_id), topic, queue_id, self._per_segment, self._tracker
        )
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
