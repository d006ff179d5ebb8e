"""Events of the controller's Raft log: what every controller applies to its metadata.

An event is decided once, by the active controller, and applied on every controller in log order.
Events are frozen, slotted, keyword-only dataclasses that check their own fields, so an event that
exists is well-formed. Events that were decided against a particular state carry the epochs of
that state (``master_epoch``, ``sync_state_set_epoch``); applying them is a compare-and-set, so two
decisions made against the same state can never both take effect.

Byte layout: one msgpack array per event, the first element a type tag, integers as msgpack ints,
id sets as strictly ascending arrays (so one event has exactly one encoding)::

    [1, cluster, broker_name, broker_id, register_code, address]          ApplyBrokerId
    [2, cluster, broker_name, broker_id, address]                         UpdateBrokerAddress
    [3, broker_name, new_master_broker_id | nil,
        master_epoch, sync_state_set_epoch (, new_master_epoch)]          ElectMaster
    [4, broker_name, master_broker_id, master_epoch,
        sync_state_set_epoch, [broker_id, ...]]                           AlterSyncStateSet
    [5, broker_name, [broker_id, ...] | nil]                              CleanBrokerData
    [6, broker_name, topic, queues (, perm | nil, message_type | nil)]    UpdateTopic
    [7, username, user_type, sealed_secret (bin), version]                PutUser
    [8, username, version]                                                DeleteUser
    [9, username, [[resource, [action, ...], decision, [cidr, ...]], ...],
        version]                                                          PutAcl
    [10, topic, [[broker_name, physical_queue], ...]]                     CreateStaticTopic
    [11, topic, queue_id, generation, logical_end]                        SealQueueItem
    [12, topic, queue_id, generation, broker_name, physical_queue,
        physical_start]                                                   AddQueueItem
    [13, topic, queue_id, generation, logical_end, source_master_epoch,
        broker_name, physical_queue]                                      RemapQueueItem
    [14, topic, queue_id, generation]                                     DropQueueItem
    [15, topic]                                                           DeleteTopic
    [16, producer_id, epoch]                                              IssueProducerId

The static topic events (docs/static-topics.md) carry a logical queue's newest ``generation``
they were decided at; applying them is a compare-and-set on it. RemapQueueItem (a whole re-map
in one entry) also carries the master epoch of the group it leaves, checked the same way.
DropQueueItem carries the ``generation`` of the oldest item it drops (sealed, not the newest).

UpdateTopic's ``perm`` and ``message_type`` (:mod:`protocol.topic_attrs`) are written only when
one is set (nil: keep the topic's); an UpdateTopic of four fields, as written before they
existed, keeps them.

IssueProducerId (docs/idempotence.md) issues the next producer id (``epoch`` 0: it must be the
state's next id) or takes up an issued id at the state's next producer epoch; applying it is a
compare-and-set on that counter.

The user events carry the user's ``version`` they were decided at (0: the user must not exist
yet); applying them is a compare-and-set on it, as for the epochs of the group events.

:func:`decode_event` raises :class:`EventDecodeError`, and nothing else, on any other input.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

import msgpack

from protocol.acl import AclError, Rule, UserType, check_username, rule_from_doc, user_type
from protocol.topic_attrs import MessageType

FIRST_BROKER_ID: Final = 1
MAX_ID: Final = 2**63 - 1
MAX_NAME_CHARS: Final = 255
MAX_TEXT_CHARS: Final = 1024
MAX_SET_SIZE: Final = 1024
MAX_EVENT_BYTES: Final = 64 * 1024
MAX_TOPIC_CHARS: Final = 127
MAX_QUEUES: Final = 1024
_MESSAGE_TYPES: Final = tuple(t.value for t in MessageType)

TAG_APPLY_BROKER_ID: Final = 1
TAG_UPDATE_BROKER_ADDRESS: Final = 2
TAG_ELECT_MASTER: Final = 3
TAG_ALTER_SYNC_STATE_SET: Final = 4
TAG_CLEAN_BROKER_DATA: Final = 5
TAG_UPDATE_TOPIC: Final = 6
TAG_PUT_USER: Final = 7
TAG_DELETE_USER: Final = 8
TAG_PUT_ACL: Final = 9
TAG_CREATE_STATIC_TOPIC: Final = 10
TAG_SEAL_QUEUE_ITEM: Final = 11
TAG_ADD_QUEUE_ITEM: Final = 12
TAG_REMAP_QUEUE_ITEM: Final = 13
TAG_DROP_QUEUE_ITEM: Final = 14
TAG_DELETE_TOPIC: Final = 15
TAG_ISSUE_PRODUCER_ID: Final = 16
FIRST_PRODUCER_ID: Final = 1
FIRST_PRODUCER_EPOCH: Final = 1
MAX_PRODUCER_EPOCH: Final = 2**31 - 1
MAX_SEALED_BYTES: Final = 1024


class EventDecodeError(ValueError):
    """Bytes that are not a valid event."""


# Field checks, shared with request validation in state.py -------------------------------------


def check_name(what: str, value: object) -> str:
    """A cluster or broker name: a non-empty string of at most MAX_NAME_CHARS."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a string, not {type(value).__name__}")
    if not value or len(value) > MAX_NAME_CHARS:
        raise ValueError(f"{what} must be 1 to {MAX_NAME_CHARS} characters")
    return value


