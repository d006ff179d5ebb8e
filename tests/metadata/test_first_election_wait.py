"""A group's first election waits for its replicas when they report a history.

After a whole group's metadata was cleaned (or the controllers' data was lost) its replicas come
back holding data, and the group's next election is a first election again. It elected the
first replica to register, whatever it held; a replica with less than the others then became
master and their acknowledged messages were not served. Now such a first election waits
``first_election_wait_ms`` from when the first of the alive replicas became alive, and the
policy ranks the ones heard by then (epoch, then max offset). A group's real first start, whose
replicas hold nothing, is elected at once.
"""

from __future__ import annotations

from controller.metadata import BrokerLiveTable, ReplicasInfoManager, elections_needed
from controller.metadata.scheduler import first_election_held_until, held_by_grace
from protocol.codes import ResponseCode as RC
from tests.metadata.support import GROUP, commit, register_group
from tests.metadata.test_metadata_heartbeat import beat

TIMEOUT = 1000
WAIT = 5000


def setup() -> tuple[ReplicasInfoManager, BrokerLiveTable]:
    manager = ReplicasInfoManager()
    register_group(manager, 3)
    table = BrokerLiveTable(default_timeout_ms=TIMEOUT)
    table.became_active(-10 * TIMEOUT)  # long past its grace period
    return manager, table


def needed(manager: ReplicasInfoManager, table: BrokerLiveTable, now: int) -> bool:
    infos = manager.replica_infos()
    return bool(elections_needed(infos, table, now, first_election_wait_ms=WAIT))


def test_replicas_with_a_history_wait_and_the_one_holding_most_is_elected() -> None:
    manager, table = setup()
    (info,) = manager.replica_infos()
    # Replica 1 comes back first, holding less than replica 3 (a later epoch, more data).
    for t in range(0, 3000, 500):
        beat(table, 1, t, epoch=2, max_offset=5_000)
    assert not needed(manager, table, 2500)
    assert first_election_held_until(info, table, 2500, WAIT) == WAIT
    held = held_by_grace(info, table, 2500, first_election_wait_ms=WAIT)
    assert held is not None and held.code == RC.CONTROLLER_MASTER_NOT_AVAILABLE
    assert "waits 2500 ms more" in held.remark
    for t in range(3000, WAIT + 500, 500):
        beat(table, 1, t, epoch=2, max_offset=5_000)
        beat(table, 3, t, epoch=3, max_offset=9_000)
        beat(table, 2, t, epoch=2, max_offset=4_000)
    assert not needed(manager, table, WAIT - 1)
    assert needed(manager, table, WAIT)
    assert held_by_grace(info, table, WAIT, first_election_wait_ms=WAIT) is None
    elected = commit(
        manager, manager.elect_master(GROUP, alive_replicas=table.election_view(GROUP, WAIT))
    )
    assert elected.ok and elected.response is not None
    assert elected.response.master_broker_id == 3


def test_a_groups_first_start_is_elected_at_once() -> None:
    manager, table = setup()
    beat(table, 1, 0, epoch=0, max_offset=0)
    (info,) = manager.replica_infos()
    assert needed(manager, table, 0)
    assert first_election_held_until(info, table, 0, WAIT) is None


def test_no_wait_configured_elects_at_once() -> None:
    manager, table = setup()
    beat(table, 1, 0, epoch=2, max_offset=5_000)
    infos = manager.replica_infos()
    assert elections_needed(infos, table, 0, first_election_wait_ms=0)


def test_the_wait_counts_from_the_first_replica_alive_now() -> None:
    """A replica heard long ago that timed out does not shorten the wait of the ones back now."""
    manager, table = setup()
    beat(table, 1, 0, epoch=2, max_offset=5_000)
    (info,) = manager.replica_infos()
    start = 10 * TIMEOUT  # replica 1 timed out meanwhile; replica 2 is the first alive now
    beat(table, 2, start, epoch=2, max_offset=4_000)
    assert first_election_held_until(info, table, start, WAIT) == start + WAIT
    beat(table, 1, start + 100, epoch=2, max_offset=5_000)  # back: alive since now
    assert first_election_held_until(info, table, start + 100, WAIT) == start + WAIT


def test_a_group_with_a_master_epoch_is_not_held() -> None:
    manager, table = setup()
    beat(table, 1, 0, epoch=0, max_offset=0)
    elected = commit(
        manager, manager.elect_master(GROUP, alive_replicas=table.election_view(GROUP, 0))
    )
    assert elected.ok
    (info,) = manager.replica_infos()
    assert first_election_held_until(info, table, 0, WAIT) is None
