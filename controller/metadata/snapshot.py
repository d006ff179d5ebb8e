"""Snapshot encoding of the metadata state machine: same state, same bytes.

Layout: one msgpack array, groups ascending by broker name, ids ascending::

    ["rmq-metadata", version, [group, ...]]
    group = [broker_name, cluster, next_assign_broker_id, master_broker_id | nil, master_epoch,
             [sync_state_set ids], sync_state_set_epoch, [[broker_id, address, register_code], ...],
             [[topic, queues], ...]]                                   (version 2 only)

Version 2 adds each group's topics (ascending by name). A state without topics is written as
version 1, byte for byte what controllers before topics wrote, and both versions are read, so
a controller restarts on a snapshot written before topics existed.

:func:`decode_groups` raises :class:`SnapshotError`, and nothing else, on bytes that are not such
a snapshot or describe a state that breaks the invariants of group.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import pairwise
from typing import Any, Final

import msgpack

from controller.metadata.events import (
    check_broker_id,
    check_epoch,
    check_name,
    check_queues,
    check_text,
    check_topic,
)
from controller.metadata.group import BrokerGroup, BrokerRecord

SNAPSHOT_MAGIC: Final = "rmq-metadata"
SNAPSHOT_VERSION: Final = 2
SNAPSHOT_VERSION_NO_TOPICS: Final = 1


class SnapshotError(ValueError):
    """Bytes that are not a valid metadata snapshot."""


def encode_groups(groups: Mapping[str, BrokerGroup]) -> bytes:
    with_topics = any(g.topics for g in groups.values())
    body: list[Any] = []
    for name in sorted(groups):
        g = groups[name]
        fields: list[Any] = [
            g.broker_name,
            g.cluster,
            g.next_assign_broker_id,
            g.master_broker_id,
            g.master_epoch,
            sorted(g.sync_state_set),
            g.sync_state_set_epoch,
            [
                [broker_id, g.brokers[broker_id].address, g.brokers[broker_id].register_code]
                for broker_id in sorted(g.brokers)
            ],
        ]
        if with_topics:
            fields.append([[topic, g.topics[topic]] for topic in sorted(g.topics)])
        body.append(fields)
    version = SNAPSHOT_VERSION if with_topics else SNAPSHOT_VERSION_NO_TOPICS
    packed: bytes = msgpack.packb([SNAPSHOT_MAGIC, version, body], use_bin_type=True)
    return packed


def _array(what: str, value: object, length: int | None = None) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"{what} must be an array")
    if length is not None and len(value) != length:
        raise ValueError(f"{what} must have {length} elements, not {len(value)}")
    return value


def _ascending_ids(what: str, value: object) -> list[int]:
    ids = [check_broker_id(f"member of {what}", v) for v in _array(what, value)]
    if any(b <= a for a, b in pairwise(ids)):
        raise ValueError(f"{what} must be strictly ascending")
    return ids


def _topics(value: object) -> dict[str, int]:
    topics: dict[str, int] = {}
    previous: str | None = None
    for entry in _array("topics", value):
        raw_topic, raw_queues = _array("topic", entry, 2)
        topic = check_topic("topic", raw_topic)
        if previous is not None and topic <= previous:
            raise ValueError("topics must be strictly ascending by name")
        previous = topic
        topics[topic] = check_queues("queues", raw_queues)
    return topics


def _group(value: object, version: int) -> BrokerGroup:
    fields = _array("group", value, 9 if version == SNAPSHOT_VERSION else 8)
    name = check_name("broker_name", fields[0])
    cluster = check_name("cluster", fields[1])
    next_assign = check_broker_id("next_assign_broker_id", fields[2])
    master = None if fields[3] is None else check_broker_id("master_broker_id", fields[3])
    master_epoch = check_epoch("master_epoch", fields[4])
    sync_state_set = frozenset(_ascending_ids("sync_state_set", fields[5]))
    sync_state_set_epoch = check_epoch("sync_state_set_epoch", fields[6])
    brokers: dict[int, BrokerRecord] = {}
    previous = 0
    for entry in _array("brokers", fields[7]):
        raw_id, address, register_code = _array("broker", entry, 3)
        broker_id = check_broker_id("broker_id", raw_id)
        if broker_id <= previous:
            raise ValueError("brokers must be strictly ascending by id")
        previous = broker_id
        brokers[broker_id] = BrokerRecord(
            address=check_text("address", address),
            register_code=check_text("register_code", register_code),
        )
    group = BrokerGroup(
        cluster=cluster,
        broker_name=name,
        next_assign_broker_id=next_assign,
        brokers=brokers,
        master_broker_id=master,
        master_epoch=master_epoch,
        sync_state_set=sync_state_set,
        sync_state_set_epoch=sync_state_set_epoch,
        topics=_topics(fields[8]) if version == SNAPSHOT_VERSION else {},
    )
    problems = group.invariant_violations()
    if problems:
        raise ValueError("; ".join(problems))
    return group


def decode_groups(data: bytes) -> dict[str, BrokerGroup]:
    try:
        obj = msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise SnapshotError(f"undecodable snapshot: {type(exc).__name__}") from None
    try:
        magic, version, body = _array("snapshot", obj, 3)
        if magic != SNAPSHOT_MAGIC:
            raise ValueError("not a metadata snapshot (bad magic)")
        if type(version) is not int or version not in (
            SNAPSHOT_VERSION_NO_TOPICS,
            SNAPSHOT_VERSION,
        ):
            raise ValueError(f"unsupported snapshot version {version!r}")
        groups: dict[str, BrokerGroup] = {}
        previous: str | None = None
        for value in _array("groups", body):
            group = _group(value, version)
            if previous is not None and group.broker_name <= previous:
                raise ValueError("groups must be strictly ascending by broker name")
            previous = group.broker_name
            groups[group.broker_name] = group
        return groups
    except (TypeError, ValueError) as exc:
        raise SnapshotError(f"invalid snapshot: {exc}") from None
