"""Snapshot encoding of the metadata state machine: same state, same bytes.

Layout: one msgpack array, groups ascending by broker name, ids ascending::

    ["rmq-metadata", version, [group, ...]]
    group = [broker_name, cluster, next_assign_broker_id, master_broker_id | nil, master_epoch,
             [sync_state_set ids], sync_state_set_epoch, [[broker_id, address, register_code], ...],
             [[topic, queues (, perm, message_type)], ...]]           (versions 2 and 3)
    ["rmq-metadata", 3, [group, ...], [user, ...]]                    (version 3)
    user = [username, user_type, sealed_secret (bin), version,
            [[resource, [action, ...], decision, [cidr, ...]], ...]]
    ["rmq-metadata", 4, [group, ...], [user, ...], [static, ...]]     (version 4)
    static = [topic, [[item, ...], ...]]             (one array of items per logical queue)
    item = [broker_name, physical_queue, logical_start, physical_start, generation,
            logical_end | nil]
    ["rmq-metadata", 5, [group, ...], [user, ...], [static, ...],
        [next_producer_id, next_producer_epoch]]                        (version 5)

Version 2 adds each group's topics (ascending by name; a topic whose permission or message type
is not the default, 6 and NORMAL, with both: a topic of two elements, as written before they
existed, has the default); version 3 adds the users (ascending by
name; secrets sealed only) and their rules; version 4 adds the static topics (ascending by
name) and their logical queues' mapping items (:mod:`controller.metadata.static_topic`);
version 5 the idempotent producers' counters (docs/idempotence.md). A state is written in the lowest version that holds
it (no users: version 2, or 1 without topics, byte for byte what older controllers wrote), and
every version is read, so a controller restarts on a snapshot written before topics or users
existed.

:func:`decode_groups` raises :class:`SnapshotError`, and nothing else, on bytes that are not such
a snapshot or describe a state that breaks the invariants of group.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import pairwise
from typing import Any, Final

import msgpack

from controller.metadata.auth import UserRecord
from controller.metadata.events import (
    FIRST_PRODUCER_EPOCH,
    FIRST_PRODUCER_ID,
    MAX_ID,
    MAX_PRODUCER_EPOCH,
    MAX_SEALED_BYTES,
    check_broker_id,
    check_epoch,
    check_message_type,
    check_name,
    check_perm,
    check_queues,
    check_text,
    check_topic,
    rule_fields,
    rule_of_fields,
)
from controller.metadata.group import BrokerGroup, BrokerRecord
from controller.metadata.static_topic import LogicalQueue, MappingItem, queue_problems
from protocol.acl import AclError, check_username, user_type
from protocol.topic_attrs import MessageType, TopicAttrs

SNAPSHOT_MAGIC: Final = "rmq-metadata"
SNAPSHOT_VERSION_PRODUCERS: Final = 5
SNAPSHOT_VERSION_STATIC: Final = 4
SNAPSHOT_VERSION_USERS: Final = 3
SNAPSHOT_VERSION: Final = 2
SNAPSHOT_VERSION_NO_TOPICS: Final = 1


class SnapshotError(ValueError):
    """Bytes that are not a valid metadata snapshot."""


StaticTopics = Mapping[str, Sequence[LogicalQueue]]


def encode_groups(
    groups: Mapping[str, BrokerGroup],
    users: Sequence[UserRecord] = (),
    static_topics: StaticTopics | None = None,
    producers: tuple[int, int] = (FIRST_PRODUCER_ID, FIRST_PRODUCER_EPOCH),
) -> bytes:
    """The snapshot of ``groups``, ``users`` (ascending by name, as AuthTable.records gives
    them), ``static_topics`` and the producer counters (next id, next epoch)."""
    return b"".join(encode_groups_in_parts(groups, users, static_topics, producers))


def encode_groups_in_parts(
    groups: Mapping[str, BrokerGroup],
    users: Sequence[UserRecord] = (),
    static_topics: StaticTopics | None = None,
    producers: tuple[int, int] = (FIRST_PRODUCER_ID, FIRST_PRODUCER_EPOCH),
) -> Iterator[bytes]:
    """:func:`encode_groups`'s bytes in parts, a group at a time (the parts of one msgpack
    document), so that a large state is encoded in steps: the Raft driver gives the event loop
    back between them. Lazy: pass values that do not change while it runs (a copy)."""
    statics = static_topics or {}
    with_producers = producers != (FIRST_PRODUCER_ID, FIRST_PRODUCER_EPOCH)
    with_topics = (
        bool(users) or bool(statics) or with_producers or any(g.topics for g in groups.values())
    )
    tail: list[Any] = []
    if users or statics or with_producers:
        version = SNAPSHOT_VERSION_USERS
        tail.append(
            [
                [
                    u.username,
                    u.user_type.value,
                    u.sealed_secret,
                    u.version,
                    [rule_fields(rule) for rule in u.rules],
                ]
                for u in users
            ]
        )
        if statics or with_producers:
            version = SNAPSHOT_VERSION_STATIC
            tail.append(
                [
                    [topic, [[_item_fields(i) for i in queue] for queue in statics[topic]]]
                    for topic in sorted(statics)
                ]
            )
        if with_producers:
            version = SNAPSHOT_VERSION_PRODUCERS
            tail.append(list(producers))
    else:
        version = SNAPSHOT_VERSION if with_topics else SNAPSHOT_VERSION_NO_TOPICS
    packer = msgpack.Packer(use_bin_type=True)
    yield b"".join(
        (
            packer.pack_array_header(3 + len(tail)),
            packer.pack(SNAPSHOT_MAGIC),
            packer.pack(version),
            packer.pack_array_header(len(groups)),
        )
    )
    for name in sorted(groups):
        yield packer.pack(_group_fields(groups[name], with_topics))
    for rest in tail:
        yield packer.pack(rest)


def _group_fields(g: BrokerGroup, with_topics: bool) -> list[Any]:
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
        fields.append([_topic_fields(g, topic) for topic in sorted(g.topics)])
    return fields


def _topic_fields(g: BrokerGroup, topic: str) -> list[Any]:
    attrs = g.topic_attrs.get(topic)
    if attrs is None:
        return [topic, g.topics[topic]]
    return [topic, g.topics[topic], attrs.perm, attrs.message_type.value]


def _item_fields(item: MappingItem) -> list[Any]:
    return [
        item.broker_name,
        item.physical_queue,
        item.logical_start,
        item.physical_start,
        item.generation,
        item.logical_end,
    ]


def _item(value: object) -> MappingItem:
    name, queue, logical_start, physical_start, generation, logical_end = _array("item", value, 6)
    return MappingItem(
        broker_name=check_name("broker_name", name),
        physical_queue=queue,
        logical_start=logical_start,
        physical_start=physical_start,
        generation=generation,
        logical_end=logical_end,
    )


def decode_static_topics(data: bytes) -> dict[str, tuple[LogicalQueue, ...]]:
    """The static topics of a snapshot ({} before version 4); SnapshotError on bad bytes."""
    obj = _unpack(data)
    try:
        if not isinstance(obj, list) or (len(obj), obj[1:2]) not in (
            (5, [SNAPSHOT_VERSION_STATIC]),
            (6, [SNAPSHOT_VERSION_PRODUCERS]),
        ):
            return {}
        topics: dict[str, tuple[LogicalQueue, ...]] = {}
        previous: str | None = None
        for entry in _array("static topics", obj[4]):
            raw_topic, raw_queues = _array("static topic", entry, 2)
            topic = check_topic("topic", raw_topic)
            if previous is not None and topic <= previous:
                raise ValueError("static topics must be strictly ascending by name")
            previous = topic
            queues = tuple(
                tuple(_item(i) for i in _array("items", q)) for q in _array("queues", raw_queues)
            )
            if not 1 <= len(queues) <= 1024:
                raise ValueError(f"static topic {topic} must have 1 to 1024 queues")
            for queue_id, items in enumerate(queues):
                problems = queue_problems(items)
                if problems:
                    raise ValueError(f"{topic} queue {queue_id}: {'; '.join(problems)}")
            topics[topic] = queues
        return topics
    except (TypeError, ValueError) as exc:
        raise SnapshotError(f"invalid snapshot: {exc}") from None


def decode_producers(data: bytes) -> tuple[int, int]:
    """The producer counters (next id, next epoch) of a snapshot (the first ones before
    version 5); SnapshotError on bad bytes."""
    obj = _unpack(data)
    try:
        if not isinstance(obj, list) or len(obj) != 6 or obj[1] != SNAPSHOT_VERSION_PRODUCERS:
            return FIRST_PRODUCER_ID, FIRST_PRODUCER_EPOCH
        next_id, next_epoch = _array("producers", obj[5], 2)
        if type(next_id) is not int or not FIRST_PRODUCER_ID <= next_id <= MAX_ID:
            raise ValueError("next producer id out of range")
        if (
            type(next_epoch) is not int
            or not FIRST_PRODUCER_EPOCH <= next_epoch <= MAX_PRODUCER_EPOCH + 1
        ):
            raise ValueError("next producer epoch out of range")
        return next_id, next_epoch
    except (TypeError, ValueError) as exc:
        raise SnapshotError(f"invalid snapshot: {exc}") from None


def _unpack(data: bytes) -> Any:
    try:
        return msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise SnapshotError(f"undecodable snapshot: {type(exc).__name__}") from None


def _user(value: object) -> UserRecord:
    username, kind, sealed, version, raw_rules = _array("user", value, 5)
    try:
        name = check_username(username)
        parsed_type = user_type(kind)
    except AclError as exc:
        raise ValueError(str(exc)) from None
    if kind != parsed_type.value:
        raise ValueError(f"user {name}: type not in its canonical form")
    if not isinstance(sealed, bytes) or not 0 < len(sealed) <= MAX_SEALED_BYTES:
        raise ValueError(f"user {name}: sealed secret must be 1 to {MAX_SEALED_BYTES} bytes")
    if check_epoch("version", version) < 1:
        raise ValueError(f"user {name}: version must be at least 1")
    rules = tuple(rule_of_fields(r) for r in _array("rules", raw_rules))
    patterns = [str(r.resource) for r in rules]
    if patterns != sorted(set(patterns)):
        raise ValueError(f"user {name}: rules must be strictly ascending by resource pattern")
    return UserRecord(
        username=name, user_type=parsed_type, sealed_secret=sealed, version=version, rules=rules
    )


def decode_users(data: bytes) -> list[UserRecord]:
    """The users of a snapshot ([] for versions 1 and 2); SnapshotError on bad bytes."""
    try:
        obj = msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise SnapshotError(f"undecodable snapshot: {type(exc).__name__}") from None
    try:
        if not isinstance(obj, list) or obj[1:2] not in (
            [SNAPSHOT_VERSION_USERS],
            [SNAPSHOT_VERSION_STATIC],
            [SNAPSHOT_VERSION_PRODUCERS],
        ):
            return []
        users = [_user(v) for v in _array("users", obj[3])]
        names = [u.username for u in users]
        if names != sorted(set(names)):
            raise ValueError("users must be strictly ascending by name")
        return users
    except (TypeError, ValueError) as exc:
        raise SnapshotError(f"invalid snapshot: {exc}") from None


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


def _topics(value: object) -> tuple[dict[str, int], dict[str, TopicAttrs]]:
    topics: dict[str, int] = {}
    attrs: dict[str, TopicAttrs] = {}
    previous: str | None = None
    for entry in _array("topics", value):
        fields = _array("topic", entry)
        if len(fields) != 4:
            fields = _array("topic", entry, 2)
        topic = check_topic("topic", fields[0])
        if previous is not None and topic <= previous:
            raise ValueError("topics must be strictly ascending by name")
        previous = topic
        topics[topic] = check_queues("queues", fields[1])
        if len(fields) == 4:
            topic_attrs = TopicAttrs(
                check_perm("perm", fields[2]),
                MessageType(check_message_type("message_type", fields[3])),
            )
            if topic_attrs.default:
                raise ValueError(f"topic {topic}: default attributes are written as none")
            attrs[topic] = topic_attrs
    return topics, attrs


def _group(value: object, version: int) -> BrokerGroup:
    with_topics = version in (
        SNAPSHOT_VERSION,
        SNAPSHOT_VERSION_USERS,
        SNAPSHOT_VERSION_STATIC,
        SNAPSHOT_VERSION_PRODUCERS,
    )
    fields = _array("group", value, 9 if with_topics else 8)
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
    )
    if with_topics:
        group.topics, group.topic_attrs = _topics(fields[8])
    problems = group.invariant_violations()
    if problems:
        raise ValueError("; ".join(problems))
    return group


def decode_groups(data: bytes, between: Callable[[], None] | None = None) -> dict[str, BrokerGroup]:
    """``between``: called after each group is decoded (the Raft driver, decoding in a thread,
    hands the GIL to the event loop there)."""
    try:
        obj = msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise SnapshotError(f"undecodable snapshot: {type(exc).__name__}") from None
    try:
        head = _array("snapshot", obj)
        version = head[1] if len(head) > 1 else None
        extra = (
            1
            if version == SNAPSHOT_VERSION_USERS
            else 2
            if version == SNAPSHOT_VERSION_STATIC
            else 3
            if version == SNAPSHOT_VERSION_PRODUCERS
            else 0
        )
        magic, version, body = _array("snapshot", head[:3] if extra else head, 3)
        if extra and len(head) != 3 + extra:
            raise ValueError(f"a version {version} snapshot must have {3 + extra} elements")
        if magic != SNAPSHOT_MAGIC:
            raise ValueError("not a metadata snapshot (bad magic)")
        if type(version) is not int or version not in (
            SNAPSHOT_VERSION_NO_TOPICS,
            SNAPSHOT_VERSION,
            SNAPSHOT_VERSION_USERS,
            SNAPSHOT_VERSION_STATIC,
            SNAPSHOT_VERSION_PRODUCERS,
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
            if between is not None:
                between()
        return groups
    except (TypeError, ValueError) as exc:
        raise SnapshotError(f"invalid snapshot: {exc}") from None
