"""The route table: soft-state registrations combined with the masters of the state machine."""

from __future__ import annotations

from controller.routes import RouteTable


def masters(name: str) -> tuple[int | None, str | None]:
    return {"a": (1, "h:1"), "b": (None, None)}.get(name, (None, None))


def table() -> RouteTable:
    t = RouteTable(expiry_ms=1000)
    t.register(cluster="C", broker_name="a", broker_id=1, address="h:1", topics={"T": 4},
               connection_id=10, now_ms=0)  # fmt: skip
    t.register(cluster="C", broker_name="a", broker_id=2, address="h:2", topics={"T": 8, "U": 1},
               connection_id=11, now_ms=0)  # fmt: skip
    t.register(cluster="C", broker_name="b", broker_id=1, address="h:3", topics={"T": 2},
               connection_id=12, now_ms=500)  # fmt: skip
    return t


def test_a_route_lists_every_group_with_the_topic_and_the_masters_queue_count() -> None:
    assert table().route("T", masters, 600) == {
        "topic": "T",
        "brokers": [
            {"brokerName": "a", "masterAddress": "h:1", "slaves": ["h:2"], "queues": 4},
            {"brokerName": "b", "masterAddress": None, "slaves": ["h:3"], "queues": 2},
        ],
    }
    # Only a slave registered U: its count is used, the master still comes from the metadata.
    assert table().route("U", masters, 600) == {
        "topic": "U",
        "brokers": [{"brokerName": "a", "masterAddress": "h:1", "slaves": ["h:2"], "queues": 1}],
    }
    assert table().route("nope", masters, 600) is None


def test_registrations_expire_and_leave_with_their_connection() -> None:
    t = table()
    assert t.connection_closed(10) == [("a", 1)]
    assert [b["slaves"] for b in t.route("T", masters, 600)["brokers"]] == [["h:2"], ["h:3"]]
    assert t.expire(1200) == [("a", 2)]  # 1200 ms after its registration; b's is 700 ms old
    assert [b["brokerName"] for b in t.route("T", masters, 1200)["brokers"]] == ["b"]
    assert t.route("T", masters, 1501) is None


def test_cluster_info_gives_each_registered_broker_its_role() -> None:
    assert table().cluster_info(masters, 0) == {
        "clusters": {
            "C": [
                {"brokerName": "a", "brokerId": 1, "address": "h:1", "role": "MASTER"},
                {"brokerName": "a", "brokerId": 2, "address": "h:2", "role": "SLAVE"},
                {"brokerName": "b", "brokerId": 1, "address": "h:3", "role": "SLAVE"},
            ]
        }
    }
    t = table()
    t.forget("a", frozenset({2}))
    assert [
        (b["brokerName"], b["brokerId"]) for b in t.cluster_info(masters, 0)["clusters"]["C"]
    ] == [
        ("a", 1),
        ("b", 1),
    ]