def check_text(what: str, value: object) -> str:
    """An address or register code: a string (maybe empty) of at most MAX_TEXT_CHARS."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a string, not {type(value).__name__}")
    if len(value) > MAX_TEXT_CHARS:
        raise ValueError(f"{what} must be at most {MAX_TEXT_CHARS} characters")
    return value


def _check_int(what: str, value: object, low: int, high: int) -> int:
    """An int in [low, high] (bools are not ints here)."""
    if type(value) is not int:
        raise TypeError(f"{what} must be an integer, not {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{what} must be in [{low}, {high}], not {value}")
    return value


def check_broker_id(what: str, value: object) -> int:
    """A broker id: an int in [FIRST_BROKER_ID, MAX_ID]."""
    return _check_int(what, value, FIRST_BROKER_ID, MAX_ID)


def check_epoch(what: str, value: object) -> int:
    """An epoch: an int in [0, MAX_ID]."""
    return _check_int(what, value, 0, MAX_ID)


def check_id_set(what: str, value: object) -> frozenset[int]:
    """A non-empty frozenset of broker ids of at most MAX_SET_SIZE members."""
    if not isinstance(value, frozenset):
        raise TypeError(f"{what} must be a frozenset, not {type(value).__name__}")
    if not value or len(value) > MAX_SET_SIZE:
        raise ValueError(f"{what} must have 1 to {MAX_SET_SIZE} members")
    for member in value:
        check_broker_id(f"member of {what}", member)
    return value


_TOPIC_NAME = re.compile(r"[\w%-]+")
r"""``\w`` of a str pattern is what ``str.isalnum()`` accepts, and '_'."""


def check_topic(what: str, value: object) -> str:
    """A topic name: 1 to MAX_TOPIC_CHARS letters, digits, '-', '_' or '%' (the broker's rule).

    One regular expression match, not a generator over the characters (3 times slower): every
    route registration checks each of its topics, and a snapshot's restore each topic twice."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a string, not {type(value).__name__}")
    if not 0 < len(value) <= MAX_TOPIC_CHARS or _TOPIC_NAME.fullmatch(value) is None:
        raise ValueError(
            f"{what} may hold letters, digits, '-', '_' and '%' (1 to {MAX_TOPIC_CHARS})"
        )
    return value


def check_queues(what: str, value: object) -> int:
    """A topic's queue count on one broker group: an int in [1, MAX_QUEUES]."""
    return _check_int(what, value, 1, MAX_QUEUES)


def check_perm(what: str, value: object) -> int:
    """A topic's permission: an int in [0, 7] (PermName's read 4, write 2, inherit 1)."""
    return _check_int(what, value, 0, 7)


def check_message_type(what: str, value: object) -> str:
    """A topic's ``message.type``: one of :class:`protocol.topic_attrs.MessageType`'s names."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a string, not {type(value).__name__}")
    if value not in _MESSAGE_TYPES:
        raise ValueError(f"{what} must be one of {', '.join(_MESSAGE_TYPES)}, not {value!r}")
    return value


def check_physical_queue(what: str, value: object) -> int:
    """A queue index: an int in [0, MAX_QUEUES)."""
    if type(value) is not int:
        raise TypeError(f"{what} must be an integer, not {type(value).__name__}")
    if not 0 <= value < MAX_QUEUES:
        raise ValueError(f"{what} must be in [0, {MAX_QUEUES}), not {value}")
    return value


# Events ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ApplyBrokerId:
    """Assign ``broker_id`` of the group ``broker_name`` to the broker holding ``register_code``.

    Applies when the id already belongs to the same register code (no change) or is the group's
    nextAssignBrokerId (the id is taken and nextAssignBrokerId moves past it); otherwise it is
    rejected with CONTROLLER_BROKER_ID_INVALID and changes nothing. The first id of a new group
    creates the group.
    """

    cluster: str
    broker_name: str
    broker_id: int
    register_code: str
    address: str = ""

    def __post_init__(self) -> None:
        check_name("cluster", self.cluster)
        check_name("broker_name", self.broker_name)
        check_broker_id("broker_id", self.broker_id)
        check_text("register_code", self.register_code)
        check_text("address", self.address)


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateBrokerAddress:
    """Record the address a registered broker now serves on (RegisterBrokerToController)."""

    cluster: str
    broker_name: str
    broker_id: int
    address: str

    def __post_init__(self) -> None:
        check_name("cluster", self.cluster)
        check_name("broker_name", self.broker_name)
        check_broker_id("broker_id", self.broker_id)
        check_text("address", self.address)


@dataclass(frozen=True, slots=True, kw_only=True)
class ElectMaster:
    """Make ``new_master_broker_id`` the group's master, or clear the master when it is None.

    Decided against a group at ``master_epoch`` / ``sync_state_set_epoch``; applies only if the
    group is still at both. The group's masterEpoch becomes ``new_master_epoch`` (default
    ``master_epoch + 1``; higher when a replica already holds a higher epoch, e.g. a group whose
    metadata was cleaned and registered again). A new master: SyncStateSet = {new master},
    syncStateSetEpoch + 1. A clear: no master, SyncStateSet unchanged.

    The encoding carries ``new_master_epoch`` only when it is not ``master_epoch + 1`` (events of
    older logs decode unchanged, and every event still has exactly one encoding).
    """

    broker_name: str
    new_master_broker_id: int | None
    master_epoch: int
    sync_state_set_epoch: int
    new_master_epoch: int | None = None

    def __post_init__(self) -> None:
        check_name("broker_name", self.broker_name)
        if self.new_master_broker_id is not None:
            check_broker_id("new_master_broker_id", self.new_master_broker_id)
        check_epoch("master_epoch", self.master_epoch)
        check_epoch("sync_state_set_epoch", self.sync_state_set_epoch)
        if self.new_master_epoch is not None:
            check_epoch("new_master_epoch", self.new_master_epoch)
            if self.new_master_epoch <= self.master_epoch:
                raise ValueError(
                    f"new_master_epoch {self.new_master_epoch} must exceed master_epoch "
                    f"{self.master_epoch}"
                )
            if self.new_master_epoch == self.master_epoch + 1:
                object.__setattr__(self, "new_master_epoch", None)  # implied: one form only

    @property
    def next_epoch(self) -> int:
        """The group's masterEpoch once this event applied."""
        if self.new_master_epoch is None:
            return self.master_epoch + 1
        return self.new_master_epoch


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterSyncStateSet:
    """Replace the group's SyncStateSet with ``new_sync_state_set`` (syncStateSetEpoch + 1).

    Decided for master ``master_broker_id`` at ``master_epoch`` / ``sync_state_set_epoch``;
    applies only if the group still has that master at both epochs, every member is registered
    and the set contains the master.
    """

    broker_name: str
    master_broker_id: int
    master_epoch: int
    sync_state_set_epoch: int
    new_sync_state_set: frozenset[int]

    def __post_init__(self) -> None:
        check_name("broker_name", self.broker_name)
        check_broker_id("master_broker_id", self.master_broker_id)
        check_epoch("master_epoch", self.master_epoch)
        check_epoch("sync_state_set_epoch", self.sync_state_set_epoch)
        check_id_set("new_sync_state_set", self.new_sync_state_set)


