"""AlterSyncStateSet: RocketMQ's checks in RocketMQ's order, and fencing by the two epochs."""

from __future__ import annotations

from collections.abc import Callable, Set

import pytest

from controller.metadata import AlterSyncStateSet, Applied, Decision, ReplicasInfoManager
from protocol.codes import ResponseCode as RC
from tests.metadata.support import (
    GROUP,
    alive_all,
    alive_only,
    commit,
    elect,
    group_with_master,
)


def alter(
    manager: ReplicasInfoManager,
    new_set: Set[int],
    *,
    master: int = 1,
    master_epoch: int = 1,
    sync_state_set_epoch: int = 1,
    alive: Callable[[str, int], bool] = alive_all,
    name: str = GROUP,
) -> Decision[object]:
    decision = manager.alter_sync_state_set(
        name, master, master_epoch, frozenset(new_set), sync_state_set_epoch, alive
    )
    return commit(manager, decision)


def test_the_master_expands_the_sync_state_set() -> None:
    manager = group_with_master()
    reply = manager.alter_sync_state_set(GROUP, 1, 1, frozenset({1, 2}), 1, alive_all)
    assert reply.events == (
        AlterSyncStateSet(
            broker_name=GROUP,
            master_broker_id=1,
            master_epoch=1,
            sync_state_set_epoch=1,
            new_sync_state_set=frozenset({1, 2}),
        ),
    )
    settled = commit(manager, reply)
    assert settled.code == RC.SUCCESS
    assert settled.response is not None
    assert settled.response.sync_state_set == frozenset({1, 2})
    assert settled.response.sync_state_set_epoch == 2
    info = manager.replica_info(GROUP)
    assert info is not None
    assert info.sync_state_set == frozenset({1, 2}) and info.sync_state_set_epoch == 2
    assert info.master_epoch == 1
    assert [r.in_sync for r in info.replicas] == [True, True, False]
    # ... and shrinks it again with the new epoch.
    assert alter(manager, {1}, sync_state_set_epoch=2).code == RC.SUCCESS


def test_an_unknown_group_fails_2013() -> None:
    manager = group_with_master()
    assert alter(manager, {1, 2}, name="nope").code == RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED


def test_an_unchanged_set_from_the_master_is_accepted_at_the_current_epoch() -> None:
    manager = group_with_master()
    decision = manager.alter_sync_state_set(GROUP, 1, 1, frozenset({1}), 1, alive_all)
    assert decision.ok and not decision.events  # nothing to append
    assert decision.response is not None
    assert decision.response.sync_state_set_epoch == 1


def test_a_resent_expansion_whose_answer_was_lost_is_accepted_not_failed() -> None:
    """RocketMQ #5663 family: the first attempt committed, its answer was lost; the master sends
    the same proposal from the same base epoch and must learn it was accepted."""
    manager = group_with_master()
    assert alter(manager, {1, 2}).code == RC.SUCCESS  # committed; the answer is lost
    again = alter(manager, {1, 2})  # same base epoch 1
    assert again.code == RC.SUCCESS
    assert again.response is not None
    assert again.response.sync_state_set == {1, 2}
    assert again.response.sync_state_set_epoch == 2
    info = manager.replica_info(GROUP)
    assert info is not None and info.sync_state_set_epoch == 2  # nothing appended twice


def test_an_unchanged_set_from_a_deposed_master_is_still_fenced() -> None:
    manager = group_with_master()
    assert alter(manager, {1}, master=2).code == RC.CONTROLLER_INVALID_MASTER
    assert alter(manager, {1}, master_epoch=0).code == RC.CONTROLLER_FENCED_MASTER_EPOCH
    # A base epoch past the current one is not "the same set": it is fenced as usual.
    assert alter(manager, {1}, sync_state_set_epoch=5).code == (
        RC.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH
    )


def test_a_request_not_from_the_master_fails_2002() -> None:
    manager = group_with_master()
    assert alter(manager, {1, 2}, master=2).code == RC.CONTROLLER_INVALID_MASTER


def test_a_stale_master_epoch_is_fenced_2000() -> None:
    manager = group_with_master()
    assert alter(manager, {1, 2}, master_epoch=0).code == RC.CONTROLLER_FENCED_MASTER_EPOCH
    assert alter(manager, {1, 2}, master_epoch=2).code == RC.CONTROLLER_FENCED_MASTER_EPOCH


def test_a_stale_sync_state_set_epoch_is_fenced_2001() -> None:
    manager = group_with_master()
    assert alter(manager, {1, 2}, sync_state_set_epoch=0).code == (
        RC.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH
    )


def test_an_unregistered_member_fails_2003() -> None:
    manager = group_with_master()
    assert alter(manager, {1, 9}).code == RC.CONTROLLER_INVALID_REPLICAS


def test_a_member_not_alive_fails_2006() -> None:
    manager = group_with_master()
    assert alter(manager, {1, 2, 3}, alive=alive_only(1, 2)).code == RC.CONTROLLER_BROKER_NOT_ALIVE


