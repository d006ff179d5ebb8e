"""RocketMQ's message properties string and the property names the classic clients send.

A message's properties travel as one string (the ``properties`` header field of a send, the
properties of a stored message and of each message of a batch)::

    name \\x01 value \\x02 name \\x01 value \\x02 ...

Writing (``MessageDecoder.messageProperties2String``) appends ``name\\x01value\\x02`` for
every property. Reading (``string2messageProperties``) splits at ``\\x02`` and keeps a piece only
when it holds a ``\\x01`` with at least one character before it and one after it: a property
with an empty name or an empty value does not survive a trip through RocketMQ (a last piece
without its ``\\x02`` is read like the others). :func:`decode_properties`
reads the same way, so what a RocketMQ client would see is what we see. (Our own records keep
empty values: :func:`protocol.message.decode_properties` is a different, lossless reader.)

The names are RocketMQ's (``MessageConst``) where it has them; where a name is already defined
in the service that acts on it, that definition is imported here rather than written twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from protocol.fifo import PROP_MESSAGE_GROUP
from protocol.message import PROP_KEYS, PROP_TAGS
from protocol.retry import (
    PROP_MAX_RECONSUME_TIMES,
    PROP_ORIGIN_MESSAGE_ID,
    PROP_RECONSUME_TIME,
    PROP_RETRY_TOPIC,
)
from protocol.timer import (
    PROP_REAL_QUEUE_ID,
    PROP_REAL_TOPIC,
    PROP_START_DELIVER_TIME,
    PROP_TIMER_DELAY_MS,
    PROP_TIMER_DELAY_SEC,
    PROP_TIMER_DELIVER_MS,
    PROP_UNIQ_KEY,
)
from protocol.transaction import (
    PROP_PRODUCER_GROUP,
    PROP_TRANSACTION_ID,
    PROP_TRANSACTION_PREPARED,
)

__all__ = [
    "NAME_VALUE_SEPARATOR",
    "PROPERTY_SEPARATOR",
    "PROP_BUYER_ID",
    "PROP_CHECK_IMMUNITY_TIME_IN_SECONDS",
    "PROP_CONSUME_START_TIME",
    "PROP_DELAY_TIME_LEVEL",
    "PROP_INSTANCE_ID",
    "PROP_KEYS",
    "PROP_MAX_OFFSET",
    "PROP_MAX_RECONSUME_TIMES",
    "PROP_MESSAGE_GROUP",
    "PROP_MIN_OFFSET",
    "PROP_ONS_SHARDING_KEY",
    "PROP_ORIGIN_MESSAGE_ID",
    "PROP_PRODUCER_GROUP",
    "PROP_REAL_QUEUE_ID",
    "PROP_REAL_TOPIC",
    "PROP_RECONSUME_TIME",
    "PROP_RETRY_TOPIC",
    "PROP_START_DELIVER_TIME",
    "PROP_TAGS",
    "PROP_TIMER_DELAY_MS",
    "PROP_TIMER_DELAY_SEC",
    "PROP_TIMER_DELIVER_MS",
    "PROP_TRANSACTION_CHECK_TIMES",
    "PROP_TRANSACTION_ID",
    "PROP_TRANSACTION_PREPARED",
    "PROP_TRANSACTION_PREPARED_QUEUE_OFFSET",
    "PROP_UNIQ_KEY",
    "PROP_WAIT_STORE_MSG_OK",
    "decode_properties",
    "encode_properties",
]

NAME_VALUE_SEPARATOR: Final = "\x01"
PROPERTY_SEPARATOR: Final = "\x02"

PROP_WAIT_STORE_MSG_OK: Final = "WAIT"
"""``"true"`` (the default) or ``"false"``: whether the send waits for the store's flush."""
PROP_DELAY_TIME_LEVEL: Final = "DELAY"
"""A delay level, 1-based, into the broker's ``messageDelayLevel`` list (0: no delay)."""
PROP_MIN_OFFSET: Final = "MIN_OFFSET"
PROP_MAX_OFFSET: Final = "MAX_OFFSET"
"""The queue's offsets, set by the broker on each message of a pull answer."""
PROP_BUYER_ID: Final = "BUYER_ID"
PROP_CONSUME_START_TIME: Final = "CONSUME_START_TIME"
PROP_CHECK_IMMUNITY_TIME_IN_SECONDS: Final = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PROP_TRANSACTION_PREPARED_QUEUE_OFFSET: Final = "TRAN_PREPARED_QUEUE_OFFSET"
PROP_TRANSACTION_CHECK_TIMES: Final = "TRANSACTION_CHECK_TIMES"
PROP_INSTANCE_ID: Final = "INSTANCE_ID"
PROP_ONS_SHARDING_KEY: Final = "__SHARDING_KEY"
"""The sharding key as ali-ons names it (with an underscore; RocketMQ's own is ``__SHARDINGKEY``,
:data:`PROP_MESSAGE_GROUP`)."""


def encode_properties(properties: Mapping[str, str]) -> str:
    """The properties string, in the mapping's order."""
    return "".join(
        f"{name}{NAME_VALUE_SEPARATOR}{value}{PROPERTY_SEPARATOR}"
        for name, value in properties.items()
    )


def decode_properties(text: str) -> dict[str, str]:
    """The properties in ``text``, read as RocketMQ reads them (see the module docstring).

    Never raises: a piece RocketMQ would skip is skipped.
    """
    props: dict[str, str] = {}
    for piece in text.split(PROPERTY_SEPARATOR):
        sep = piece.find(NAME_VALUE_SEPARATOR)
        # A name before the separator and a value after it (string2messageProperties'
        # kvSepIndex > index && kvSepIndex < newIndex - 1).
        if 0 < sep < len(piece) - 1:
            props[piece[:sep]] = piece[sep + 1 :]
    return props
