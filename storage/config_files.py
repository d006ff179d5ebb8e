"""The broker's small config files: topic config and consumer offsets, under ``<data_dir>/config/``.

Both are JSON written with :func:`storage.small_file.write_atomic` (checksummed, with a ``.bak``)::

    topics.json           {"version": 1, "topics": {"<topic>": {"queues": 8}}}
    consumerOffset.json   {"version": 1, "offsets": {"<group>": {"<topic>": {"<queueId>": 42}}}}
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from storage.errors import StoreError
from storage.queues import topic_error
from storage.small_file import read_atomic, write_atomic

VERSION: Final = 1
MAX_QUEUES: Final = 1024


def _load_json(path: Path, key: str) -> dict[str, Any]:
    raw = read_atomic(path)
    if raw is None:
        return {}
    try:
        doc = json.loads(raw)
        if not isinstance(doc, dict) or not isinstance(doc.get(key), dict):
            raise ValueError(f"no {key!r} object")
    except ValueError as exc:
        raise StoreError(f"{path} is not valid: {exc}") from None
    table: dict[str, Any] = doc[key]
    return table


def _dump_json(path: Path, key: str, table: dict[str, Any]) -> None:
    write_atomic(path, json.dumps({"version": VERSION, key: table}, sort_keys=True).encode())


@dataclass(frozen=True, slots=True)
class TopicConfig:
    topic: str
    queues: int


class TopicConfigStore:
    """Topics this broker serves and their queue counts; every change is persisted at once."""

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / "config" / "topics.json"
        self._topics: dict[str, TopicConfig] = {}

    def load(self) -> None:
        topics: dict[str, TopicConfig] = {}
        for name, entry in _load_json(self.path, "topics").items():
            try:
                topics[name] = TopicConfig(name, int(entry["queues"]))
            except (KeyError, TypeError, ValueError):
                raise StoreError(f"{self.path}: bad entry for topic {name!r}") from None
        self._topics = topics

    def get(self, topic: str) -> TopicConfig | None:
        return self._topics.get(topic)

    def all(self) -> dict[str, TopicConfig]:
        return dict(self._topics)

    def update(self, topic: str, queues: int) -> TopicConfig:
        error = topic_error(topic)
        if error is not None:
            raise StoreError(error)
        if not 1 <= queues <= MAX_QUEUES:
            raise StoreError(f"queues must be 1..{MAX_QUEUES}")
        config = TopicConfig(topic, queues)
        topics = {**self._topics, topic: config}
        self._persist(topics)
        self._topics = topics
        return config

    def delete(self, topic: str) -> None:
        if topic not in self._topics:
            return
        topics = {name: cfg for name, cfg in self._topics.items() if name != topic}
        self._persist(topics)
        self._topics = topics

    def _persist(self, topics: dict[str, TopicConfig]) -> None:
        _dump_json(
            self.path, "topics", {t: {"queues": c.queues} for t, c in sorted(topics.items())}
        )


class ConsumerOffsetStore:
    """Committed consumer offsets, kept in memory and persisted by :meth:`persist`.

    ``commit`` and ``query`` run on the event loop; ``persist`` may run in a worker thread.
    """

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / "config" / "consumerOffset.json"
        self._lock = threading.Lock()
        self._persist_lock = threading.Lock()
        self._offsets: dict[str, dict[str, dict[int, int]]] = {}
        self._version = 0
        self._persisted_version = 0

    def load(self) -> None:
        offsets: dict[str, dict[str, dict[int, int]]] = {}
        try:
            for group, topics in _load_json(self.path, "offsets").items():
                offsets[group] = {
                    topic: {int(qid): int(off) for qid, off in queues.items()}
                    for topic, queues in topics.items()
                }
        except (AttributeError, TypeError, ValueError):
            raise StoreError(f"{self.path}: bad consumer offset table") from None
        with self._lock:
            self._offsets = offsets
            self._persisted_version = self._version

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        with self._lock:
            self._offsets.setdefault(group, {}).setdefault(topic, {})[queue_id] = offset
            self._version += 1

    def query(self, group: str, topic: str, queue_id: int) -> int | None:
        return self._offsets.get(group, {}).get(topic, {}).get(queue_id)

    def groups(self) -> list[str]:
        with self._lock:
            return sorted(self._offsets)

    def snapshot(self) -> dict[str, dict[str, dict[int, int]]]:
        """group -> topic -> queue id -> committed offset (a copy)."""
        with self._lock:
            return {
                group: {topic: dict(queues) for topic, queues in topics.items()}
                for group, topics in self._offsets.items()
            }

    def persist(self) -> None:
        """Write the table atomically if it changed since the last persist."""
        with self._persist_lock:
            self._persist()

    def _persist(self) -> None:
        with self._lock:
            version = self._version
            if version == self._persisted_version and self.path.exists():
                return
            table = {
                group: {
                    topic: {str(q): o for q, o in sorted(queues.items())}
                    for topic, queues in topics.items()
                }
                for group, topics in self._offsets.items()
            }
        _dump_json(self.path, "offsets", table)
        with self._lock:
            self._persisted_version = max(self._persisted_version, version)
