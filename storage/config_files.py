"""The broker's small config files: topic config, consumer offsets, subscription groups and
the DLQ resend ledger, under ``<data_dir>/config/``.

All are JSON written with :func:`storage.small_file.write_atomic` (checksummed, with a ``.bak``)::

    topics.json           {"version": 1, "topics": {"<topic>": {"queues": 8, "perm"?: 4,
                           "messageType"?: "FIFO"}}}   (perm, messageType: when not 6, NORMAL)
    consumerOffset.json   {"version": 1, "offsets": {"<group>": {"<topic>": {"<queueId>": 42}}},
                           "lastConsumeMs": {"<group>": {"<topic>": {"<queueId>": 1700000000000}}}}
    subscriptionGroup.json  {"version": 1, "groups": {"<group>": {"groupName": "<group>",
                             "retryMaxTimes": 16, "retryDelays": "10s 30s ...",
                             "consumeRetryEnable": true}}}
    dlqResent.json          {"version": 1, "resent": {"<group>": [<DLQ queue offsets>]}}

``lastConsumeMs`` (when a group last moved its offset on a queue, epoch ms) may be absent: a file
written before it existed loads with no times.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from protocol.retry import RetryConfigError, SubscriptionGroupConfig, config_from_dict
from protocol.topic_attrs import TopicAttrs, attrs_from, put_attrs
from storage.errors import StoreError
from storage.queues import topic_error
from storage.small_file import read_atomic, write_atomic

VERSION: Final = 1
MAX_QUEUES: Final = 1024


def _load_json(path: Path, key: str) -> dict[str, Any]:
    table: dict[str, Any] = _load_doc(path, key).get(key, {})
    return table


def _load_doc(path: Path, key: str, *optional: str) -> dict[str, Any]:
    """The whole document, checked to hold a ``key`` object and, when present, ``optional``
    objects; empty when the file does not exist."""
    raw = read_atomic(path)
    if raw is None:
        return {}
    try:
        doc = json.loads(raw)
        if not isinstance(doc, dict) or not isinstance(doc.get(key), dict):
            raise ValueError(f"no {key!r} object")
        for name in optional:
            if not isinstance(doc.get(name, {}), dict):
                raise ValueError(f"{name!r} is not an object")
    except ValueError as exc:
        raise StoreError(f"{path} is not valid: {exc}") from None
    return doc


def _dump_json(path: Path, key: str, table: dict[str, Any], **extra: dict[str, Any]) -> None:
    doc = {"version": VERSION, key: table, **extra}
    write_atomic(path, json.dumps(doc, sort_keys=True).encode())


_DEFAULT_ATTRS: Final = TopicAttrs()


@dataclass(frozen=True, slots=True)
class TopicConfig:
    topic: str
    queues: int
    attrs: TopicAttrs = _DEFAULT_ATTRS
    """The topic's permission and message type (:mod:`protocol.topic_attrs`)."""