def test_a_set_without_the_master_fails_2013() -> None:
    manager = group_with_master()
    reply = alter(manager, {2, 3})
    assert reply.code == RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED
    assert "master" in reply.remark
    assert alter(manager, set()).code == RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        # Checks run in RocketMQ's order: master, master epoch, SyncStateSet epoch, members.
        ({"master": 2, "master_epoch": 0}, RC.CONTROLLER_INVALID_MASTER),
        ({"master_epoch": 0, "sync_state_set_epoch": 0}, RC.CONTROLLER_FENCED_MASTER_EPOCH),
        (
            {"sync_state_set_epoch": 0, "alive": alive_only(1)},
            RC.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
        ),
    ],
)
def test_checks_run_in_rocketmq_order(kwargs: dict[str, object], code: RC) -> None:
    manager = group_with_master()
    assert alter(manager, {1, 2, 9}, **kwargs).code == code  # type: ignore[arg-type]


def test_an_old_master_is_fenced_after_a_new_election() -> None:
    manager = group_with_master()
    assert alter(manager, {1, 2}).code == RC.SUCCESS
    assert elect(manager, [2]).code == RC.SUCCESS  # 1 died; 2 is master at epoch 2
    assert alter(manager, {1, 2}, master=1, master_epoch=1, sync_state_set_epoch=2).code == (
        RC.CONTROLLER_INVALID_MASTER
    )
    assert alter(manager, {2, 3}, master=2, master_epoch=1, sync_state_set_epoch=3).code == (
        RC.CONTROLLER_FENCED_MASTER_EPOCH
    )
    assert alter(manager, {2, 3}, master=2, master_epoch=2, sync_state_set_epoch=3).code == (
        RC.SUCCESS
    )


def test_with_no_master_every_alter_is_an_invalid_master() -> None:
    manager = group_with_master()
    assert elect(manager, []).code == RC.CONTROLLER_MASTER_NOT_AVAILABLE
    assert alter(manager, {1, 2}, master_epoch=2).code == RC.CONTROLLER_INVALID_MASTER


def test_two_alters_decided_on_the_same_state_only_the_first_applies() -> None:
    manager = group_with_master()
    first = manager.alter_sync_state_set(GROUP, 1, 1, frozenset({1, 2}), 1, alive_all)
    second = manager.alter_sync_state_set(GROUP, 1, 1, frozenset({1, 3}), 1, alive_all)
    assert commit(manager, first).code == RC.SUCCESS
    lost = commit(manager, second)
    assert lost.code == RC.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH
    info = manager.replica_info(GROUP)
    assert info is not None and info.sync_state_set == frozenset({1, 2})


def test_an_alter_whose_new_member_was_cleaned_before_commit_is_rejected_2003() -> None:
    manager = group_with_master()
    decision = manager.alter_sync_state_set(GROUP, 1, 1, frozenset({1, 3}), 1, alive_all)
    clean = manager.clean_broker_data(None, GROUP, {3}, alive=alive_only(1, 2))
    assert commit(manager, clean).code == RC.SUCCESS
    assert commit(manager, decision).code == RC.CONTROLLER_INVALID_REPLICAS


def test_apply_rechecks_the_hard_rules() -> None:
    manager = group_with_master()
    missing = AlterSyncStateSet(
        broker_name="nope",
        master_broker_id=1,
        master_epoch=1,
        sync_state_set_epoch=1,
        new_sync_state_set=frozenset({1}),
    )
    assert manager.apply(missing).code == RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED
    without_master = AlterSyncStateSet(
        broker_name=GROUP,
        master_broker_id=1,
        master_epoch=1,
        sync_state_set_epoch=1,
        new_sync_state_set=frozenset({2}),
    )
    before = manager.snapshot()
    assert manager.apply(without_master).code == RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED
    assert manager.snapshot() == before


def test_settle_needs_one_outcome_per_event() -> None:
    manager = group_with_master()
    decision = manager.alter_sync_state_set(GROUP, 1, 1, frozenset({1, 2}), 1, alive_all)
    with pytest.raises(ValueError):
        decision.settle([])
    assert decision.settle([Applied()]).events == ()


def test_malformed_alter_requests_are_invalid_requests() -> None:
    manager = group_with_master()
    assert manager.alter_sync_state_set(GROUP, 0, 1, frozenset({1}), 1, alive_all).code == (
        RC.CONTROLLER_INVALID_REQUEST
    )
    assert manager.alter_sync_state_set(GROUP, 1, -1, frozenset({1}), 1, alive_all).code == (
        RC.CONTROLLER_INVALID_REQUEST
    )
    bad_member = frozenset({1, "2"})
    assert manager.alter_sync_state_set(GROUP, 1, 1, bad_member, 1, alive_all).code == (  # type: ignore[arg-type]
        RC.CONTROLLER_INVALID_REQUEST
    )
