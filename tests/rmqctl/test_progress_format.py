"""consumerProgress and consumerConnection without a cluster: rows and totals from broker
answers, the tables, the slave notes, the choice of broker to ask, member merging and the queue
allocation rmqctl computes (the consumers' own function)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from client.allocate import allocate_averagely
from client.progress import (
    BrokerAnswer,
    BrokerTarget,
    Member,
    allocation,
    merge_members,
    pick_targets,
)
from client.routes import LOGICAL_BROKER, ClusterBroker, MessageQueue
from protocol.consume_stats import ConsumerConnection, ConsumeStats, QueueStats
from protocol.static_topic import MappingItem
from rmqctl.cli import cli
from rmqctl.progress import (
    format_time,
    group_totals,
    groups_table,
    logical_rows,
    progress_rows,
    progress_table,
    queue_ranges,
    source_notes,
)
from tests.support.procs import dead_address

T0 = 1_700_000_000_000  # 2023-11-14 22:13:20 UTC


def answer(
    name: str, groups: dict[str, tuple[QueueStats, ...]], slave: bool = False
) -> BrokerAnswer:
    target = BrokerTarget(name, f"{name}:1", slave)
    return BrokerAnswer(target, ConsumeStats(name, target.address, "MASTER", groups))


def test_rows_and_totals_over_two_broker_groups() -> None:
    answers = [
        answer("broker-b", {"g": (QueueStats("T", 0, 0, 5, 5, T0),)}),
        answer(
            "broker-a",
            {
                "g": (QueueStats("T", 1, 0, 9, 2, T0), QueueStats("T", 0, 0, 4, None, None)),
                "h": (QueueStats("U", 0, 0, 3, 0, T0),),
            },
        ),
        BrokerAnswer(BrokerTarget("broker-c", "c:1", False), error="broker-c (c:1): refused"),
    ]
    rows = progress_rows(answers)
    assert [(r.group, r.broker_name, r.queue_id, r.lag) for r in rows] == [
        ("g", "broker-a", 0, 4),
        ("g", "broker-a", 1, 7),
        ("g", "broker-b", 0, 0),
        ("h", "broker-a", 0, 3),
    ]
    assert group_totals(rows) == {"g": (11, 3), "h": (3, 1)}
    text = progress_table("g", [r for r in rows if r.group == "g"], [])
    lines = text.splitlines()
    assert lines[0] == "Consumer group: g"
    assert lines[1].split() == [
        "Topic", "Broker", "Name", "QID", "Max", "Offset", "Consumer", "Offset", "Lag", "Last",
        "Consume", "(UTC)",
    ]  # fmt: skip
    assert lines[2].split() == ["T", "broker-a", "0", "4", "-", "4", "-"]
    assert lines[3].split() == ["T", "broker-a", "1", "9", "2", "7", "2023-11-14", "22:13:20"]
    assert lines[-1] == "Total lag: 11 (3 queues)"
    assert groups_table(group_totals(rows), ["n"]).splitlines() == [
        "Group  Queues  Total Lag",
        "g      3       11",
        "h      1       3",
        "Note: n",
    ]


def test_a_broker_group_read_from_a_slave_gets_a_note() -> None:
    answers = [answer("broker-a", {}, slave=True), answer("broker-b", {})]
    (note,) = source_notes(answers)
    assert note.startswith("broker-a: no master now; read from slave broker-a:1")


def test_targets_are_masters_else_the_lowest_slave() -> None:
    clusters = {
        "c": [
            ClusterBroker("broker-a", 2, "a2", "SLAVE"),
            ClusterBroker("broker-a", 1, "a1", "MASTER"),
            ClusterBroker("broker-b", 3, "b3", "SLAVE"),
            ClusterBroker("broker-b", 2, "b2", "SLAVE"),
        ]
    }
    assert pick_targets(clusters) == [
        BrokerTarget("broker-a", "a1", False),
        BrokerTarget("broker-b", "b2", True),
    ]


def test_members_merge_over_brokers_keeping_the_latest_heartbeat() -> None:
    merged = merge_members(
        {
            "broker-b": [ConsumerConnection("c1", "h:2", "T", T0 + 5)],
            "broker-a": [
                ConsumerConnection("c1", "h:1", "T", T0),
                ConsumerConnection("c0", "h:9", "T", T0),
            ],
        }
    )
    assert merged == [
        Member("c0", "h:9", "T", T0, ("broker-a",)),
        Member("c1", "h:2", "T", T0 + 5, ("broker-a", "broker-b")),
    ]


def test_allocation_is_what_each_consumer_computes_for_itself() -> None:
    queues = [MessageQueue(b, q) for b in ("broker-b", "broker-a") for q in range(3)]
    members = [Member(f"c{i}", "h", "T", T0, ("broker-a",)) for i in (2, 0, 1, 3)]
    held = allocation(members, {"T": queues})
    ids = ["c0", "c1", "c2", "c3"]
    for cid in ids:
        assert held[cid] == allocate_averagely(sorted(queues), ids, cid)
    assert sorted(q for qs in held.values() for q in qs) == sorted(queues)  # a partition
    assert queue_ranges(held["c0"]) == "broker-a:0-1"
    assert allocation([Member("x", "h", "Gone", T0, ())], {"Gone": []}) == {"x": []}


def test_pop_members_hold_no_queue_and_the_others_share_among_themselves() -> None:
    queues = [MessageQueue("broker-a", q) for q in range(4)]
    members = [
        Member("a", "h", "T", T0, ("broker-a",), consume_type="pop"),
        Member("b", "h", "T", T0, ("broker-a",), consume_type="push"),
        Member("c", "h", "T", T0, ("broker-a",), consume_type=""),  # an older client: holds
        Member("d", "h", "T", T0, ("broker-a",), consume_type="pop"),
    ]
    held = allocation(members, {"T": queues})
    assert held == {cid: allocate_averagely(queues, ["b", "c"], cid) for cid in ("b", "c")}
    assert allocation(members[:1], {"T": queues}) == {}  # a POP group: no queue is held
    merged = merge_members(
        {"broker-a": [ConsumerConnection("a", "h:1", "T", T0, consume_type="pop")]}
    )
    assert [(m.consume_type, m.pops) for m in merged] == [("pop", True)]


def test_queue_ranges_and_times() -> None:
    qs = [MessageQueue("broker-a", q) for q in (0, 1, 2, 5, 7, 8)] + [MessageQueue("broker-b", 3)]
    assert queue_ranges(qs) == "broker-a:0-2,5,7-8, broker-b:3"
    assert queue_ranges([]) == "-"
    assert queue_ranges([MessageQueue(LOGICAL_BROKER, q) for q in (0, 1, 3)]) == "logical:0-1,3"
    assert format_time(None) == "-" and format_time(0) == "-"
    assert format_time(T0) == "2023-11-14 22:13:20"


@pytest.mark.parametrize(
    "args",
    [["consumerProgress", "-g", "G"], ["consumerProgress"], ["consumerConnection", "-g", "G"]],
)
def test_an_unreachable_cluster_is_one_line_and_exit_1(args: list[str]) -> None:
    addr = dead_address()
    result = CliRunner().invoke(cli, [*args, "-a", addr], catch_exceptions=False)
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr == f"rmqctl: cannot reach any of {addr}: connection refused\n"


def test_a_static_topics_rows_fold_into_logical_queues() -> None:
    moved = (
        MappingItem(
            broker_name="broker-a",
            physical_queue=1,
            logical_start=0,
            physical_start=0,
            generation=0,
            logical_end=10,
        ),
        MappingItem(
            broker_name="broker-b",
            physical_queue=0,
            logical_start=10,
            physical_start=0,
            generation=1,
        ),
    )
    stays = (
        MappingItem(
            broker_name="broker-a",
            physical_queue=0,
            logical_start=0,
            physical_start=0,
            generation=0,
        ),
    )
    answers = [
        answer(
            "broker-a",
            {
                "g": (
                    QueueStats("S", 0, 0, 7, 7, T0),
                    QueueStats("S", 1, 0, 10, 10, T0),
                    QueueStats("T", 0, 0, 4, 1, T0),
                )
            },
        ),
        answer("broker-b", {"g": (QueueStats("S", 0, 0, 6, 2, T0 + 5),)}),
    ]
    rows = logical_rows(progress_rows(answers), {"S": (stays, moved)})
    assert [
        (r.topic, r.broker_name, r.queue_id, r.max_offset, r.consumer_offset, r.lag, r.logical)
        for r in rows
    ] == [
        ("S", "broker-a", 0, 7, 7, 0, True),
        ("S", "broker-b", 1, 16, 12, 4, True),
        ("T", "broker-a", 0, 4, 1, 3, False),
    ]
    assert rows[1].last_consume_ms == T0 + 5
    assert "broker-b (logical)" in progress_table("g", rows, [])
    # The group never committed: every retained message of every item is lag.
    fresh = [
        answer("broker-a", {"g": (QueueStats("S", 1, 3, 10, None, None),)}),
        answer("broker-b", {"g": (QueueStats("S", 0, 0, 6, None, None),)}),
    ]
    (row,) = [r for r in logical_rows(progress_rows(fresh), {"S": (stays, moved)})]
    assert (row.queue_id, row.max_offset, row.consumer_offset, row.lag) == (1, 16, None, 13)
