"""The broker's small config files: topic config, consumer offsets, subscription groups and
the DLQ resend ledger, under ``<data_dir>/config/``.

All are JSON written with :func:`storage.small_file.write_atomic` (checksummed, with a ``.bak``)::

    topics.json           {"version": 1, "topics": {"<topic>": {"queues": 8, "perm"?: 4,
                           "messageType"?: "FIFO"}}}   (perm, messageType: when not 6, NORMAL)
    topics.journal        past 256 topics, the changes since topics.json was written, a JSON
                          line each: {"topic": "<topic>", "queues": 8, ...} or {"topic":
                          "<topic>", "deleted": true} (plain appends, not checksummed)
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
import os
import secrets
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import structlog

from protocol.retry import RetryConfigError, SubscriptionGroupConfig, config_from_dict
from protocol.topic_attrs import TopicAttrs, attrs_from, put_attrs
from storage.errors import StoreError
from storage.offset_changes import OffsetChangeLog
from storage.queues import topic_error
from storage.small_file import fsync_dir, read_atomic, write_atomic, write_atomic_parts

VERSION: Final = 1
log = structlog.get_logger(__name__)
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


def _dump_json(path: Path, key: str, table: dict[str, Any], **extra: object) -> None:
    doc = {"version": VERSION, key: table, **extra}
    write_atomic(path, json.dumps(doc, sort_keys=True).encode())


_DEFAULT_ATTRS: Final = TopicAttrs()


@dataclass(frozen=True, slots=True)
class TopicConfig:
    topic: str
    queues: int
    attrs: TopicAttrs = _DEFAULT_ATTRS
    """The topic's permission and message type (:mod:`protocol.topic_attrs`)."""


JOURNAL_FROM: Final = 256
"""Topics from which a change is appended to ``topics.journal`` instead of rewriting the table."""