@dataclass(frozen=True, slots=True, kw_only=True)
class CleanBrokerData:
    """Forget the brokers ``broker_ids`` of the group, or the whole group when it is None."""

    broker_name: str
    broker_ids: frozenset[int] | None = None

    def __post_init__(self) -> None:
        check_name("broker_name", self.broker_name)
        if self.broker_ids is not None:
            check_id_set("broker_ids", self.broker_ids)


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateTopic:
    """Create ``topic`` on the group ``broker_name`` with ``queues`` queues, or grow it.

    Applies when the group exists and the topic is new there or has at most ``queues`` queues
    (queues are never taken away); otherwise it is rejected and changes nothing. A topic's
    creation is acknowledged only once this event is applied, so it survives the group's master.
    """

    broker_name: str
    topic: str
    queues: int
    perm: int | None = None
    """The topic's permission on the group (PermName bits); None keeps it (new: 6)."""
    message_type: str | None = None
    """The topic's ``message.type``; None keeps it (new: NORMAL)."""

    def __post_init__(self) -> None:
        check_name("broker_name", self.broker_name)
        check_topic("topic", self.topic)
        check_queues("queues", self.queues)
        if self.perm is not None:
            check_perm("perm", self.perm)
        if self.message_type is not None:
            check_message_type("message_type", self.message_type)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteTopic:
    """Forget ``topic`` on every group that has it and, for a static topic, its mapping
    items. Applies when some group has the topic or it is static; otherwise it is rejected
    (TOPIC_NOT_EXIST) and changes nothing. The brokers' copies (topic config, ConsumeQueues)
    are deleted by the active controller once this is applied (docs/operations.md)."""

    topic: str

    def __post_init__(self) -> None:
        check_topic("topic", self.topic)


