"""The message group -> queue rule (protocol/fifo.py) and the producer's use of it over a route."""

from __future__ import annotations

import zlib

import pytest

from client.routes import BrokerRoute, MessageQueue, TopicRoute
from protocol.fifo import (
    MAX_MESSAGE_GROUP_BYTES,
    group_queue,
    group_queue_index,
    message_group_error,
)


def test_the_index_is_crc32_of_the_utf8_group_modulo_the_count() -> None:
    assert group_queue_index("order-42", 8) == zlib.crc32(b"order-42") % 8 == 6
    assert group_queue_index("заказ-7", 5) == zlib.crc32("заказ-7".encode()) % 5
    assert all(group_queue_index(f"g{i}", 1) == 0 for i in range(50))
    with pytest.raises(ValueError):
        group_queue_index("g", 0)


def test_groups_spread_over_the_queues() -> None:
    counts = [0] * 8
    for i in range(8000):
        counts[group_queue_index(f"order-{i}", 8)] += 1
    assert min(counts) > 800  # 1000 expected per queue


def test_the_queue_does_not_depend_on_the_order_the_route_lists_brokers() -> None:
    a = TopicRoute("T", (BrokerRoute("b", "h:2", (), 4), BrokerRoute("a", "h:1", (), 4)))
    b = TopicRoute("T", (BrokerRoute("a", "h:1", (), 4), BrokerRoute("b", "h:2", (), 4)))
    for i in range(100):
        g = f"order-{i}"
        assert group_queue(g, sorted(a.queues)) == group_queue(g, sorted(b.queues))
    # The sorted list: broker a's queues 0..3, then broker b's.
    expected = [MessageQueue("a", q) for q in range(4)] + [MessageQueue("b", q) for q in range(4)]
    assert sorted(a.queues) == expected
    assert group_queue("order-42", expected) == expected[6] == MessageQueue("b", 2)


def test_a_broker_group_without_master_keeps_its_place_in_the_order() -> None:
    """A group's queue is chosen over all of the route's queues, not only writable ones: a
    broker group in failover must not move other groups' queues."""
    up = TopicRoute("T", (BrokerRoute("a", "h:1", (), 2), BrokerRoute("b", "h:2", (), 2)))
    down = TopicRoute("T", (BrokerRoute("a", None, (), 2), BrokerRoute("b", "h:2", (), 2)))
    for i in range(100):
        g = f"g{i}"
        assert group_queue(g, sorted(up.queues)) == group_queue(g, sorted(down.queues))


def test_bad_message_groups_are_named() -> None:
    assert message_group_error("order-42") is None
    assert message_group_error("x" * MAX_MESSAGE_GROUP_BYTES) is None
    assert "exceeds" in (message_group_error("x" * (MAX_MESSAGE_GROUP_BYTES + 1)) or "")
    assert "exceeds" in (message_group_error("é" * 65) or "")  # 130 bytes
    assert "empty" in (message_group_error("") or "")
    assert message_group_error("a\x01b") is not None