class TopicConfigStore:
    """Topics this broker serves and their queue counts; every change is persisted at once.

    Up to :data:`JOURNAL_FROM` topics a change rewrites ``topics.json`` whole. Past it a change
    is appended to ``topics.journal`` (one JSON line, fsynced: ``{"topic", "queues", ...}`` or
    ``{"topic", "deleted": true}``), and the table is rewritten (then the journal emptied) once
    the journal holds as many lines as the table had topics when last written (each change
    then costs O(1) amortised): rewriting the whole table for
    every topic cost O(topics) a change, 47 ms at 6,250 topics, on the broker's event loop
    (issue 34). :meth:`load` reads the table, then the journal's lines in order (a torn last
    line, never acknowledged, is left out)."""

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / "config" / "topics.json"
        self.journal = self.path.with_name("topics.journal")
        self._topics: dict[str, TopicConfig] = {}
        self._journaled = 0
        self._in_table = 0
        """Topics the table held when last written (the journal is folded in at as many lines)."""
        self.incarnation = secrets.token_hex(8)
        """Chosen when the store is made: a version is only comparable within one incarnation."""
        self.version = 0
        """Moves with every load and change: a slave that copied this version has the table
        (GET_ALL_TOPIC_CONFIG answers it ``unchanged``)."""

    def load(self) -> None:
        topics: dict[str, TopicConfig] = {}
        for name, entry in _load_json(self.path, "topics").items():
            topics[name] = self._entry(name, entry)
        self._in_table = len(topics)
        self._journaled = 0
        for name, entry in self._journal_lines():
            self._journaled += 1
            if entry.get("deleted") is True:
                topics.pop(name, None)
            else:
                topics[name] = self._entry(name, entry)
        self._topics = topics
        self.version += 1

    def _entry(self, name: str, entry: Any) -> TopicConfig:
        try:
            return TopicConfig(name, int(entry["queues"]), attrs_from(entry))
        except (KeyError, TypeError, ValueError):
            raise StoreError(f"{self.path}: bad entry for topic {name!r}") from None

    def _journal_lines(self) -> list[tuple[str, dict[str, Any]]]:
        try:
            raw = self.journal.read_bytes()
        except FileNotFoundError:
            return []
        lines = raw.split(b"\n")
        complete, torn = lines[:-1], lines[-1]  # bytes after the last newline: a torn append
        if torn:  # cut, so that the next append starts a line of its own
            log.warning(f"{self.journal}: a torn last line left out ({len(torn)} bytes)")
            self._cut_journal(len(raw) - len(torn))
        found = []
        for number, line in enumerate(complete, 1):
            try:
                entry = json.loads(line)
                name = entry["topic"]
                if not isinstance(entry, dict) or not isinstance(name, str):
                    raise ValueError("not a topic change")
            except (ValueError, KeyError, TypeError):
                raise StoreError(f"{self.journal}: line {number} is not valid") from None
            found.append((name, entry))
        return found

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
        self._change(topic, config, put_attrs({"topic": topic, "queues": queues}, attrs))
        return config

    def delete(self, topic: str) -> None:
        """Forget ``topic`` (persisted at once); a no-op for an unknown one."""
        if topic not in self._topics:
            return
        self._change(topic, None, {"topic": topic, "deleted": True})

    def _change(self, topic: str, config: TopicConfig | None, line: dict[str, Any]) -> None:
        """Persist one change (the table rewritten, or the line appended), then apply it."""
        topics = dict(self._topics)
        if config is None:
            del topics[topic]
        else:
            topics[topic] = config
        if len(topics) < JOURNAL_FROM or self._journaled + 1 >= self._in_table:
            self._persist(topics)
            self._in_table = len(topics)
            if self._journaled:
                self._empty_journal()
        else:
            self._append(json.dumps(line, sort_keys=True).encode() + b"\n")
            self._journaled += 1
        self._topics = topics
        self.version += 1

    def _append(self, data: bytes) -> None:
        new = not self.journal.exists()
        fd = os.open(self.journal, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        if new:
            fsync_dir(self.journal.parent)

    def _empty_journal(self) -> None:
        """After the table holding every journaled change is durable."""
        self._cut_journal(0)
        self._journaled = 0

    def _cut_journal(self, size: int) -> None:
        fd = os.open(self.journal, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.ftruncate(fd, size)
            os.fsync(fd)
        finally:
            os.close(fd)

    def _persist(self, topics: dict[str, TopicConfig]) -> None:
        _dump_json(
            self.path,
            "topics",
            {t: put_attrs({"queues": c.queues}, c.attrs) for t, c in sorted(topics.items())},
        )


class ConsumerOffsetStore:
    """Committed consumer offsets, kept in memory and persisted by :meth:`persist`.

    ``commit`` and ``query`` run on the event loop. A persist re-encodes only the groups changed
    since the last one (each group's entries of the document are kept encoded between persists)
    and writes the whole document: :meth:`begin_persist`, :meth:`encode_some` a slice of groups
    at a time on the event loop, then :meth:`write_persisted` in a worker thread (the file's
    write and fsync); :meth:`persist` does all three at once.
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
        self._written_version = -1
        """The version of the last document written (a persist's older document is not
        written over it)."""
        self._encoded_offsets = _EncodedGroups()
        self._encoded_times = _EncodedGroups()
        self._unencoded: set[str] = set()
        """Groups changed since their entries were last encoded (commit adds, a persist
        encodes and removes)."""
        self.changes = OffsetChangeLog()
        """What changed since a counter: what a slave copying this table asks for."""
        self._consumed: dict[tuple[str, str], int] = {}
        """(group, topic) -> the group's offsets on the topic's queues summed, kept up to date
        by each change (the broker's per-second stats sample reads it, not the whole table)."""

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
            self._encoded_offsets = _EncodedGroups()
            self._encoded_times = _EncodedGroups()
            self._unencoded = offsets.keys() | times.keys()  # encoded at the first persist
            self.changes = OffsetChangeLog()  # counted from the loaded table
            self._consumed = {
                (group, topic): sum(queues.values())
                for group, topics in offsets.items()
                for topic, queues in topics.items()
            }

    def commit(
        self, group: str, topic: str, queue_id: int, offset: int, at_ms: int | None = None
    ) -> None:
        """Set the group's offset on a queue; ``at_ms``: record it as the queue's last consume
        time (the caller passes it when the offset moved, or a copied master's time)."""
        with self._lock:
            queues = self._offsets.setdefault(group, {}).setdefault(topic, {})
            key = (group, topic)
            self._consumed[key] = self._consumed.get(key, 0) + offset - queues.get(queue_id, 0)
            queues[queue_id] = offset
            if at_ms is not None:
                self._times.setdefault(group, {}).setdefault(topic, {})[queue_id] = at_ms
            self._version += 1
            self.changes.group_changed(group)
            self._unencoded.add(group)

    def query(self, group: str, topic: str, queue_id: int) -> int | None:
        return self._offsets.get(group, {}).get(topic, {}).get(queue_id)

    def delete_topic(self, topic: str) -> bool:
        """Forget every group's offsets on ``topic`` (deleteTopic); True when any existed."""
        with self._lock:
            touched: set[str] = set()
            for table in (self._offsets, self._times):
                for group in list(table):
                    if table[group].pop(topic, None) is not None:
                        touched.add(group)
                        if not table[group]:
                            del table[group]
            if touched:
                self._version += 1
                self.changes.topic_deleted(topic, sorted(touched))
                for group in touched:
                    self._consumed.pop((group, topic), None)
                self._unencoded |= touched
        return bool(touched)

    def delete_group(self, group: str) -> bool:
        """Forget ``group``'s offsets on every topic (deleteSubGroup); True when any existed."""
        with self._lock:
            topics = self._offsets.pop(group, None)
            found = topics is not None
            for topic in topics or ():
                self._consumed.pop((group, topic), None)
            self._times.pop(group, None)
            if found:
                self._version += 1
                self.changes.group_deleted(group)
                self._unencoded.add(group)
        return found

    def last_consume_ms(self, group: str, topic: str, queue_id: int) -> int | None:
        """When the group's offset on this queue last moved (epoch ms), None when unknown."""
        return self._times.get(group, {}).get(topic, {}).get(queue_id)

    def snapshot_times(self) -> dict[str, dict[str, dict[int, int]]]:
        """group -> topic -> queue id -> last consume time in epoch ms (a copy)."""
        with self._lock:
            return _copy_table(self._times, None)

    def consumed(self) -> dict[tuple[str, str], int]:
        """(group, topic) -> the group's committed offsets on the topic's queues summed (a copy;
        what :func:`broker.broker_stats.counters` computes from a whole snapshot)."""
        with self._lock:
            return dict(self._consumed)

    def groups(self) -> list[str]:
        with self._lock:
            return sorted(self._offsets)

    def snapshot(self) -> dict[str, dict[str, dict[int, int]]]:
        """group -> topic -> queue id -> committed offset (a copy)."""
        with self._lock:
            return _copy_table(self._offsets, None)

    def copy_since(
        self, incarnation: str | None, counter: int | None, limit: int = 0
    ) -> OffsetCopy:
        """What a slave copies: the groups changed after ``counter`` of ``incarnation`` (at
        most ``limit`` of them when > 0: ``more`` then) and the tombstones, or the whole table
        when that cannot be told (no counter, another incarnation, a trimmed tombstone:
        :mod:`storage.offset_changes`)."""
        with self._lock:
            log = self.changes
            delta = (
                None
                if incarnation is None or counter is None
                else log.since(incarnation, counter, limit)
            )
            if delta is None:
                return OffsetCopy(
                    incarnation=log.incarnation,
                    counter=log.counter,
                    delta=False,
                    offsets=_copy_table(self._offsets, None),
                    times=_copy_table(self._times, None),
                )
            return OffsetCopy(
                incarnation=log.incarnation,
                counter=delta.counter,
                delta=True,
                offsets=_copy_table(self._offsets, delta.groups),
                times=_copy_table(self._times, delta.groups),
                deleted_groups=delta.deleted_groups,
                deleted_topics=delta.deleted_topics,
                more=delta.more,
            )

    def persist(self) -> None:
        """Write the table atomically if it changed since the last persist (the groups changed
        since are encoded in the caller's thread)."""
        job = self.begin_persist()
        if job is not None:
            while not self.encode_some(job, 0):
                pass
            self.write_persisted(job)

    def begin_persist(self) -> OffsetsPersist | None:
        """A persist of what the table holds now, None when nothing changed since the last one.
        Its :meth:`encode_some` calls encode the groups changed since their last encoding (issue
        34: a persist that encoded the whole table, 10,000 groups, held the broker's event loop,
        or the GIL from a thread, for 0.15 to 0.3 s every 5 s)."""
        with self._lock:
            version = self._version
            if version == self._persisted_version and self.path.exists():
                return None
            pending = list(self._unencoded)
            return OffsetsPersist(version=version, pending=pending, changed=len(pending))

    def encode_some(self, job: OffsetsPersist, limit: int) -> bool:
        """Encode up to ``limit`` (0: all) of the groups ``job`` found changed; True once none is
        left (the job then holds every group's entries, to write). A group changed again meanwhile is encoded
        as it is now (and again at the next persist); one first committed meanwhile is left to
        the next persist, as is anything else after ``job.version``."""
        with self._lock:
            pending = job.pending
            count = len(pending) if limit <= 0 else min(limit, len(pending))
            for _ in range(count):
                group = pending.pop()
                if group in self._unencoded:  # else encoded already since the job began
                    self._unencoded.discard(group)
                    self._encoded_offsets.put(group, self._offsets.get(group))
                    self._encoded_times.put(group, self._times.get(group))
            if pending:
                return False
            # The entries in name order, by reference: joined and written in the worker thread.
            job.times = self._encoded_times.in_order()
            job.offsets = self._encoded_offsets.in_order()
            return True

    def write_persisted(self, job: OffsetsPersist) -> None:
        """Write ``job``'s document (:meth:`encode_some` returned True) atomically; from any
        thread (the entries are joined here). A document older than the last one written is not
        written."""
        with self._persist_lock:
            if job.version <= self._written_version and self.path.exists():
                return
            write_atomic_parts(self.path, job.document())
            self._written_version = job.version
        with self._lock:
            self._persisted_version = max(self._persisted_version, job.version)


@dataclass(slots=True, kw_only=True)
class OffsetsPersist:
    """One persist of :class:`ConsumerOffsetStore` under way."""

    version: int
    """The table's version when it began: everything committed up to it is in the document."""
    pending: list[str]
    """Groups still to encode."""
    changed: int
    """The groups changed since their last encoding when it began (its encoding work)."""
    times: list[str] = field(default_factory=list)
    offsets: list[str] = field(default_factory=list)
    """Once every group is encoded: each group's entry of each table, in name order."""

    def document(self) -> Iterator[bytes]:
        """The document's bytes, a slice of groups at a time: the same bytes json.dumps of the
        whole document (sort_keys) gives."""
        for head, entries in (
            ('{"lastConsumeMs": {', self.times),
            ('}, "offsets": {', self.offsets),
        ):
            yield head.encode()
            for i in range(0, len(entries), _JOIN_SLICE):
                sep = ", " if i else ""
                yield (sep + ", ".join(entries[i : i + _JOIN_SLICE])).encode()
        yield f'}}, "version": {json.dumps(VERSION)}}}'.encode()


_JOIN_SLICE: Final = 256
"""Group entries joined into one write of a persist (in the worker thread, holding the GIL)."""


class _EncodedGroups:
    """One table of the offsets document (``offsets`` or ``lastConsumeMs``): each group's entry
    encoded as JSON (``"group": {...}``), kept between persists, joined in name order (the
    bytes json.dumps of the whole table with sort_keys gives)."""

    __slots__ = ("order", "parts", "removed", "unsorted")

    def __init__(self) -> None:
        self.parts: dict[str, str] = {}
        self.order: list[str] = []
        """The groups of ``parts`` in name order (once re-sorted: ``unsorted``, ``removed``)."""
        self.unsorted = False
        self.removed = False

    def put(self, group: str, topics: dict[str, dict[int, int]] | None) -> None:
        """Encode ``group``'s entry (None: it has none)."""
        if topics is None:
            if self.parts.pop(group, None) is not None:
                self.removed = True
            return
        if group not in self.parts:
            self.order.append(group)
            self.unsorted = True
        encoded = json.dumps(_str_topics(topics), sort_keys=True)
        self.parts[group] = f"{json.dumps(group)}: {encoded}"

    def in_order(self) -> list[str]:
        """Every group's entry, in name order."""
        if self.removed:  # rare (a deleted group or topic): the order built again
            self.order = sorted(self.parts)
        elif self.unsorted:  # new groups appended to a sorted list: one run to merge
            self.order.sort()
        self.removed = self.unsorted = False
        return list(map(self.parts.__getitem__, self.order))


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCopy:
    """:meth:`ConsumerOffsetStore.copy_since`'s answer: ``delta`` False is the whole table."""

    incarnation: str
    counter: int
    delta: bool
    offsets: dict[str, dict[str, dict[int, int]]]
    times: dict[str, dict[str, dict[int, int]]]
    deleted_groups: list[str] = field(default_factory=list)
    deleted_topics: list[str] = field(default_factory=list)
    more: bool = False


def _copy_table(
    table: dict[str, dict[str, dict[int, int]]], groups: list[str] | None
) -> dict[str, dict[str, dict[int, int]]]:
    """A copy of ``groups``' entries of ``table`` (every group's: None; one not held is left
    out)."""
    names = table.keys() if groups is None else [g for g in groups if g in table]
    return {g: {topic: dict(queues) for topic, queues in table[g].items()} for g in names}


def _int_table(doc: dict[str, Any]) -> dict[str, dict[str, dict[int, int]]]:
    """group -> topic -> queue id -> integer, from its JSON form (string queue ids)."""
    return {
        group: {
            topic: {int(qid): int(value) for qid, value in queues.items()}
            for topic, queues in topics.items()
        }
        for group, topics in doc.items()
    }


def _str_topics(topics: dict[str, dict[int, int]]) -> dict[str, dict[str, int]]:
    return {
        topic: {str(q): v for q, v in sorted(queues.items())} for topic, queues in topics.items()
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


COVERED_STEP: Final = 64 * 1024 * 1024
"""How far the resend ledger's ``covered`` moves before a file write for it alone."""


class DlqResendLedger:
    """Which DLQ messages were re-sent to their topic, by group and DLQ queue offset (the DLQ
    topic has one queue), so resending them all twice sends each once. Loop thread only.

    The re-sent copies themselves (``DLQ_RESENT_FROM``, in the CommitLog) are the record this
    ledger indexes: ``covered`` is the CommitLog offset below which every copy is marked here,
    so a new master marks the copies from ``covered`` on that its predecessor wrote after the
    ledger it copied (:class:`broker.dlq.service.DeadLetterService`)."""

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / "config" / "dlqResent.json"
        self._resent: dict[str, set[int]] = {}
        self.covered = 0
        """Every re-sent copy below this CommitLog offset is marked (0: a ledger without the
        mark, or none: the whole CommitLog is looked through once)."""
        self._written = 0
        """``covered`` as the file holds it (a lower one is as true, for fewer bytes)."""

    def load(self) -> None:
        resent: dict[str, set[int]] = {}
        try:
            doc = _load_doc(self.path, "resent")
            for group, offsets in doc.get("resent", {}).items():
                resent[str(group)] = {int(o) for o in offsets}
            covered = doc.get("covered", 0)
            if type(covered) is not int or covered < 0:
                raise ValueError(covered)
        except (TypeError, ValueError):
            raise StoreError(f"{self.path}: bad resend ledger") from None
        self._resent = resent
        self.covered = self._written = covered

    def was_resent(self, group: str, queue_offset: int) -> bool:
        return queue_offset in self._resent.get(group, ())

    def mark(self, group: str, queue_offsets: list[int], covered: int | None = None) -> None:
        """Record the offsets as re-sent, and ``covered`` when given (persisted before
        returning)."""
        self.mark_all({group: queue_offsets}, covered)

    def mark_all(self, marks: dict[str, list[int]], covered: int | None = None) -> None:
        """Record each group's offsets as re-sent, and ``covered`` when given (it replaces the
        mark: a new master's log is the one that counts); persisted before returning, but a
        ``covered`` alone only once it moved back or by :data:`COVERED_STEP` (a start reads
        the CommitLog from the mark the file holds: at most that many bytes more)."""
        resent = dict(self._resent)
        changed = False
        for group, offsets in marks.items():
            have = resent.get(group, set())
            new = {int(o) for o in offsets} - have
            if new:
                resent[group] = have | new
                changed = True
        covered = self.covered if covered is None else covered
        if changed or covered < self._written or covered - self._written >= COVERED_STEP:
            self._persist(resent, covered)
            self._resent = resent
        self.covered = covered

    def forget(self, group: str) -> None:
        """Drop the group's marks (its dead-letter topic was deleted)."""
        if group in self._resent:
            resent = {g: o for g, o in self._resent.items() if g != group}
            self._persist(resent, self.covered)
            self._resent = resent

    def snapshot(self) -> dict[str, list[int]]:
        return {group: sorted(offsets) for group, offsets in self._resent.items()}

    def merge(self, table: dict[str, list[int]], covered: int | None = None) -> None:
        """Add a master's marks and take its ``covered`` (a slave copies them; None: the
        master sent none, the slave's stays)."""
        self.mark_all(table, covered)

    def _persist(self, resent: dict[str, set[int]], covered: int) -> None:
        self._written = covered
        _dump_json(
            self.path,
            "resent",
            {g: sorted(o) for g, o in sorted(resent.items())},
            covered=covered,
        )