@dataclass(frozen=True, slots=True, kw_only=True)
class IssueProducerId:
    """Issue ``producer_id`` at ``epoch`` to an idempotent producer: with epoch 0 a new id (the
    state's next one), else an id issued before at the state's next producer epoch."""

    producer_id: int
    epoch: int

    def __post_init__(self) -> None:
        if type(self.producer_id) is not int or not FIRST_PRODUCER_ID <= self.producer_id <= MAX_ID:
            raise ValueError(f"producer_id must be an integer in {FIRST_PRODUCER_ID}..{MAX_ID}")
        if type(self.epoch) is not int or not 0 <= self.epoch <= MAX_PRODUCER_EPOCH:
            raise ValueError(f"epoch must be an integer in 0..{MAX_PRODUCER_EPOCH}")


def _check_user_fields(username: object, version: object) -> None:
    try:
        check_username(username)
    except AclError as exc:
        raise ValueError(str(exc)) from None
    check_epoch("version", version)


@dataclass(frozen=True, slots=True, kw_only=True)
class PutUser:
    """Create the user (``version`` 0: it must not exist) or replace its type and sealed secret
    (``version``: the user's version it was decided at). The user's version then moves by one."""

    username: str
    user_type: UserType
    sealed_secret: bytes
    version: int

    def __post_init__(self) -> None:
        _check_user_fields(self.username, self.version)
        if not isinstance(self.user_type, UserType):
            raise TypeError("user_type must be a UserType")
        if not isinstance(self.sealed_secret, bytes) or not (
            0 < len(self.sealed_secret) <= MAX_SEALED_BYTES
        ):
            raise ValueError(f"sealed_secret must be 1 to {MAX_SEALED_BYTES} bytes")


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteUser:
    """Forget the user and its rules, if it is still at ``version``."""

    username: str
    version: int

    def __post_init__(self) -> None:
        _check_user_fields(self.username, self.version)
        if self.version == 0:
            raise ValueError("version of an existing user is at least 1")


