"""protocol/topic_attrs.py: a topic's permission and message type, a message's type from its
properties (RocketMQ's parseFromMessageProperty), mqadmin's attribute text, the refusals."""

from __future__ import annotations

import pytest

from protocol.fifo import PROP_MESSAGE_GROUP
from protocol.timer import REQUEST_PROPERTIES
from protocol.topic_attrs import (
    MessageType,
    TopicAttrs,
    attrs_from,
    message_type_of,
    parse_attributes,
    parse_message_type,
    parse_perm,
    perm_text,
    put_attrs,
    type_refusal,
)
from protocol.transaction import PROP_TRANSACTION_PREPARED


def test_a_messages_type_comes_from_its_properties() -> None:
    assert message_type_of({}) is MessageType.NORMAL
    assert message_type_of({PROP_MESSAGE_GROUP: "order-1"}) is MessageType.FIFO
    for prop in REQUEST_PROPERTIES:
        assert message_type_of({prop: "1000"}) is MessageType.DELAY
    half = {PROP_TRANSACTION_PREPARED: "true", PROP_MESSAGE_GROUP: "g"}
    assert message_type_of(half) is MessageType.TRANSACTION  # a half message first
    assert message_type_of({PROP_TRANSACTION_PREPARED: "false"}) is MessageType.NORMAL


def test_a_topic_takes_its_own_type_and_mixed_takes_any() -> None:
    assert type_refusal("T", MessageType.FIFO, MessageType.FIFO) is None
    assert type_refusal("T", MessageType.MIXED, MessageType.DELAY) is None
    why = type_refusal("T", MessageType.NORMAL, MessageType.TRANSACTION)
    assert why is not None and why.startswith("topic T takes NORMAL messages, not TRANSACTION")


def test_perm_and_type_text_and_bad_values() -> None:
    assert [perm_text(p) for p in (6, 4, 2, 7, 0)] == ["RW-", "R--", "-W-", "RWX", "---"]
    assert parse_perm("4") == 4 and parse_perm(6) == 6
    for bad in ("9", "-1", "rw", True, 8):
        with pytest.raises(ValueError, match=r"is not 0\.\.7"):
            parse_perm(bad)
    assert parse_message_type("fifo") is MessageType.FIFO
    with pytest.raises(ValueError, match="is not one of NORMAL, FIFO, DELAY, TRANSACTION, MIXED"):
        parse_message_type("ORDERED")
    assert parse_attributes("+message.type=delay") == {"message.type": "DELAY"}
    assert parse_attributes("") == {}
    for bad, words in (
        ("-message.type", r"is not \+key=value"),
        ("+retention=1", "is not known"),
        ("+message.type=X", "is not one of"),
    ):
        with pytest.raises(ValueError, match=words):
            parse_attributes(bad)


def test_fields_are_written_only_when_not_the_default() -> None:
    assert put_attrs({"queues": 1}, TopicAttrs()) == {"queues": 1}
    doc = put_attrs({}, TopicAttrs(4, MessageType.FIFO))
    assert doc == {"perm": 4, "messageType": "FIFO"}
    assert attrs_from(doc) == TopicAttrs(4, MessageType.FIFO)
    assert attrs_from({}) == TopicAttrs()
    with pytest.raises(ValueError):
        attrs_from({"messageType": "ORDERED"})
