"""A topic's permission and message type (RocketMQ 5's ``perm`` and ``message.type``). Pure.

Permission: RocketMQ's PermName bits, ``PERM_READ`` 4 (consumers may pull and POP),
``PERM_WRITE`` 2 (producers may send), ``PERM_INHERIT`` 1 (kept for RocketMQ's tools; it
changes nothing here); the default 6, read and write. Written as RocketMQ's ``perm2String``:
``RW-`` for 6, ``R--`` for 4, ``-W-`` for 2.

Message type: RocketMQ 5's topic attribute ``message.type`` (TopicAttributes,
TopicMessageType): ``NORMAL`` (the default), ``FIFO`` (messages with a message group),
``DELAY`` (messages with a delivery time), ``TRANSACTION`` (half messages) or ``MIXED`` (any).
A message's own type is read from its properties as RocketMQ's
``TopicMessageType.parseFromMessageProperty`` does: ``TRAN_MSG`` true makes it TRANSACTION, a
delivery time DELAY, a message group (``__SHARDINGKEY``) FIFO, nothing NORMAL. Whether a
broker refuses a message whose type is not its topic's is the broker's
``topic_message_type_check`` (docs/operations.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from protocol.fifo import PROP_MESSAGE_GROUP
from protocol.timer import REQUEST_PROPERTIES
from protocol.transaction import PROP_TRANSACTION_PREPARED

__all__ = [
    "ATTR_MESSAGE_TYPE",
    "DEFAULT_PERM",
    "PERM_INHERIT",
    "PERM_READ",
    "PERM_WRITE",
    "MessageType",
    "TopicAttrs",
    "attrs_from",
    "message_type_of",
    "parse_attributes",
    "parse_message_type",
    "parse_perm",
    "perm_text",
    "put_attr_changes",
    "put_attrs",
    "read_forbidden",
    "type_refusal",
    "write_forbidden",
]

PERM_READ: Final = 4
PERM_WRITE: Final = 2
PERM_INHERIT: Final = 1
DEFAULT_PERM: Final = PERM_READ | PERM_WRITE
ATTR_MESSAGE_TYPE: Final = "message.type"


class MessageType(StrEnum):
    NORMAL = "NORMAL"
    FIFO = "FIFO"
    DELAY = "DELAY"
    TRANSACTION = "TRANSACTION"
    MIXED = "MIXED"


def parse_message_type(value: object) -> MessageType:
    """The type named ``value`` (any case); ValueError with one line otherwise."""
    if isinstance(value, str):
        try:
            return MessageType(value.upper())
        except ValueError:
            pass
    names = ", ".join(t.value for t in MessageType)
    raise ValueError(f"message type {value!r} is not one of {names}")


def parse_perm(value: object) -> int:
    """A permission 0..7 (an int or its decimal text); ValueError with one line otherwise."""
    perm: int | None = None
    if type(value) is int:
        perm = value
    elif isinstance(value, str) and value.strip().isdigit():
        perm = int(value.strip())
    if perm is None or not 0 <= perm <= 7:
        raise ValueError(
            f"perm {value!r} is not 0..7 (PERM_READ 4 + PERM_WRITE 2 + PERM_INHERIT 1)"
        )
    return perm


def perm_text(perm: int) -> str:
    """RocketMQ's PermName.perm2String: ``RW-`` for 6."""
    return (
        ("R" if perm & PERM_READ else "-")
        + ("W" if perm & PERM_WRITE else "-")
        + ("X" if perm & PERM_INHERIT else "-")
    )


def parse_attributes(text: str) -> dict[str, str]:
    """mqadmin's ``-a`` form, ``+message.type=FIFO`` (``+key=value``, comma-separated; a
    ``-key`` deletes, which is refused here): the keys and values. Only ``message.type`` is
    known; ValueError with one line for anything else."""
    attrs: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if not part.startswith("+") or "=" not in part:
            raise ValueError(f"attribute {part!r} is not +key=value (e.g. +message.type=FIFO)")
        key, value = part[1:].split("=", 1)
        if key != ATTR_MESSAGE_TYPE:
            raise ValueError(f"attribute {key!r} is not known (only {ATTR_MESSAGE_TYPE})")
        attrs[key] = parse_message_type(value).value
    return attrs


@dataclass(frozen=True, slots=True)
class TopicAttrs:
    """A topic's permission and message type."""

    perm: int = DEFAULT_PERM
    message_type: MessageType = MessageType.NORMAL

    @property
    def default(self) -> bool:
        return self.perm == DEFAULT_PERM and self.message_type is MessageType.NORMAL

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)


def message_type_of(properties: Mapping[str, str]) -> MessageType:
    """A message's type from its properties (RocketMQ's parseFromMessageProperty)."""
    if properties.get(PROP_TRANSACTION_PREPARED) == "true":
        return MessageType.TRANSACTION
    if any(p in properties for p in REQUEST_PROPERTIES):
        return MessageType.DELAY
    if properties.get(PROP_MESSAGE_GROUP):
        return MessageType.FIFO
    return MessageType.NORMAL


def write_forbidden(topic: str, perm: int) -> str:
    """The remark of a send refused for a topic without write permission (RocketMQ's)."""
    return f"the topic[{topic}] sending message is forbidden (perm {perm_text(perm)})"


def read_forbidden(topic: str, perm: int) -> str:
    """The remark of a pull or POP refused for a topic without read permission (RocketMQ's)."""
    return f"the topic[{topic}] pulling message is forbidden (perm {perm_text(perm)})"


def type_refusal(topic: str, topic_type: MessageType, message: MessageType) -> str | None:
    """Why a ``message`` type may not go to ``topic`` of ``topic_type``; None when it may."""
    if topic_type is MessageType.MIXED or topic_type is message:
        return None
    return (
        f"topic {topic} takes {topic_type.value} messages, not {message.value} "
        f"(its message.type; rmqctl updateTopic -a +message.type=... changes it)"
    )


def put_attrs(into: dict[str, Any], attrs: TopicAttrs) -> dict[str, Any]:
    """``perm`` and ``messageType`` into a header, a table entry or a route's group, each only
    when not the default (so documents of default topics are as before them); ``into``."""
    if attrs.perm != DEFAULT_PERM:
        into["perm"] = attrs.perm
    if attrs.message_type is not MessageType.NORMAL:
        into["messageType"] = attrs.message_type.value
    return into


def put_attr_changes(
    into: dict[str, Any], perm: int | None, message_type: str | None
) -> dict[str, Any]:
    """``perm`` and ``messageType`` into the header of a request that creates or updates a
    topic, each only when given (None: keep the topic's); ``into``."""
    if perm is not None:
        into["perm"] = perm
    if message_type is not None:
        into["messageType"] = message_type
    return into


def attrs_from(doc: Mapping[str, Any]) -> TopicAttrs:
    """:func:`put_attrs`' fields read back (missing: the default); ValueError on bad ones."""
    return TopicAttrs(
        parse_perm(doc.get("perm", DEFAULT_PERM)),
        parse_message_type(doc.get("messageType", MessageType.NORMAL.value)),
    )