@dataclass(frozen=True, slots=True, kw_only=True)
class PutAcl:
    """Replace the user's whole rule list (canonical order: by resource pattern), if the user is
    still at ``version``."""

    username: str
    rules: tuple[Rule, ...]
    version: int

    def __post_init__(self) -> None:
        _check_user_fields(self.username, self.version)
        if self.version == 0:
            raise ValueError("version of an existing user is at least 1")
        patterns = [str(r.resource) for r in self.rules]
        if patterns != sorted(set(patterns)):
            raise ValueError("rules must be strictly ascending by resource pattern")


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateStaticTopic:
    """Create the static topic ``topic``: logical queue ``i`` starts as one open item on
    ``placements[i]`` = (broker group, physical queue) at logical 0 = physical 0. Applies when the
    topic is neither static nor an ordinary topic on any group and every group exists."""

    topic: str
    placements: tuple[tuple[str, int], ...]

    def __post_init__(self) -> None:
        check_topic("topic", self.topic)
        if not isinstance(self.placements, tuple) or not 1 <= len(self.placements) <= MAX_QUEUES:
            raise ValueError(f"placements must be a tuple of 1 to {MAX_QUEUES} entries")
        for entry in self.placements:
            if not isinstance(entry, tuple) or len(entry) != 2:
                raise TypeError("a placement is a (broker_name, physical_queue) pair")
            check_name("broker_name", entry[0])
            check_physical_queue("physical_queue", entry[1])
        if len(set(self.placements)) != len(self.placements):
            raise ValueError("two logical queues on one physical queue")


@dataclass(frozen=True, slots=True, kw_only=True)
class SealQueueItem:
    """Step 1 of a re-map: seal the newest item of logical queue ``queue_id`` (still of
    ``generation``, still open) at ``logical_end``."""

    topic: str
    queue_id: int
    generation: int
    logical_end: int

    def __post_init__(self) -> None:
        check_topic("topic", self.topic)
        check_physical_queue("queue_id", self.queue_id)
        check_epoch("generation", self.generation)
        check_epoch("logical_end", self.logical_end)


@dataclass(frozen=True, slots=True, kw_only=True)
class AddQueueItem:
    """Step 2 of a re-map: logical queue ``queue_id``, whose newest item (``generation`` - 1)
    is sealed, continues on ``broker_name``'s ``physical_queue`` from ``physical_start``, at the
    sealed logical end."""

    topic: str
    queue_id: int
    generation: int
    broker_name: str
    physical_queue: int
    physical_start: int

    def __post_init__(self) -> None:
        check_topic("topic", self.topic)
        check_physical_queue("queue_id", self.queue_id)
        check_epoch("generation", self.generation)
        if self.generation < 1:
            raise ValueError("a re-mapped item's generation is at least 1")
        check_name("broker_name", self.broker_name)
        check_physical_queue("physical_queue", self.physical_queue)
        check_epoch("physical_start", self.physical_start)


@dataclass(frozen=True, slots=True, kw_only=True)
class RemapQueueItem:
    """A whole re-map in one entry: logical queue ``queue_id``'s newest item (still of
    ``generation``, still open, on a group whose master is still at ``source_master_epoch``)
    is sealed at ``logical_end`` and the queue continues on ``broker_name``'s
    ``physical_queue`` from physical offset 0, generation + 1."""

    topic: str
    queue_id: int
    generation: int
    logical_end: int
    source_master_epoch: int
    broker_name: str
    physical_queue: int

    def __post_init__(self) -> None:
        check_topic("topic", self.topic)
        check_physical_queue("queue_id", self.queue_id)
        check_epoch("generation", self.generation)
        check_epoch("logical_end", self.logical_end)
        check_epoch("source_master_epoch", self.source_master_epoch)
        check_name("broker_name", self.broker_name)
        check_physical_queue("physical_queue", self.physical_queue)


@dataclass(frozen=True, slots=True, kw_only=True)
class DropQueueItem:
    """Logical queue ``queue_id``'s oldest item, still of ``generation`` and not the newest, is
    dropped: retention deleted its data (docs/static-topics.md, "Retention of old items")."""

    topic: str
    queue_id: int
    generation: int

    def __post_init__(self) -> None:
        check_topic("topic", self.topic)
        check_physical_queue("queue_id", self.queue_id)
        check_epoch("generation", self.generation)


AuthEvent = PutUser | DeleteUser | PutAcl
StaticTopicEvent = CreateStaticTopic | SealQueueItem | AddQueueItem | RemapQueueItem | DropQueueItem

