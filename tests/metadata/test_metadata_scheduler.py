"""Which groups the active controller elects for, and the loop scheduler -> elect -> commit."""

from __future__ import annotations

from controller.metadata import (
    BrokerLiveTable,
    ElectRequest,
    ReplicasInfoManager,
    elections_needed,
    held_by_grace,
)
from protocol.codes import ResponseCode as RC
from tests.metadata.support import GROUP, alive_all, commit, group_with_master, register_group

TIMEOUT = 1000


def beat(table: BrokerLiveTable, broker_id: int, now_ms: int, *, name: str = GROUP) -> None:
    table.on_heartbeat(
        cluster="DefaultCluster",
        broker_name=name,
        broker_id=broker_id,
        address=f"h:{broker_id}",
        now_ms=now_ms,
        epoch=0,  # a fresh broker holds no epoch yet
        max_offset=100 + broker_id,
        confirm_offset=100,
        election_priority=0,
        timeout_ms=TIMEOUT,
        connection_id=broker_id,
    )


def active_table() -> BrokerLiveTable:
    """The live table of a controller that became active at 0: in its grace period until
    TIMEOUT."""
    table = BrokerLiveTable(default_timeout_ms=TIMEOUT)
    table.became_active(0)
    return table


def registered(replicas: int) -> ReplicasInfoManager:
    """A group of ``replicas`` registered brokers, never elected."""
    manager = ReplicasInfoManager()
    register_group(manager, replicas)
    return manager


def needed(
    manager: ReplicasInfoManager, table: BrokerLiveTable, now_ms: int, **kwargs: object
) -> list[str]:
    return [
        r.broker_name
        for r in elections_needed(manager.replica_infos(), table, now_ms, **kwargs)  # type: ignore[arg-type]
    ]


def in_sync_group() -> ReplicasInfoManager:
    """broker-a: master 1, SyncStateSet {1, 2}, replica 3 out of sync."""
    manager = group_with_master()
    alter = manager.alter_sync_state_set(GROUP, 1, 1, frozenset({1, 2}), 1, alive_all)
    assert commit(manager, alter).ok
    return manager


def test_a_standby_controller_schedules_nothing() -> None:
    manager = in_sync_group()
    table = BrokerLiveTable(default_timeout_ms=TIMEOUT)
    assert needed(manager, table, 99_000) == []


def test_an_alive_master_needs_no_election() -> None:
    manager = in_sync_group()
    table = active_table()
    for broker_id in (1, 2, 3):
        beat(table, broker_id, 1500)
    assert needed(manager, table, 2000) == []


def test_a_master_that_timed_out_needs_an_election() -> None:
    manager = in_sync_group()
    table = active_table()
    beat(table, 1, 1000)
    beat(table, 2, 2500)
    assert table.expired(2001) == [(GROUP, 1)]
    requests = elections_needed(manager.replica_infos(), table, 2001)
    assert requests == [ElectRequest(broker_name=GROUP, reason="master 1 is inactive")]
    assert needed(manager, table, 2001, in_flight={GROUP}) == []


def test_an_unheard_master_is_not_judged_during_the_grace_period() -> None:
    manager = in_sync_group()
    table = BrokerLiveTable(default_timeout_ms=TIMEOUT)
    table.became_active(10_000)  # a fresh leader: empty table
    beat(table, 2, 10_100)
    assert needed(manager, table, 10_999) == []
    beat(table, 2, 11_000)
    assert needed(manager, table, 11_000) == [GROUP]


def test_a_master_whose_connection_closed_is_elected_away_even_in_grace() -> None:
    manager = in_sync_group()
    table = active_table()
    beat(table, 1, 100)
    beat(table, 2, 100)
    table.on_connection_closed(1)
    assert needed(manager, table, 200) == [GROUP]


def test_a_masterless_group_is_elected_when_a_sync_state_set_member_is_alive() -> None:
    manager = in_sync_group()
    table = active_table()
    beat(table, 3, 1500)  # out of sync only
    assert (
        commit(
            manager, manager.elect_master(GROUP, alive_replicas=table.election_view(GROUP, 1500))
        ).code
        == RC.CONTROLLER_MASTER_NOT_AVAILABLE
    )
    assert needed(manager, table, 1500) == []
    assert needed(manager, table, 1500, enable_elect_unclean_master=True) == [GROUP]
    beat(table, 2, 1600)
    assert needed(manager, table, 1600) == [GROUP]


