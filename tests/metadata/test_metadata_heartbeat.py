"""Broker liveness: timeouts, closed connections, and the grace period of a new active controller."""

from __future__ import annotations

import pytest

from controller.metadata import BrokerLiveTable, ElectionInfo

G = "broker-a"


def beat(
    table: BrokerLiveTable,
    broker_id: int,
    now_ms: int,
    *,
    connection_id: int | None = None,
    timeout_ms: int = 1000,
    epoch: int = 1,
    max_offset: int = 100,
    priority: int = 0,
    name: str = G,
) -> bool:
    return table.on_heartbeat(
        cluster="DefaultCluster",
        broker_name=name,
        broker_id=broker_id,
        address=f"h:{broker_id}",
        now_ms=now_ms,
        epoch=epoch,
        max_offset=max_offset,
        confirm_offset=max_offset - 1,
        election_priority=priority,
        timeout_ms=timeout_ms,
        connection_id=broker_id if connection_id is None else connection_id,
    )


def active_table(now_ms: int = 0, default_timeout_ms: int = 1000) -> BrokerLiveTable:
    """An active controller past its grace period at ``now_ms`` + default timeout."""
    table = BrokerLiveTable(default_timeout_ms=default_timeout_ms)
    table.became_active(now_ms)
    return table


def test_a_broker_is_alive_until_its_timeout_and_then_expires_once() -> None:
    table = active_table()
    assert beat(table, 1, 2000) is True  # new: just became alive
    assert beat(table, 1, 2500) is False  # already alive
    assert table.is_alive(G, 1, 3500)
    assert table.expired(3500) == []
    assert not table.is_alive(G, 1, 3501)
    assert table.expired(3501) == [(G, 1)]
    assert table.expired(9000) == []  # reported once
    assert table.declared_dead(G, 1, 3501)


def test_heartbeats_without_a_timeout_use_the_default() -> None:
    table = active_table(default_timeout_ms=3000)
    beat(table, 1, 0, timeout_ms=0)
    info = table.get(G, 1)
    assert info is not None and info.timeout_ms == 3000
    assert table.is_alive(G, 1, 3000) and not table.is_alive(G, 1, 3001)


def test_a_heartbeat_revives_an_expired_broker() -> None:
    table = active_table()
    beat(table, 1, 2000)
    assert table.expired(5000) == [(G, 1)]
    assert beat(table, 1, 5001) is True
    assert table.is_alive(G, 1, 5001) and not table.declared_dead(G, 1, 5001)
    assert table.expired(7000) == [(G, 1)]  # and it can expire again


def test_a_closed_connection_makes_its_brokers_inactive_at_once() -> None:
    table = active_table()
    beat(table, 1, 2000, connection_id=7)
    beat(table, 2, 2000, connection_id=7)
    beat(table, 3, 2000, connection_id=8)
    assert table.on_connection_closed(7) == [(G, 1), (G, 2)]
    assert not table.is_alive(G, 1, 2001) and not table.is_alive(G, 2, 2001)
    assert table.is_alive(G, 3, 2001)
    assert table.declared_dead(G, 1, 2001)
    assert table.on_connection_closed(7) == []
    assert table.expired(9000) == [(G, 3)]  # 1 and 2 were already reported


def test_a_broker_that_moved_to_a_new_connection_survives_the_old_one_closing() -> None:
    table = active_table()
    beat(table, 1, 2000, connection_id=7)
    beat(table, 1, 2100, connection_id=9)
    assert table.on_connection_closed(7) == []
    assert table.is_alive(G, 1, 2200)


def test_a_heartbeat_on_a_new_connection_revives_a_closed_broker() -> None:
    table = active_table()
    beat(table, 1, 2000, connection_id=7)
    table.on_connection_closed(7)
    assert beat(table, 1, 2001, connection_id=8) is True
    assert table.is_alive(G, 1, 2001)