Event = (
    ApplyBrokerId
    | UpdateBrokerAddress
    | ElectMaster
    | AlterSyncStateSet
    | CleanBrokerData
    | UpdateTopic
    | PutUser
    | DeleteUser
    | PutAcl
    | CreateStaticTopic
    | SealQueueItem
    | AddQueueItem
    | RemapQueueItem
    | DropQueueItem
    | DeleteTopic
    | IssueProducerId
)


# Codec -----------------------------------------------------------------------------------------


def _sorted_ids(ids: Iterable[int]) -> list[int]:
    return sorted(ids)


def encode_event(event: Event) -> bytes:
    """The one msgpack encoding of ``event`` (same event, same bytes)."""
    fields: list[Any]
    match event:
        case ApplyBrokerId():
            fields = [
                TAG_APPLY_BROKER_ID,
                event.cluster,
                event.broker_name,
                event.broker_id,
                event.register_code,
                event.address,
            ]
        case UpdateBrokerAddress():
            fields = [
                TAG_UPDATE_BROKER_ADDRESS,
                event.cluster,
                event.broker_name,
                event.broker_id,
                event.address,
            ]
        case ElectMaster():
            fields = [
                TAG_ELECT_MASTER,
                event.broker_name,
                event.new_master_broker_id,
                event.master_epoch,
                event.sync_state_set_epoch,
            ]
            if event.new_master_epoch is not None:
                fields.append(event.new_master_epoch)
        case AlterSyncStateSet():
            fields = [
                TAG_ALTER_SYNC_STATE_SET,
                event.broker_name,
                event.master_broker_id,
                event.master_epoch,
                event.sync_state_set_epoch,
                _sorted_ids(event.new_sync_state_set),
            ]
        case CleanBrokerData():
            fields = [
                TAG_CLEAN_BROKER_DATA,
                event.broker_name,
                None if event.broker_ids is None else _sorted_ids(event.broker_ids),
            ]
        case UpdateTopic():
            fields = [TAG_UPDATE_TOPIC, event.broker_name, event.topic, event.queues]
            if event.perm is not None or event.message_type is not None:
                fields += [event.perm, event.message_type]
        case PutUser():
            fields = [
                TAG_PUT_USER,
                event.username,
                event.user_type.value,
                event.sealed_secret,
                event.version,
            ]
        case DeleteUser():
            fields = [TAG_DELETE_USER, event.username, event.version]
        case PutAcl():
            fields = [
                TAG_PUT_ACL,
                event.username,
                [rule_fields(rule) for rule in event.rules],
                event.version,
            ]
        case CreateStaticTopic():
            fields = [
                TAG_CREATE_STATIC_TOPIC,
                event.topic,
                [[name, queue] for name, queue in event.placements],
            ]
        case SealQueueItem():
            fields = [
                TAG_SEAL_QUEUE_ITEM,
                event.topic,
                event.queue_id,
                event.generation,
                event.logical_end,
            ]
        case AddQueueItem():
            fields = [
                TAG_ADD_QUEUE_ITEM,
                event.topic,
                event.queue_id,
                event.generation,
                event.broker_name,
                event.physical_queue,
                event.physical_start,
            ]
        case RemapQueueItem():
            fields = [
                TAG_REMAP_QUEUE_ITEM,
                event.topic,
                event.queue_id,
                event.generation,
                event.logical_end,
                event.source_master_epoch,
                event.broker_name,
                event.physical_queue,
            ]
        case DropQueueItem():
            fields = [TAG_DROP_QUEUE_ITEM, event.topic, event.queue_id, event.generation]
        case DeleteTopic():
            fields = [TAG_DELETE_TOPIC, event.topic]
        case IssueProducerId():
            fields = [TAG_ISSUE_PRODUCER_ID, event.producer_id, event.epoch]
        case _:
            raise TypeError(f"not an event: {type(event).__name__}")
    packed: bytes = msgpack.packb(fields, use_bin_type=True)
    return packed


def rule_fields(rule: Rule) -> list[Any]:
    """A rule as a msgpack array (events and snapshots): one encoding per rule."""
    doc = rule.to_doc()
    return [doc["resource"], doc["actions"], doc["decision"], doc["sources"]]


