"""The route table: soft-state registrations combined with the masters of the state machine."""

from __future__ import annotations

from controller.routes import RouteTable
from tests.metadata.support import CountingDict


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


def test_a_known_topic_keeps_its_groups_with_no_broker_registered() -> None:
    t = RouteTable(expiry_ms=1000)
    # Every broker of "a" and "c" is gone; the controllers' state still has the topic there.
    assert t.route("K", masters, 0, known={"a": 3, "c": 2}) == {
        "topic": "K",
        "brokers": [
            {"brokerName": "a", "masterAddress": "h:1", "slaves": [], "queues": 3},
            {"brokerName": "c", "masterAddress": None, "slaves": [], "queues": 2},
        ],
    }
    # The known count wins over a smaller registered one, a bigger registered master count wins.
    assert table().route("T", masters, 600, known={"a": 6, "b": 1})["brokers"] == [
        {"brokerName": "a", "masterAddress": "h:1", "slaves": ["h:2"], "queues": 6},
        {"brokerName": "b", "masterAddress": None, "slaves": ["h:3"], "queues": 2},
    ]


def test_a_static_topics_route_has_only_the_known_groups_and_counts() -> None:
    # A broker that created the topic itself on a send (its default 8 queues), or a group the
    # mapping does not use, is not routed to: the controllers' counts are the static topic's.
    assert table().route("T", masters, 600, known={"a": 2}, only_known=True) == {
        "topic": "T",
        "brokers": [{"brokerName": "a", "masterAddress": "h:1", "slaves": ["h:2"], "queues": 2}],
    }


def test_registrations_the_state_machine_does_not_vouch_for_are_ignored() -> None:
    def accept(broker_name: str, broker_id: int, address: str) -> bool:
        return (broker_name, broker_id, address) != ("a", 2, "h:2")

    assert table().route("U", masters, 600, accept=accept) is None
    doc = table().cluster_info(masters, 600, accept)
    assert [m["address"] for m in doc["clusters"]["C"]] == ["h:1", "h:3"]


def test_a_closed_connection_drops_its_registrations_without_walking_the_others() -> None:
    """Issue 34: every closed connection (a client's too) walked all 2,000 brokers'
    registrations."""
    t = RouteTable(expiry_ms=30_000)
    for i in range(2000):
        t.register(
            cluster="c",
            broker_name=f"g{i // 3}",
            broker_id=i % 3,
            address=f"10.0.0.{i}:10911",
            topics={"T": 8},
            connection_id=100 + i,
            now_ms=0,
        )
    t.register(  # registered again on a new connection: the old one holds it no more
        cluster="c",
        broker_name="g0",
        broker_id=0,
        address="10.0.0.0:10911",
        topics={"T": 8},
        connection_id=7,
        now_ms=1,
    )
    t._regs = counting = CountingDict(t._regs)
    assert t.connection_closed(100) == []
    assert t.connection_closed(101) == [("g0", 1)]
    assert t.connection_closed(99_999) == []
    assert counting.walks == 0
    assert t.get("g0", 1) is None and t.get("g0", 0) is not None
    assert t.connection_closed(7) == [("g0", 0)]
    assert len(t) == 1998


def reg(t: RouteTable, broker_name: str, now_ms: int, connection_id: int = 10) -> None:
    t.register(cluster="C", broker_name=broker_name, broker_id=1, address=f"h:{broker_name}",
               topics={"T": 4}, connection_id=connection_id, now_ms=now_ms)  # fmt: skip


def test_expire_looks_at_nothing_before_the_earliest_expiry_and_drops_each_at_its_time() -> None:
    """Issue 34: the election scan expires the registrations ten times a second, and each pass
    walked all of them (0.66 ms a pass at 2,100 brokers). It now looks at none until the earliest
    expiry of those held has passed; each still goes the first instant after its own."""
    t = RouteTable(expiry_ms=1000)
    reg(t, "a", 0)
    reg(t, "b", 300)
    t._regs = counting = CountingDict(t._regs)
    assert [t.expire(now) for now in (0, 500, 999, 1000)] == [[], [], [], []]
    assert counting.walks == 0
    assert t.expire(1001) == [("a", 1)]  # 1001 ms old: past its expiry
    assert counting.walks == 1
    assert [t.expire(now) for now in (1100, 1300)] == [[], []]  # b's expiry: 1300
    assert counting.walks == 1
    assert t.expire(1301) == [("b", 1)]
    assert len(t) == 0


def test_a_registration_again_moves_its_expiry_and_a_removed_one_is_never_expired() -> None:
    t = RouteTable(expiry_ms=1000)
    reg(t, "a", 0)
    reg(t, "b", 100, connection_id=11)
    reg(t, "c", 200, connection_id=12)
    reg(t, "a", 800)  # a's expiry moves from 1000 to 1800
    assert t.connection_closed(11) == [("b", 1)]
    t.forget("c")
    t._regs = counting = CountingDict(t._regs)
    assert t.expire(1001) == []  # the bound (1000, a's first expiry) passed: one look
    assert counting.walks == 1
    assert [t.expire(now) for now in (1200, 1500, 1800)] == [[], [], []]
    assert counting.walks == 1  # the look found a's new expiry: nothing before it
    assert t.expire(1801) == [("a", 1)]
    reg(t, "d", 1900)  # a registration after a look lowers the bound to its own expiry
    assert t.expire(2900) == [] and t.expire(2901) == [("d", 1)]


def test_expire_drops_what_a_look_at_every_registration_would_in_random_steps() -> None:
    """Seeded; the seed and step are in the failure message."""
    import random

    for seed in range(40):
        rng = random.Random(seed)
        t = RouteTable(expiry_ms=1000)
        at: dict[str, int] = {}  # the reference: each registration's time
        now = 0
        for step in range(300):
            now += rng.choice((0, 1, 50, 200, 700, 1500))
            op = rng.random()
            name = f"g{rng.randrange(8)}"
            if op < 0.45:
                reg(t, name, now, connection_id=100 + int(name[1:]))
                at[name] = now
            elif op < 0.5:
                t.connection_closed(100 + int(name[1:]))
                at.pop(name, None)
            elif op < 0.55:
                t.forget(name)
                at.pop(name, None)
            else:
                want = sorted((n, 1) for n, a in at.items() if now - a > 1000)
                for n, _ in want:
                    del at[n]
                assert t.expire(now) == want, f"seed {seed}, step {step}, now {now}"
                assert sorted(k[0] for k in t._regs) == sorted(at), f"seed {seed}, step {step}"