def test_a_standby_controller_judges_nobody() -> None:
    table = BrokerLiveTable(default_timeout_ms=1000)
    beat(table, 1, 0)
    assert table.is_alive(G, 1, 500)  # it still knows what it heard
    assert table.expired(10_000) == []
    assert not table.declared_dead(G, 1, 10_000)
    assert not table.declared_dead(G, 9, 10_000)
    table.became_active(10_000)
    table.became_standby()
    assert not table.active
    assert table.expired(99_000) == []


def test_a_new_active_controller_declares_nobody_dead_for_one_timeout() -> None:
    table = BrokerLiveTable(default_timeout_ms=3000)
    beat(table, 1, 0, timeout_ms=3000)  # heard while standby, long ago
    table.became_active(10_000)
    assert table.in_grace(10_000) and table.in_grace(12_999)
    # Stale entry: not alive (no recent heartbeat), but not declared dead either.
    assert not table.is_alive(G, 1, 10_000)
    assert not table.declared_dead(G, 1, 12_999)
    assert table.expired(12_999) == []
    # Unknown broker (empty table for it): likewise.
    assert not table.declared_dead(G, 2, 12_999)
    # One timeout later, silence counts.
    assert not table.in_grace(13_000)
    assert table.declared_dead(G, 1, 13_000)
    assert table.declared_dead(G, 2, 13_000)
    assert table.expired(13_000) == [(G, 1)]


def test_a_new_active_controller_knows_whom_it_heard_since_it_became_active() -> None:
    table = BrokerLiveTable(default_timeout_ms=3000)
    beat(table, 1, 0)  # heard while standby
    assert not table.heard_since_active(G, 1)
    table.became_active(10_000)
    assert not table.heard_since_active(G, 1) and not table.heard_since_active(G, 2)
    beat(table, 1, 10_050)
    assert table.heard_since_active(G, 1) and not table.heard_since_active(G, 2)
    table.became_standby()
    assert not table.heard_since_active(G, 1)
    table.became_active(20_000)  # a later leadership hears everyone again
    assert not table.heard_since_active(G, 1)


def test_a_broker_heard_during_the_grace_period_is_alive_at_once() -> None:
    table = BrokerLiveTable(default_timeout_ms=3000)
    table.became_active(0)
    beat(table, 1, 100, timeout_ms=500)
    assert table.is_alive(G, 1, 100)
    assert table.expired(700) == []  # silent past its timeout, but still in grace
    assert not table.declared_dead(G, 1, 700)
    assert table.expired(3000) == [(G, 1)]


def test_a_closed_connection_counts_even_during_the_grace_period() -> None:
    table = BrokerLiveTable(default_timeout_ms=3000)
    table.became_active(0)
    beat(table, 1, 100, connection_id=5)
    assert table.on_connection_closed(5) == [(G, 1)]
    assert table.declared_dead(G, 1, 200)


def test_the_grace_period_covers_the_longest_known_timeout() -> None:
    table = BrokerLiveTable(default_timeout_ms=1000)
    beat(table, 1, 0, timeout_ms=5000)
    table.became_active(100)
    assert table.in_grace(5099) and not table.in_grace(5100)


def test_becoming_active_again_judges_afresh() -> None:
    table = active_table()
    beat(table, 1, 2000)
    assert table.expired(5000) == [(G, 1)]
    table.became_standby()
    table.became_active(6000)
    assert table.expired(6500) == []  # grace
    assert table.expired(7000) == [(G, 1)]  # reported again by this leadership


def test_the_election_view_holds_alive_brokers_with_their_heartbeat() -> None:
    table = active_table()
    beat(table, 1, 2000, epoch=3, max_offset=50, priority=2)
    beat(table, 2, 2000, epoch=4, max_offset=10, priority=1, connection_id=2)
    beat(table, 3, 0)
    beat(table, 1, 2000, name="broker-b")
    table.on_connection_closed(2)
    assert table.election_view(G, 2500) == {
        1: ElectionInfo(epoch=3, max_offset=50, election_priority=2)
    }
    assert [b.broker_id for b in table.brokers(G)] == [1, 2, 3]
    alive = table.alive_predicate(2500)
    assert alive(G, 1) and not alive(G, 2) and not alive(G, 3) and alive("broker-b", 1)


