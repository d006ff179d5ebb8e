"""The re-balance planner (protocol/rebalance.py) and the controllers' side of it
(controller/metadata/rebalance.py, controller/metadata/traffic.py): pure, time as an input."""

from __future__ import annotations

import random

import pytest

from controller.metadata.rebalance import ImbalanceWatch, queue_traffic
from controller.metadata.traffic import TrafficTable, loads
from protocol.rebalance import (
    ORDINARY,
    Move,
    PlanError,
    QueueTraffic,
    least_loaded,
    plan_from_job,
    plan_moves,
    spread,
)
from protocol.traffic import TopicRate, TrafficReport
from tests.metadata.support import mapping_item


def q(topic: str, queue: int, group: str, rate: float, movable: bool = True) -> QueueTraffic:
    return QueueTraffic(topic, queue, group, rate, movable)


def test_balanced_cluster_moves_nothing() -> None:
    plan = plan_moves({"a": 100.0, "b": 60.0}, [q("t", 0, "a", 100.0)], {}, threshold=50)
    assert not plan.rebalance and plan.moves == ()
    assert "within the threshold 50" in plan.reason
    assert plan.doc()["spreadBefore"] == 40.0


def test_one_group_moves_nothing() -> None:
    plan = plan_moves({"a": 1000.0}, [q("t", 0, "a", 1000.0)], {}, threshold=1)
    assert plan.moves == () and "fewer than two" in plan.reason


def test_busy_static_topic_spreads_onto_a_new_group() -> None:
    # Four queues of 50 msg/s on a; b is new and idle: two queues move, the spread ends at 0.
    queues = [q("orders", i, "a", 50.0) for i in range(4)]
    plan = plan_moves({"a": 200.0, "b": 0.0}, queues, {}, threshold=60)
    assert plan.rebalance
    assert [(m.topic, m.source, m.target) for m in plan.moves] == [("orders", "a", "b")] * 2
    assert plan.after == {"a": 100.0, "b": 100.0}
    assert plan.reason == ""
    doc = plan.doc()
    assert doc["moves"][0] == {
        "topic": "orders",
        "queue": 0,
        "from": "a",
        "to": "b",
        "msgPerSec": 50.0,
    }
    assert doc["spreadAfter"] == 0.0


def test_busiest_queue_first_onto_the_idlest_group() -> None:
    # The gap is 900: the queue of 400 evens a and c out best; then b (idlest) gets one.
    queues = [q("big", 0, "a", 400.0), q("mid", 0, "a", 300.0), q("small", 0, "a", 200.0)]
    plan = plan_moves({"a": 900.0, "b": 100.0, "c": 0.0}, queues, {}, threshold=150)
    first = plan.moves[0]
    assert (first.topic, first.target) == ("big", "c")
    assert all(m.source == "a" for m in plan.moves)
    assert spread(plan.after) <= 150


def test_only_movable_static_queues_move_and_ordinary_traffic_is_named() -> None:
    queues = [q("s", 0, "a", 100.0, movable=False), q("s", 1, "a", 0.0)]
    plan = plan_moves(
        {"a": 5000.0, "b": 0.0}, queues, {("logs", "a"): 4900.0, ("x", "b"): 1.0}, threshold=100
    )
    assert plan.rebalance and plan.moves == ()
    assert plan.reason == "no static topic queue on a can narrow the spread"
    assert [(u.topic, u.group, u.reason) for u in plan.unmovable] == [("logs", "a", ORDINARY)]


def test_a_queue_that_would_overshoot_is_not_moved() -> None:
    # Moving the 300 msg/s queue across a gap of 250 would only swap the imbalance.
    plan = plan_moves({"a": 300.0, "b": 50.0}, [q("t", 0, "a", 300.0)], {}, threshold=100)
    assert plan.moves == () and "can narrow the spread" in plan.reason


def test_max_moves_bounds_the_plan() -> None:
    queues = [q("t", i, "a", 10.0) for i in range(20)]
    plan = plan_moves({"a": 200.0, "b": 0.0}, queues, {}, threshold=0, max_moves=3)
    assert len(plan.moves) == 3 and plan.reason == "stopped after 3 moves"


@pytest.mark.parametrize("seed", range(40))
def test_random_plans_only_ever_narrow_the_spread(seed: int) -> None:
    """Seeded random clusters: every move narrows its pair's gap (the sum of squared loads
    falls), each queue moves at most once and from where it is, and the plan ends within the
    threshold unless it says why not."""
    rng = random.Random(seed)
    groups = [f"g{i}" for i in range(rng.randint(2, 6))]
    queues = [
        q(f"t{t}", i, rng.choice(groups), rng.choice([0.0, rng.uniform(1, 500)]))
        for t in range(rng.randint(1, 5))
        for i in range(rng.randint(1, 8))
    ]
    base = {g: rng.uniform(0, 300) for g in groups}
    load = dict(base)
    for x in queues:
        load[x.group] += x.msg_per_sec
    threshold = rng.uniform(0, 400)
    plan = plan_moves(load, queues, {}, threshold)
    current = dict(load)
    squares = sum(v * v for v in current.values())
    moved = set()
    where = {(x.topic, x.queue): x.group for x in queues}
    for m in plan.moves:
        assert (m.topic, m.queue) not in moved
        moved.add((m.topic, m.queue))
        assert where[(m.topic, m.queue)] == m.source != m.target
        assert m.msg_per_sec is not None
        current[m.source] -= m.msg_per_sec
        current[m.target] += m.msg_per_sec
        now = sum(v * v for v in current.values())
        assert now < squares
        squares = now
    assert current == pytest.approx(plan.after)
    if plan.rebalance:
        assert spread(plan.after) <= threshold or plan.reason
    else:
        assert plan.moves == ()