def test_a_masterless_group_waits_for_the_grace_period() -> None:
    manager = registered(2)
    table = active_table()
    beat(table, 1, 10)
    assert needed(manager, table, 999) == []
    beat(table, 1, 1000)
    assert needed(manager, table, 1000) == [GROUP]  # never elected: any alive replica


def test_a_group_with_nobody_alive_and_no_master_needs_nothing() -> None:
    manager = registered(2)
    table = active_table()
    assert needed(manager, table, 5000) == []


def test_the_driver_loop_converges() -> None:
    """Scheduler -> elect_master -> commit, as the driver runs it, until nothing is needed."""
    manager = registered(3)
    register_group(manager, 2, name="broker-b")
    table = active_table()

    def run(now_ms: int) -> list[str]:
        elected = []
        for request in elections_needed(manager.replica_infos(), table, now_ms):
            view = table.election_view(request.broker_name, now_ms)
            reply = commit(manager, manager.elect_master(request.broker_name, alive_replicas=view))
            elected.append(f"{request.broker_name}:{reply.code.name}")
        return elected

    for broker_id in (1, 2, 3):
        beat(table, broker_id, 1000)
    beat(table, 2, 1000, name="broker-b")
    assert run(1000) == ["broker-a:SUCCESS", "broker-b:SUCCESS"]
    info = manager.replica_info(GROUP)
    assert info is not None and info.master_broker_id == 3  # highest max offset
    assert run(1000) == []
    # broker-a's master goes silent; the rest keep beating.
    for broker_id in (1, 2):
        beat(table, broker_id, 1900)
    beat(table, 2, 1900, name="broker-b")
    assert table.expired(2001) == [(GROUP, 3)]
    # Only 3 was in the SyncStateSet: no candidate, the master is cleared.
    assert run(2001) == ["broker-a:CONTROLLER_MASTER_NOT_AVAILABLE"]
    info = manager.replica_info(GROUP)
    assert info is not None and info.master_broker_id is None and info.master_epoch == 2
    assert run(2001) == []
    # 3 comes back and is elected again, at a new epoch.
    beat(table, 3, 2500)
    assert run(2500) == ["broker-a:SUCCESS"]
    info = manager.replica_info(GROUP)
    assert info is not None and info.master_broker_id == 3 and info.master_epoch == 3


# A group without a master during the grace period: elected at once when every candidate is
# known alive, else after the grace period.


def masterless_in_sync_group() -> ReplicasInfoManager:
    """broker-a after its master 1 was lost with nobody to replace it: no master, epoch 2,
    SyncStateSet {1, 2} kept, replica 3 out of sync."""
    manager = in_sync_group()
    cleared = commit(manager, manager.elect_master(GROUP, alive_replicas={}))
    assert cleared.code == RC.CONTROLLER_MASTER_NOT_AVAILABLE
    info = manager.replica_info(GROUP)
    assert info is not None and info.master_broker_id is None and info.master_epoch == 2
    assert info.sync_state_set == frozenset({1, 2})
    return manager


def test_a_first_election_is_held_in_the_grace_period_once_every_replica_is_alive() -> None:
    manager = registered(3)
    table = active_table()
    beat(table, 1, 10)
    beat(table, 2, 20)
    assert table.in_grace(20)
    assert needed(manager, table, 20) == []  # replica 3 has not heartbeated to us yet
    beat(table, 3, 30)
    assert needed(manager, table, 30) == [GROUP]  # nothing left to wait for


def test_a_first_election_waits_out_the_grace_period_for_a_replica_never_heard() -> None:
    manager = registered(3)
    table = active_table()
    for now in (10, 500, 999):
        beat(table, 1, now)
        beat(table, 2, now)
        assert needed(manager, table, now) == []
    beat(table, 1, 1000)
    beat(table, 2, 1000)
    assert needed(manager, table, 1000) == [GROUP]  # grace over: among the alive ones


def test_a_replica_whose_connection_closed_is_waited_for_in_the_grace_period() -> None:
    manager = registered(2)
    table = active_table()
    beat(table, 1, 10)
    beat(table, 2, 10)
    table.on_connection_closed(2)
    assert needed(manager, table, 20) == []
    beat(table, 2, 30)  # it came back
    assert needed(manager, table, 30) == [GROUP]


def test_a_sole_registered_replica_is_elected_in_the_grace_period() -> None:
    """At a group's first start the candidates are the replicas registered so far (RocketMQ's
    behaviour too): one registered later is no candidate, in the grace period or after it."""
    manager = registered(1)
    table = active_table()
    beat(table, 1, 10)
    assert needed(manager, table, 10) == [GROUP]


