"""FIFO message groups: the property that carries a message's group, and the group -> queue rule.

Pure code: no clock, no I/O. A producer sets a message group (a string, such as an order id) on
a message; every message of one group goes to one queue of the topic, chosen by
:func:`group_queue_index` over the topic's queues in a stable order, so that a FIFO consumer
group reads the group's messages in the order they were stored. The group travels in RocketMQ 5's
property for it, ``__SHARDINGKEY``.

The index is CRC-32 of the group's UTF-8 bytes modulo the queue count: the same group picks the
same queue in every process and every run (Python's ``hash()`` of a string is salted per
process). When the topic's queue count changes, a group may move to another queue; order across
that change is not guaranteed.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Final, TypeVar

PROP_MESSAGE_GROUP: Final = "__SHARDINGKEY"
"""The message's FIFO group (RocketMQ 5's name for it)."""

MAX_MESSAGE_GROUP_BYTES: Final = 128
"""The longest message group accepted, in UTF-8 bytes (RocketMQ 5's default limit)."""

Q = TypeVar("Q")


def message_group_error(group: str) -> str | None:
    """Why ``group`` cannot be a message group (None: it can)."""
    if not group:
        return "a message group must not be empty"
    size = len(group.encode("utf-8", "surrogatepass"))
    if size > MAX_MESSAGE_GROUP_BYTES:
        return f"message group of {size} bytes exceeds the limit of {MAX_MESSAGE_GROUP_BYTES} bytes"
    if any(c in group for c in ("\x00", "\x01", "\x02")):
        return "a message group must not hold the characters \\x00, \\x01 or \\x02"
    return None


def group_queue_index(group: str, queue_count: int) -> int:
    """The position of ``group``'s queue among ``queue_count`` queues in stable order."""
    if queue_count < 1:
        raise ValueError("queue_count must be >= 1")
    return zlib.crc32(group.encode("utf-8", "surrogatepass")) % queue_count


def group_queue(group: str, queues: Sequence[Q]) -> Q:
    """``group``'s queue among ``queues`` (already in their stable order: sorted by broker
    name, then queue id)."""
    return queues[group_queue_index(group, len(queues))]