def test_least_loaded_groups_take_new_topics() -> None:
    assert least_loaded({"a": 10.0, "b": 0.0, "c": 5.0, "d": 0.0}, 2) == ["b", "d"]
    assert least_loaded({"a": 10.0, "b": 0.0, "c": 5.0}, 3) == ["a", "b", "c"]


def test_traffic_job_plan_becomes_queue_moves() -> None:
    job = {
        "rebalance": True,
        "threshold": 5000.0,
        "rate": "peak hourly msg/s",
        "spreadBefore": 13000.0,
        "groupsBefore": {"a": 13000.0, "b": 0.0},
        "spreadAfter": 3000.0,
        "groupsAfter": {"a": 8000.0, "b": 5000.0},
        "assignments": {"orders": "b", "logs": "a"},
        "moves": [
            {"topic": "orders", "msgPerSec": 5000.0, "from": ["a"], "to": "b", "queues": 4},
            {"topic": "clicks", "msgPerSec": 100.0, "from": ["a"], "to": "b", "queues": 2},
        ],
    }
    plan = plan_from_job(job, {"orders": ["a", "b", None, "a"]}, frozenset({"clicks"}))
    assert plan.moves == (Move("orders", 0, "a", "b", None), Move("orders", 3, "a", "b", None))
    assert [(u.topic, u.group) for u in plan.unmovable] == [("clicks", "a")]
    doc = plan.doc()
    assert doc["rate"] == "peak hourly msg/s (traffic job)"
    assert doc["moves"][0]["msgPerSec"] is None and doc["groupsAfter"] == {"a": 8000, "b": 5000}


@pytest.mark.parametrize(
    ("doc", "error"),
    [
        ([], "not a traffic job plan"),
        ({"moves": []}, '"threshold" and "groupsBefore"'),
        ({"moves": [{"topic": 1}], "threshold": 1, "groupsBefore": {}}, "move 1 must be"),
        (
            {
                "moves": [{"topic": "x", "msgPerSec": 1, "from": [], "to": "b"}],
                "threshold": 1,
                "groupsBefore": {},
            },
            "topic x does not exist",
        ),
    ],
)
def test_bad_traffic_job_plans_are_refused(doc: object, error: str) -> None:
    with pytest.raises(PlanError, match=error):
        plan_from_job(doc, {}, frozenset())


def test_traffic_table_sums_a_groups_brokers_and_forgets_stale_reports() -> None:
    table = TrafficTable()
    master = TrafficReport(60_000, 120.0, {"orders": TopicRate(100.0, {0: 60.0, 1: 40.0})})
    former = TrafficReport(60_000, 10.0, {"orders": TopicRate(10.0, {1: 10.0})})
    table.on_report("a", 1, master, now_ms=10_000)
    table.on_report("a", 2, former, now_ms=9_000)
    table.on_report("b", 1, TrafficReport(30_000, 5.0), now_ms=1_000)
    groups = table.groups(now_ms=10_500, max_age_ms=2_000)
    assert set(groups) == {"a"}  # b's report is stale
    a = groups["a"]
    assert a.msg_per_sec == 130.0 and a.topics == {"orders": 110.0}
    assert a.queues == {"orders": {0: 60.0, 1: 50.0}}
    assert loads(groups, ["a", "b"]) == {"a": 130.0, "b": 0.0}
    table.forget("a", frozenset({2}))
    assert table.groups(10_500, 2_000)["a"].msg_per_sec == 120.0
    table.clear()
    assert table.groups(10_500, 2_000) == {}


def test_queue_traffic_follows_the_newest_item() -> None:
    mapping = (
        (mapping_item("a", 0, 0, 0, 100), mapping_item("b", 0, 100, 1, None)),
        (mapping_item("a", 1, 0, 0, None),),
        (mapping_item("a", 2, 0, 0, 7),),  # sealed, no successor yet: moving
    )
    table = TrafficTable()
    table.on_report("a", 1, TrafficReport(1000, 9.0, {"t": TopicRate(9.0, {0: 5.0, 1: 4.0})}), 0)
    table.on_report("b", 1, TrafficReport(1000, 3.0, {"t": TopicRate(3.0, {0: 3.0})}), 0)
    got = queue_traffic("t", mapping, table.groups(0, 1000))
    assert got == [
        QueueTraffic("t", 0, "b", 3.0, True),
        QueueTraffic("t", 1, "a", 4.0, True),
        QueueTraffic("t", 2, "a", 0.0, False),
    ]


def test_imbalance_must_hold_and_each_action_waits_for_fresh_figures() -> None:
    watch = ImbalanceWatch(hold_ms=3000)
    assert not watch.observe(0, over=True)
    assert not watch.observe(2999, over=True)
    assert not watch.observe(3500, over=False)  # a break starts the hold over
    assert not watch.observe(4000, over=True)
    assert watch.observe(7000, over=True)
    watch.acted(7000, quiet_ms=5000)
    assert not watch.observe(11_000, over=True)  # still quiet: the figures lag the move
    assert not watch.observe(12_000, over=True)  # the hold starts again
    assert watch.observe(15_000, over=True)
    watch.reset()
    assert not watch.observe(15_001, over=True)