def rule_of_fields(value: object) -> Rule:
    """The inverse of :func:`rule_fields`; ValueError/TypeError on anything else (also on a
    rule that is valid but not in its one encoding)."""
    if not isinstance(value, list) or len(value) != 4:
        raise TypeError("a rule must be an array of 4 elements")
    resource, actions, decision, sources = value
    try:
        rule = rule_from_doc(
            {"resource": resource, "actions": actions, "decision": decision, "sources": sources}
        )
    except AclError as exc:
        raise ValueError(str(exc)) from None
    if rule_fields(rule) != value:
        raise ValueError(f"rule on {resource!r} is not in its canonical form")
    return rule


def _ids(what: str, value: object) -> frozenset[int]:
    """A strictly ascending array of ints, as encode_event writes it."""
    if not isinstance(value, list):
        raise TypeError(f"{what} must be an array")
    for index, member in enumerate(value):
        if type(member) is not int:
            raise TypeError(f"member of {what} must be an integer")
        if index and member <= value[index - 1]:
            raise ValueError(f"{what} must be strictly ascending")
    return frozenset(value)


def _opt_ids(what: str, value: object) -> frozenset[int] | None:
    return None if value is None else _ids(what, value)


def _arity(fields: list[Any], count: int, name: str) -> None:
    if len(fields) != count:
        raise ValueError(f"{name} has {len(fields) - 1} fields, expected {count - 1}")