def test_a_masterless_group_is_elected_in_the_grace_period_when_its_sync_state_set_is_alive() -> (
    None
):
    manager = masterless_in_sync_group()
    table = BrokerLiveTable(default_timeout_ms=TIMEOUT)
    table.became_active(10_000)
    beat(table, 2, 10_010)
    beat(table, 3, 10_010)  # out of sync: no candidate, and no reason to wait either
    assert needed(manager, table, 10_010) == []  # 1 may be the best: not heard yet
    assert needed(manager, table, 10_010, enable_elect_unclean_master=True) == []
    beat(table, 1, 10_020)
    assert needed(manager, table, 10_020) == [GROUP]
    assert needed(manager, table, 10_020, enable_elect_unclean_master=True) == [GROUP]


def test_an_unclean_election_in_the_grace_period_waits_for_the_sync_state_set() -> None:
    """With unclean elections on, an alive out-of-sync replica is a candidate only while no
    SyncStateSet member is alive; one not heard yet may still be, so the grace period is
    waited out before electing the out-of-sync replica."""
    manager = masterless_in_sync_group()
    table = active_table()
    beat(table, 3, 10)
    assert needed(manager, table, 999, enable_elect_unclean_master=True) == []
    beat(table, 3, 1000)
    assert needed(manager, table, 1000, enable_elect_unclean_master=True) == [GROUP]


def test_a_controller_that_stood_still_elects_a_group_whose_candidates_are_all_alive() -> None:
    manager = registered(2)
    register_group(manager, 2, name="broker-b")
    table = active_table()
    beat(table, 1, 5000)
    beat(table, 2, 5000)
    beat(table, 1, 5000, name="broker-b")
    table.stood_still(5000)
    assert table.in_grace(5100)
    assert needed(manager, table, 5100) == [GROUP]  # broker-b's replica 2 not heard: it waits


def test_the_grace_period_still_protects_a_master_that_was_not_heard_yet() -> None:
    """A group whose master is set is unaffected: all its other replicas alive do not make the
    controller judge the master by silence during the grace period."""
    manager = in_sync_group()
    table = active_table()
    beat(table, 2, 10)
    beat(table, 3, 10)
    assert needed(manager, table, 999) == []
    assert needed(manager, table, 999, enable_elect_unclean_master=True) == []


def held_code(manager: ReplicasInfoManager, table: BrokerLiveTable, now_ms: int) -> RC | None:
    info = manager.replica_info(GROUP)
    assert info is not None
    held = held_by_grace(info, table, now_ms)
    if held is None:
        return None
    assert held.response == info and not held.events  # the group as it is, nothing appended
    return held.code


def test_an_election_asked_for_in_the_grace_period_waits_like_the_scans() -> None:
    """CONTROLLER_ELECT_MASTER naming no broker: held while the master was not heard (it may be
    alive) or, without a master, while a candidate was not; free once heard, or dead by a
    closed connection, or after the grace period."""
    manager = in_sync_group()
    table = active_table()
    beat(table, 2, 10)
    assert held_code(manager, table, 10) == RC.CONTROLLER_MASTER_STILL_EXIST
    beat(table, 1, 20)
    assert held_code(manager, table, 20) is None  # alive: the policy keeps it
    table.became_active(2000)  # a new leadership: 1 not heard since (its entry is stale)
    beat(table, 2, 2010)
    assert held_code(manager, table, 2010) == RC.CONTROLLER_MASTER_STILL_EXIST
    beat(table, 2, 3000)
    assert held_code(manager, table, 3000) is None  # the grace period is over
    table.became_active(4000)
    beat(table, 1, 4010)
    table.on_connection_closed(1)
    assert held_code(manager, table, 4020) is None  # dead at once

    masterless = masterless_in_sync_group()
    table = active_table()
    beat(table, 2, 10)
    assert held_code(masterless, table, 10) == RC.CONTROLLER_MASTER_NOT_AVAILABLE
    beat(table, 1, 20)
    assert held_code(masterless, table, 20) is None


def test_a_standby_controller_holds_nothing_it_would_not_answer() -> None:
    manager = in_sync_group()
    table = BrokerLiveTable(default_timeout_ms=TIMEOUT)
    assert held_code(manager, table, 10) is None  # not active: the leadership gate refuses
