"""CleanBrokerData (2009 when invalid) and the read requests GetReplicaInfo / GetSyncStateData."""

from __future__ import annotations

from controller.metadata import CleanBrokerData, ReplicasInfoManager
from protocol.codes import ResponseCode as RC
from tests.metadata.support import (
    CLUSTER,
    GROUP,
    alive_all,
    alive_none,
    alive_only,
    commit,
    elect,
    group_with_master,
    register_group,
)

INVALID = RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA


def test_cleaning_an_unknown_group_is_invalid() -> None:
    manager = ReplicasInfoManager()
    assert manager.clean_broker_data(CLUSTER, GROUP, None, alive=alive_none).code == INVALID


def test_cleaning_a_group_that_still_has_a_master_is_invalid() -> None:
    manager = group_with_master()
    decision = manager.clean_broker_data(CLUSTER, GROUP, None, alive=alive_none)
    assert decision.code == INVALID and decision.events == ()


def test_cleaning_a_group_with_an_alive_broker_is_invalid() -> None:
    manager = ReplicasInfoManager()
    register_group(manager, 2)
    assert manager.clean_broker_data(CLUSTER, GROUP, None, alive=alive_only(2)).code == INVALID


def test_cleaning_an_alive_broker_is_invalid() -> None:
    manager = group_with_master()
    assert manager.clean_broker_data(CLUSTER, GROUP, {2, 3}, alive=alive_only(3)).code == INVALID


def test_cleaning_an_unregistered_id_or_another_cluster_is_invalid() -> None:
    manager = group_with_master()
    assert manager.clean_broker_data(CLUSTER, GROUP, {7}, alive=alive_none).code == INVALID
    assert manager.clean_broker_data("Other", GROUP, {3}, alive=alive_none).code == INVALID
    assert manager.clean_broker_data(CLUSTER, GROUP, {0}, alive=alive_none).code == INVALID


def test_cleaning_a_dead_group_forgets_it_and_ids_restart_at_one() -> None:
    manager = ReplicasInfoManager()
    register_group(manager, 3)
    reply = commit(manager, manager.clean_broker_data(CLUSTER, GROUP, None, alive=alive_none))
    assert reply.code == RC.SUCCESS
    assert manager.broker_names() == []
    assert manager.get_replica_info(GROUP).code == RC.CONTROLLER_BROKER_METADATA_NOT_EXIST
    next_id = manager.get_next_broker_id(CLUSTER, GROUP).response
    assert next_id is not None and next_id.next_broker_id == 1


def test_an_empty_id_set_means_the_whole_group() -> None:
    manager = ReplicasInfoManager()
    register_group(manager, 1)
    decision = manager.clean_broker_data(None, GROUP, set(), alive=alive_none)
    assert decision.events == (CleanBrokerData(broker_name=GROUP, broker_ids=None),)


def test_cleaning_dead_brokers_removes_them_from_the_sync_state_set() -> None:
    manager = group_with_master()
    alter = manager.alter_sync_state_set(GROUP, 1, 1, frozenset({1, 2, 3}), 1, alive_all)
    assert commit(manager, alter).code == RC.SUCCESS
    reply = commit(manager, manager.clean_broker_data(CLUSTER, GROUP, {3}, alive=alive_only(1, 2)))
    assert reply.code == RC.SUCCESS
    info = manager.replica_info(GROUP)
    assert info is not None
    assert [r.broker_id for r in info.replicas] == [1, 2]
    assert info.sync_state_set == frozenset({1, 2}) and info.sync_state_set_epoch == 3
    assert info.master_broker_id == 1 and info.master_epoch == 1
    # nextAssignBrokerId does not go back: a cleaned id is never handed out again.
    next_id = manager.get_next_broker_id(CLUSTER, GROUP).response
    assert next_id is not None and next_id.next_broker_id == 4


def test_cleaning_the_dead_master_clears_it_and_bumps_the_master_epoch() -> None:
    manager = group_with_master()
    reply = commit(manager, manager.clean_broker_data(CLUSTER, GROUP, {1}, alive=alive_only(2, 3)))
    assert reply.code == RC.SUCCESS
    info = manager.replica_info(GROUP)
    assert info is not None
    assert info.master_broker_id is None and info.master_epoch == 2
    assert info.sync_state_set == frozenset() and info.sync_state_set_epoch == 2
    assert manager.invariant_violations() == []


def test_cleaning_every_broker_by_id_forgets_the_group() -> None:
    manager = ReplicasInfoManager()
    register_group(manager, 2)
    assert commit(manager, manager.clean_broker_data(CLUSTER, GROUP, {1, 2}, alive=alive_none)).ok
    assert manager.broker_names() == []


def test_clean_living_broker_never_cleans_a_living_broker() -> None:
    manager = group_with_master()
    for ids in (None, {1}, {2}):
        decision = manager.clean_broker_data(
            CLUSTER, GROUP, ids, alive=alive_only(1, 2), clean_living_broker=True
        )
        assert decision.code == INVALID and not decision.events
        assert "still alive" in decision.remark
    assert manager.broker_names() == [GROUP]


def test_clean_living_broker_forgets_a_dead_group_that_still_names_its_master() -> None:
    manager = group_with_master()
    refused = manager.clean_broker_data(CLUSTER, GROUP, None, alive=alive_none)
    assert refused.code == INVALID and "still has master" in refused.remark
    decision = manager.clean_broker_data(
        CLUSTER, GROUP, None, alive=alive_none, clean_living_broker=True
    )
    assert commit(manager, decision).code == RC.SUCCESS
    assert manager.broker_names() == []


def test_a_clean_event_for_an_unknown_group_is_rejected_on_apply() -> None:
    manager = ReplicasInfoManager()
    assert manager.apply(CleanBrokerData(broker_name=GROUP)).code == INVALID


# Reads ------------------------------------------------------------------------------------------


def test_get_replica_info_of_an_unknown_group_is_2008() -> None:
    manager = ReplicasInfoManager()
    assert manager.get_replica_info(GROUP).code == RC.CONTROLLER_BROKER_METADATA_NOT_EXIST


def test_get_replica_info_describes_the_group() -> None:
    manager = group_with_master(master=2)
    decision = manager.get_replica_info(GROUP)
    assert decision.ok and decision.events == ()
    info = decision.response
    assert info is not None
    assert (info.cluster, info.broker_name) == (CLUSTER, GROUP)
    assert (info.master_broker_id, info.master_address) == (2, "127.0.0.1:10920")
    assert (info.master_epoch, info.sync_state_set_epoch) == (1, 1)
    assert [(r.broker_id, r.in_sync) for r in info.replicas] == [(1, False), (2, True), (3, False)]


def test_get_sync_state_data_answers_the_known_groups_only() -> None:
    manager = group_with_master()
    register_group(manager, 2, name="broker-b")
    assert elect(manager, [2], name="broker-b").ok
    decision = manager.get_sync_state_data(["broker-b", "nope", GROUP, GROUP])
    assert decision.ok and decision.response is not None
    assert sorted(decision.response) == [GROUP, "broker-b"]
    assert decision.response["broker-b"].master_broker_id == 2
    assert manager.broker_names() == [GROUP, "broker-b"]
    assert [i.broker_name for i in manager.replica_infos()] == [GROUP, "broker-b"]