def test_forget_drops_brokers() -> None:
    table = active_table()
    beat(table, 1, 2000, connection_id=4)
    beat(table, 2, 2000, connection_id=4)
    table.forget(G, frozenset({1}))
    assert table.get(G, 1) is None and table.get(G, 2) is not None
    assert table.on_connection_closed(4) == [(G, 2)]
    table.forget(G)
    assert table.brokers(G) == []


def test_an_older_timestamp_never_moves_the_last_heartbeat_back() -> None:
    table = active_table()
    beat(table, 1, 5000)
    beat(table, 1, 4000)
    info = table.get(G, 1)
    assert info is not None and info.last_heartbeat_ms == 5000


def test_the_default_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError):
        BrokerLiveTable(default_timeout_ms=0)


def test_a_controller_that_stood_still_judges_nobody_by_that_silence() -> None:
    """Its scan came late (its process or host stood still): the heartbeats that waited in the
    sockets meanwhile get a grace period to arrive, as after becoming active."""
    table = active_table()
    beat(table, 1, 2000)
    beat(table, 2, 2000, connection_id=7)
    table.stood_still(3600)  # the host stood still from about 2100 to 3600
    assert table.expired(3600) == [] and not table.declared_dead(G, 1, 3600)
    assert not table.is_alive(G, 1, 3600)  # liveness itself stays honest
    beat(table, 1, 3650)  # its next heartbeat, read after the stall
    assert table.on_connection_closed(7) == [(G, 2)]  # a closed connection still counts at once
    assert table.declared_dead(G, 2, 3700)
    assert table.expired(4600) == [] and table.expired(4601) == []  # 1 alive, 2 reported
    assert table.declared_dead(G, 1, 4651) and table.expired(4651) == [(G, 1)]


def test_a_standby_controller_that_stood_still_starts_no_grace() -> None:
    table = BrokerLiveTable(default_timeout_ms=1000)
    table.stood_still(500)
    assert not table.in_grace(600)


def test_expired_reports_what_a_look_at_every_broker_would_in_random_steps() -> None:
    """``expired`` looks at no entry until the earliest deadline of a broker not reported yet
    has passed (the election scan asks ten times a second); it must report exactly what a look
    at every entry reports: each broker past its deadline once, again after a heartbeat revived
    it, all again after becoming active anew. Seeded; the seed is in the failure message."""
    import random

    for seed in range(40):
        rng = random.Random(seed)
        table = BrokerLiveTable(default_timeout_ms=1000)
        deadline: dict[int, int] = {}  # the reference: each broker's deadline
        reported: set[int] = set()
        active, grace_until, now = False, 0, 0
        for step in range(400):
            now += rng.choice((0, 1, 50, 200, 700, 1500))
            op = rng.random()
            if op < 0.5:
                b, timeout = rng.randrange(12), rng.choice((0, 300, 1000, 2500))
                beat(table, b, now, timeout_ms=timeout)
                reported.discard(b)
                info = table.get(G, b)
                assert info is not None
                deadline[b] = info.deadline_ms()
            elif op < 0.6:
                table.became_active(now)
                timeouts = [_timeout_of(table, b) for b in deadline]
                active, grace_until = True, now + max([1000, *timeouts])
                reported.clear()
            elif op < 0.63:
                table.became_standby()
                active = False
            elif op < 0.66 and deadline:
                b = rng.choice(sorted(deadline))
                table.forget(G, frozenset({b}))
                del deadline[b]
                reported.discard(b)
            else:
                want: list[tuple[str, int]] = []
                if active and now >= grace_until:
                    for b in sorted(deadline):
                        if b not in reported and now > deadline[b]:
                            reported.add(b)
                            want.append((G, b))
                assert table.expired(now) == want, f"seed {seed}, step {step}, now {now}"