def _build(fields: list[Any]) -> Event:
    tag = fields[0]
    if type(tag) is not int:
        raise TypeError("event tag must be an integer")
    if tag == TAG_APPLY_BROKER_ID:
        _arity(fields, 6, "ApplyBrokerId")
        _, cluster, broker_name, broker_id, register_code, address = fields
        return ApplyBrokerId(
            cluster=cluster,
            broker_name=broker_name,
            broker_id=broker_id,
            register_code=register_code,
            address=address,
        )
    if tag == TAG_UPDATE_BROKER_ADDRESS:
        _arity(fields, 5, "UpdateBrokerAddress")
        _, cluster, broker_name, broker_id, address = fields
        return UpdateBrokerAddress(
            cluster=cluster, broker_name=broker_name, broker_id=broker_id, address=address
        )
    if tag == TAG_ELECT_MASTER:
        if len(fields) == 6:
            _, broker_name, new_master, master_epoch, sync_state_set_epoch, next_epoch = fields
            if type(master_epoch) is int and next_epoch == master_epoch + 1:
                raise ValueError("ElectMaster: new_master_epoch is implied, not encoded")
        else:
            _arity(fields, 5, "ElectMaster")
            _, broker_name, new_master, master_epoch, sync_state_set_epoch = fields
            next_epoch = None
        return ElectMaster(
            broker_name=broker_name,
            new_master_broker_id=new_master,
            master_epoch=master_epoch,
            sync_state_set_epoch=sync_state_set_epoch,
            new_master_epoch=next_epoch,
        )
    if tag == TAG_ALTER_SYNC_STATE_SET:
        _arity(fields, 6, "AlterSyncStateSet")
        _, broker_name, master, master_epoch, sync_state_set_epoch, members = fields
        return AlterSyncStateSet(
            broker_name=broker_name,
            master_broker_id=master,
            master_epoch=master_epoch,
            sync_state_set_epoch=sync_state_set_epoch,
            new_sync_state_set=_ids("new_sync_state_set", members),
        )
    if tag == TAG_CLEAN_BROKER_DATA:
        _arity(fields, 3, "CleanBrokerData")
        _, broker_name, broker_ids = fields
        return CleanBrokerData(
            broker_name=broker_name, broker_ids=_opt_ids("broker_ids", broker_ids)
        )
    if tag == TAG_UPDATE_TOPIC:
        if len(fields) != 6:
            _arity(fields, 4, "UpdateTopic")
        broker_name, topic, queues = fields[1:4]
        perm, message_type = fields[4:6] if len(fields) == 6 else (None, None)
        if perm is None and message_type is None and len(fields) == 6:
            raise ValueError("UpdateTopic of 5 fields has neither perm nor message_type")
        return UpdateTopic(
            broker_name=broker_name,
            topic=topic,
            queues=queues,
            perm=perm,
            message_type=message_type,
        )
    if tag == TAG_PUT_USER:
        _arity(fields, 5, "PutUser")
        _, username, kind, sealed, version = fields
        try:
            parsed_type = user_type(kind)
        except AclError as exc:
            raise ValueError(str(exc)) from None
        if kind != parsed_type.value:
            raise ValueError("PutUser: user type not in its canonical form")
        return PutUser(
            username=username, user_type=parsed_type, sealed_secret=sealed, version=version
        )
    if tag == TAG_DELETE_USER:
        _arity(fields, 3, "DeleteUser")
        _, username, version = fields
        return DeleteUser(username=username, version=version)
    if tag == TAG_PUT_ACL:
        _arity(fields, 4, "PutAcl")
        _, username, raw_rules, version = fields
        if not isinstance(raw_rules, list):
            raise TypeError("PutAcl rules must be an array")
        rules = tuple(rule_of_fields(r) for r in raw_rules)
        return PutAcl(username=username, rules=rules, version=version)
    if tag == TAG_CREATE_STATIC_TOPIC:
        _arity(fields, 3, "CreateStaticTopic")
        _, topic, raw = fields
        if not isinstance(raw, list):
            raise TypeError("CreateStaticTopic placements must be an array")
        placements: list[tuple[str, int]] = []
        for entry in raw:
            if not isinstance(entry, list) or len(entry) != 2:
                raise TypeError("a placement must be an array of 2 elements")
            placements.append((entry[0], entry[1]))
        return CreateStaticTopic(topic=topic, placements=tuple(placements))
    if tag == TAG_SEAL_QUEUE_ITEM:
        _arity(fields, 5, "SealQueueItem")
        _, topic, queue_id, generation, logical_end = fields
        return SealQueueItem(
            topic=topic, queue_id=queue_id, generation=generation, logical_end=logical_end
        )
    if tag == TAG_ADD_QUEUE_ITEM:
        _arity(fields, 7, "AddQueueItem")
        _, topic, queue_id, generation, broker_name, physical_queue, physical_start = fields
        return AddQueueItem(
            topic=topic,
            queue_id=queue_id,
            generation=generation,
            broker_name=broker_name,
            physical_queue=physical_queue,
            physical_start=physical_start,
        )
    if tag == TAG_REMAP_QUEUE_ITEM:
        _arity(fields, 8, "RemapQueueItem")
        _, topic, queue_id, generation, end, epoch, broker_name, physical_queue = fields
        return RemapQueueItem(
            topic=topic,
            queue_id=queue_id,
            generation=generation,
            logical_end=end,
            source_master_epoch=epoch,
            broker_name=broker_name,
            physical_queue=physical_queue,
        )
    if tag == TAG_DROP_QUEUE_ITEM:
        _arity(fields, 4, "DropQueueItem")
        _, topic, queue_id, generation = fields
        return DropQueueItem(topic=topic, queue_id=queue_id, generation=generation)
    if tag == TAG_DELETE_TOPIC:
        _arity(fields, 2, "DeleteTopic")
        return DeleteTopic(topic=fields[1])
    if tag == TAG_ISSUE_PRODUCER_ID:
        _arity(fields, 3, "IssueProducerId")
        return IssueProducerId(producer_id=fields[1], epoch=fields[2])
    raise ValueError(f"unknown event tag {tag}")


def decode_event(data: bytes) -> Event:
    """The event encoded in ``data``; :class:`EventDecodeError` for anything else."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise EventDecodeError(f"event must be bytes, not {type(data).__name__}")
    if len(data) > MAX_EVENT_BYTES:
        raise EventDecodeError(f"event of {len(data)} bytes exceeds {MAX_EVENT_BYTES}")
    try:
        obj = msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise EventDecodeError(f"undecodable event: {type(exc).__name__}") from None
    if not isinstance(obj, list) or not obj:
        raise EventDecodeError("event is not a non-empty msgpack array")
    try:
        return _build(obj)
    except (TypeError, ValueError) as exc:
        raise EventDecodeError(f"invalid event: {exc}") from None