class TopicConfigStore:
    """Topics this broker serves and their queue counts; every change is persisted at once."""

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / "config" / "topics.json"
        self._topics: dict[str, TopicConfig] = {}

    def load(self) -> None:
        topics: dict[str, TopicConfig] = {}
        for name, entry in _load_json(self.path, "topics").items():
            try:
                topics[name] = TopicConfig(name, int(entry["queues"]), attrs_from(entry))
            except (KeyError, TypeError, ValueError):
                raise StoreError(f"{self.path}: bad entry for topic {name!r}") from None
        self._topics = topics

    def get(self, topic: str) -> TopicConfig | None:
        return self._topics.get(topic)

    def all(self) -> dict[str, TopicConfig]:
        return dict(self._topics)

    def update(self, topic: str, queues: int, attrs: TopicAttrs | None = None) -> TopicConfig:
        """Create or change ``topic`` (``attrs`` None: keep its permission and message type,
        a new topic's the default)."""
        error = topic_error(topic)
        if error is not None:
            raise StoreError(error)
        if not 1 <= queues <= MAX_QUEUES:
            raise StoreError(f"queues must be 1..{MAX_QUEUES}")
        if attrs is None:
            current = self._topics.get(topic)
            attrs = _DEFAULT_ATTRS if current is None else current.attrs
        config = TopicConfig(topic, queues, attrs)
        topics = {**self._topics, topic: config}
        self._persist(topics)
        self._topics = topics
        return config

    def delete(self, topic: str) -> None:
        """Forget ``topic`` (persisted at once); a no-op for an unknown one."""
        if topic not in self._topics:
            return
        topics = {name: cfg for name, cfg in self._topics.items() if name != topic}
        self._persist(topics)
        self._topics = topics

    def _persist(self, topics: dict[str, TopicConfig]) -> None:
        _dump_json(
            self.path,
            "topics",
            {t: put_attrs({"queues": c.queues}, c.attrs) for t, c in sorted(topics.items())},
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
        self._times: dict[str, dict[str, dict[int, int]]] = {}
        """group -> topic -> queue id -> when the offset last moved (epoch ms)."""
        self._version = 0
        self._persisted_version = 0

    def load(self) -> None:
        try:
            doc = _load_doc(self.path, "offsets", "lastConsumeMs")
            offsets = _int_table(doc.get("offsets", {}))
            times = _int_table(doc.get("lastConsumeMs", {}))
        except (AttributeError, TypeError, ValueError):
            raise StoreError(f"{self.path}: bad consumer offset table") from None
        with self._lock:
            self._offsets = offsets
            self._times = times
            self._persisted_version = self._version

    def commit(
        self, group: str, topic: str, queue_id: int, offset: int, at_ms: int | None = None
    ) -> None:
        """Set the group's offset on a queue; ``at_ms``: record it as the queue's last consume
        time (the caller passes it when the offset moved, or a copied master's time)."""
        with self._lock:
            self._offsets.setdefault(group, {}).setdefault(topic, {})[queue_id] = offset
            if at_ms is not None:
                self._times.setdefault(group, {}).setdefault(topic, {})[queue_id] = at_ms
            self._version += 1

    def query(self, group: str, topic: str, queue_id: int) -> int | None:
        return self._offsets.get(group, {}).get(topic, {}).get(queue_id)

    def delete_topic(self, topic: str) -> bool:
        """Forget every group's offsets on ``topic`` (deleteTopic); True when any existed."""
        with self._lock:
            found = False
            for table in (self._offsets, self._times):
                for group in list(table):
                    if table[group].pop(topic, None) is not None:
                        found = True
                        if not table[group]:
                            del table[group]
            if found:
                self._version += 1
        return found

    def delete_group(self, group: str) -> bool:
        """Forget ``group``'s offsets on every topic (deleteSubGroup); True when any existed."""
        with self._lock:
            found = self._offsets.pop(group, None) is not None
            self._times.pop(group, None)
            if found:
                self._version += 1
        return found

    def last_consume_ms(self, group: str, topic: str, queue_id: int) -> int | None:
        """When the group's offset on this queue last moved (epoch ms), None when unknown."""
        return self._times.get(group, {}).get(topic, {}).get(queue_id)

    def snapshot_times(self) -> dict[str, dict[str, dict[int, int]]]:
        """group -> topic -> queue id -> last consume time in epoch ms (a copy)."""
        with self._lock:
            return {
                group: {topic: dict(queues) for topic, queues in topics.items()}
                for group, topics in self._times.items()
            }

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
            table = _str_table(self._offsets)
            times = _str_table(self._times)
        _dump_json(self.path, "offsets", table, lastConsumeMs=times)
        with self._lock:
            self._persisted_version = max(self._persisted_version, version)


def _int_table(doc: dict[str, Any]) -> dict[str, dict[str, dict[int, int]]]:
    """group -> topic -> queue id -> integer, from its JSON form (string queue ids)."""
    return {
        group: {
            topic: {int(qid): int(value) for qid, value in queues.items()}
            for topic, queues in topics.items()
        }
        for group, topics in doc.items()
    }


def _str_table(table: dict[str, dict[str, dict[int, int]]]) -> dict[str, Any]:
    return {
        group: {
            topic: {str(q): v for q, v in sorted(queues.items())}
            for topic, queues in topics.items()
        }
        for group, topics in table.items()
    }


class SubscriptionGroupStore:
    """Consumer groups' retry settings; a group nobody configured has the defaults. Every change
    is persisted at once (loop thread only)."""

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / "config" / "subscriptionGroup.json"
        self._groups: dict[str, SubscriptionGroupConfig] = {}

    def load(self) -> None:
        groups: dict[str, SubscriptionGroupConfig] = {}
        for name, entry in _load_json(self.path, "groups").items():
            if not isinstance(entry, dict) or entry.get("groupName") != name:
                raise StoreError(f"{self.path}: bad entry for group {name!r}")
            try:
                groups[name] = config_from_dict(entry)
            except RetryConfigError as exc:
                raise StoreError(f"{self.path}: group {name!r}: {exc}") from None
        self._groups = groups

    def get(self, group: str) -> SubscriptionGroupConfig:
        """The group's settings (the defaults when it was never configured)."""
        config = self._groups.get(group)
        return config if config is not None else SubscriptionGroupConfig(group)

    def configured(self, group: str) -> SubscriptionGroupConfig | None:
        return self._groups.get(group)

    def all(self) -> dict[str, SubscriptionGroupConfig]:
        return dict(self._groups)

    def update(self, doc: dict[str, Any]) -> SubscriptionGroupConfig:
        """Check ``doc`` (keys left out keep their current value) and store it; raises
        :class:`RetryConfigError` having stored nothing."""
        group = doc.get("groupName")
        base = self._groups.get(group) if isinstance(group, str) else None
        config = config_from_dict(doc, base)
        self.put(config)
        return config

    def delete(self, group: str) -> bool:
        """Forget the group's settings (deleteSubGroup); False when it had none."""
        if group not in self._groups:
            return False
        groups = {g: c for g, c in self._groups.items() if g != group}
        _dump_json(self.path, "groups", {g: c.to_dict() for g, c in sorted(groups.items())})
        self._groups = groups
        return True

    def put(self, config: SubscriptionGroupConfig) -> bool:
        """Store ``config``; False when it was already stored as is."""
        if self._groups.get(config.group) == config:
            return False
        groups = {**self._groups, config.group: config}
        _dump_json(self.path, "groups", {g: c.to_dict() for g, c in sorted(groups.items())})
        self._groups = groups
        return True


class DlqResendLedger:
    """Which DLQ messages were re-sent to their topic, by group and DLQ queue offset (the DLQ
    topic has one queue), so resending them all twice sends each once. Loop thread only."""

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / "config" / "dlqResent.json"
        self._resent: dict[str, set[int]] = {}

    def load(self) -> None:
        resent: dict[str, set[int]] = {}
        try:
            for group, offsets in _load_json(self.path, "resent").items():
                resent[str(group)] = {int(o) for o in offsets}
        except (TypeError, ValueError):
            raise StoreError(f"{self.path}: bad resend ledger") from None
        self._resent = resent

    def was_resent(self, group: str, queue_offset: int) -> bool:
        return queue_offset in self._resent.get(group, ())

    def mark(self, group: str, queue_offsets: list[int]) -> None:
        """Record the offsets as re-sent (persisted before returning)."""
        new = set(queue_offsets) - self._resent.get(group, set())
        if not new:
            return
        resent = {**self._resent, group: self._resent.get(group, set()) | new}
        self._persist(resent)
        self._resent = resent

    def forget(self, group: str) -> None:
        """Drop the group's marks (its dead-letter topic was deleted)."""
        if group in self._resent:
            resent = {g: o for g, o in self._resent.items() if g != group}
            self._persist(resent)
            self._resent = resent

    def snapshot(self) -> dict[str, list[int]]:
        return {group: sorted(offsets) for group, offsets in self._resent.items()}

    def merge(self, table: dict[str, list[int]]) -> None:
        """Add a master's marks (a slave copies them)."""
        resent = dict(self._resent)
        changed = False
        for group, offsets in table.items():
            have = resent.get(group, set())
            new = {int(o) for o in offsets} - have
            if new:
                resent[group] = have | new
                changed = True
        if changed:
            self._persist(resent)
            self._resent = resent

    def _persist(self, resent: dict[str, set[int]]) -> None:
        _dump_json(self.path, "resent", {g: sorted(o) for g, o in sorted(resent.items())})