def _timeout_of(table: BrokerLiveTable, broker_id: int) -> int:
    info = table.get(G, broker_id)
    return 0 if info is None else info.timeout_ms


def test_alive_until_is_the_earliest_deadline_of_the_brokers_alive() -> None:
    table = active_table()
    assert table.alive_until(0) > 10**15  # nobody alive: no deadline
    beat(table, 1, 100, timeout_ms=1000)
    beat(table, 2, 300, timeout_ms=500)
    beat(table, 3, 0, timeout_ms=50)
    assert table.alive_until(100) == 800  # 2's; 3 is not alive at 100
    assert table.alive_until(801) == 1100  # 1's
    table.on_connection_closed(1)
    assert table.alive_until(200) == 800  # 1's connection closed: not alive


def test_changes_moves_on_what_else_than_time_changes_a_judgement() -> None:
    """The election scan keeps its verdicts (who is alive, which master is declared dead)
    while ``changes`` stays and no broker alive then reached ``alive_until``."""
    table = active_table()
    moved = table.changes
    beat(table, 1, 100)  # new
    assert table.changes > moved
    moved = table.changes
    beat(table, 1, 300)  # alive, deadline later: nothing a verdict reads
    beat(table, 1, 400, connection_id=9)  # alive on another connection: still alive
    assert table.changes == moved
    beat(table, 1, 500, timeout_ms=300)  # an earlier deadline (800 < 1400)
    assert table.changes > moved
    moved = table.changes
    beat(table, 1, 900)  # after its deadline (800): revived
    assert table.changes > moved
    moved = table.changes
    table.on_connection_closed(12345)  # nobody's connection
    assert table.changes == moved
    table.on_connection_closed(1)  # the one it heartbeated on last
    assert table.changes > moved
    for step in (
        lambda: beat(table, 1, 1000),  # revived after its connection closed
        lambda: table.forget(G, frozenset({1})),
        lambda: table.became_standby(),
        lambda: table.became_active(2000),
        lambda: table.stood_still(2100),
    ):
        moved = table.changes
        step()
        assert table.changes > moved


def test_judgements_hold_while_changes_stays_until_alive_until_in_random_steps() -> None:
    """What the election scan relies on: at any instant, while ``changes`` stays and up to
    ``alive_until`` of that instant, every broker's ``is_alive`` and ``declared_dead`` read as
    they did then. Seeded; the seed and step are in the failure message."""
    import random

    for seed in range(40):
        rng = random.Random(seed)
        table = BrokerLiveTable(default_timeout_ms=1000)
        now = 0
        ids = range(8)
        kept: tuple[int, int, int, list[tuple[bool, bool]]] | None = None
        for step in range(400):
            now += rng.choice((0, 1, 50, 200, 700, 1500))
            op = rng.random()
            b = rng.choice(ids)
            if op < 0.45:
                beat(table, b, now, timeout_ms=rng.choice((0, 300, 1000, 2500)),
                     connection_id=rng.choice((b, b + 100)))  # fmt: skip
            elif op < 0.5:
                table.on_connection_closed(rng.choice((b, b + 100)))
            elif op < 0.53:
                table.forget(G, frozenset({b}))
            elif op < 0.56:
                table.became_active(now)
            elif op < 0.58:
                table.became_standby()
            elif op < 0.6:
                table.stood_still(now)
            elif op < 0.7:
                table.expired(now)
            verdicts = [(table.is_alive(G, i, now), table.declared_dead(G, i, now)) for i in ids]
            if (
                kept is not None
                and kept[0] == table.changes
                and kept[1] <= now <= kept[2]
                and table.in_grace(now) == table.in_grace(kept[1])
            ):
                assert verdicts == kept[3], f"seed {seed}, step {step}, now {now}"
            if kept is None or rng.random() < 0.2:
                kept = (table.changes, now, table.alive_until(now), verdicts)
