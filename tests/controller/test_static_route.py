"""A static topic's route: per logical queue the group of its newest item, sends only to open
newest items; the client parses it and the producer's queue choices follow it."""

from __future__ import annotations

import msgpack
import pytest

from client.errors import ClientError
from client.routes import LOGICAL_BROKER, MessageQueue, TopicRoute, parse_route
from controller.metadata import ReplicasInfoManager
from controller.service.static_topics import static_route
from protocol.remoting import KIND_RESPONSE, Frame
from protocol.static_topic import item_doc
from tests.metadata.support import commit, elect, register_group


def route_doc(queues: dict[str, int]) -> dict[str, object]:
    """The groups' route as RouteTable builds it from the controllers' topic table."""
    return {
        "topic": "Orders",
        "brokers": [
            {"brokerName": name, "masterAddress": f"h:{i}", "slaves": [], "queues": count}
            for i, (name, count) in enumerate(sorted(queues.items()))
        ],
    }


def static_doc(m: ReplicasInfoManager) -> dict[str, object]:
    mapping = m.static_topic("Orders")
    assert mapping is not None
    return static_route(route_doc(m.topic_queues("Orders")), mapping)


def manager() -> ReplicasInfoManager:
    m = ReplicasInfoManager()
    for name in ("broker-a", "broker-b"):
        register_group(m, 1, name)
        elect(m, [1], name)
    assert commit(m, m.create_static_topic("Orders", 3, ["broker-a"])).ok
    return m


def parsed(doc: dict[str, object]) -> TopicRoute:
    return parse_route(Frame(kind=KIND_RESPONSE, code=0, opaque=1, body=msgpack.packb(doc)))


def test_sends_go_to_open_newest_items_only_and_groups_hash_over_logical_queues() -> None:
    m = manager()
    route = parsed(static_doc(m))
    assert route.logical_queues == tuple(MessageQueue("broker-a", q) for q in range(3))
    assert {mq for mq, _ in route.writable} == {MessageQueue("broker-a", q) for q in range(3)}
    # Queue 1: sealed (a move in progress), then continued on broker-b.
    assert commit(m, m.seal_queue_item("Orders", 1, 10, "broker-b")).ok
    mid = parsed(static_doc(m))
    assert {mq for mq, _ in mid.writable} == {
        MessageQueue("broker-a", 0),
        MessageQueue("broker-a", 2),
    }
    assert commit(m, m.add_queue_item("Orders", 1, "broker-b")).ok
    after = parsed(static_doc(m))
    assert after.logical_queues[1] == MessageQueue("broker-b", 0)
    assert {mq for mq, _ in after.writable} == {
        MessageQueue("broker-a", 0),
        MessageQueue("broker-a", 2),
        MessageQueue("broker-b", 0),
    }
    # Consumers still see every physical queue (old items stay readable where they are).
    assert MessageQueue("broker-a", 1) in after.queues
    assert after.to_dict()["logicalQueues"][1] == {  # type: ignore[index]
        "queueId": 1,
        "brokerName": "broker-b",
        "physicalQueue": 0,
        "items": [item_doc(i) for i in after.mapping[1]],
    }
    # Readers get every item of each logical queue: queue 1 is sealed on broker-a at 10, then
    # goes on at broker-b's physical 0; consumers share out the logical queues.
    old, new = after.mapping[1]
    assert (old.broker_name, old.physical_queue, old.logical_end) == ("broker-a", 1, 10)
    assert (new.broker_name, new.physical_queue, new.logical_start) == ("broker-b", 0, 10)
    assert after.consume_queues() == tuple(MessageQueue(LOGICAL_BROKER, q) for q in range(3))
    assert parsed(after.to_dict()) == after


def test_a_route_with_broken_items_is_refused() -> None:
    doc = static_doc(manager())
    entries = doc["logicalQueues"]
    assert isinstance(entries, list)
    entries[0]["items"][0]["logicalStart"] = 3
    with pytest.raises(ClientError, match="malformed route"):
        parsed(doc)


def test_an_ordinary_route_is_unchanged() -> None:
    doc = route_doc({"broker-a": 2, "broker-b": 2})
    route = parsed(doc)
    assert route.logical_queues == ()
    assert len(route.writable) == 4
    assert route.to_dict() == doc
    assert route.consume_queues() == route.queues
