"""The hard-state rules of the metadata state machine, shared by validation and apply.

Each ``check_*`` looks only at replicated state and the request or event, never at liveness, and
returns an :class:`~controller.metadata.results.Applied`: SUCCESS or the code and reason of the
first broken rule. Validation on the active controller runs them (plus the liveness rules) to
decide; apply on every controller runs them again so an event whose premise changed before it
committed is rejected identically everywhere. Each ``mutate_*`` is the effect of one event on
one group, used by apply and to project a decision's response.
"""

from __future__ import annotations

from collections.abc import Callable, Set

from controller.metadata.events import FIRST_BROKER_ID, ApplyBrokerId, ElectMaster
from controller.metadata.group import BrokerGroup
from controller.metadata.results import APPLIED, Applied
from protocol.codes import ResponseCode as RC

AlivePredicate = Callable[[str, int], bool]
"""``alive(broker_name, broker_id)``: whether the broker is alive now (soft state)."""


def fail(code: RC, remark: str) -> Applied:
    return Applied(code=code, remark=remark)


# Hard-state checks, shared by request validation and apply --------------------------------------


def check_apply_broker_id(group: BrokerGroup | None, ev: ApplyBrokerId) -> Applied:
    if group is None:
        if ev.broker_id != FIRST_BROKER_ID:
            return fail(
                RC.CONTROLLER_BROKER_ID_INVALID,
                f"broker set {ev.broker_name} is not registered: its first broker id is "
                f"{FIRST_BROKER_ID}, not {ev.broker_id}",
            )
        return APPLIED
    if group.cluster != ev.cluster:
        return fail(
            RC.CONTROLLER_INVALID_REQUEST,
            f"broker set {ev.broker_name} belongs to cluster {group.cluster}, not {ev.cluster}",
        )
    record = group.brokers.get(ev.broker_id)
    if record is not None:
        if record.register_code != ev.register_code:
            return fail(
                RC.CONTROLLER_BROKER_ID_INVALID,
                f"broker id {ev.broker_id} of {ev.broker_name} belongs to another broker",
            )
        return APPLIED
    if ev.broker_id != group.next_assign_broker_id:
        return fail(
            RC.CONTROLLER_BROKER_ID_INVALID,
            f"broker id {ev.broker_id} of {ev.broker_name} is not the next id to assign "
            f"({group.next_assign_broker_id})",
        )
    return APPLIED


def check_registered(group: BrokerGroup | None, broker_name: str, broker_id: int) -> Applied:
    if group is None:
        return fail(
            RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
            f"broker set {broker_name} has not been registered",
        )
    if broker_id not in group.brokers:
        return fail(
            RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
            f"broker id {broker_id} has not been registered in broker set {broker_name}",
        )
    return APPLIED


def check_alter(
    group: BrokerGroup,
    master_broker_id: int,
    master_epoch: int,
    sync_state_set_epoch: int,
    new_set: Set[int],
    alive: AlivePredicate | None,
) -> Applied:
    """RocketMQ's order of checks, from the master check on; ``alive`` None skips liveness."""
    if group.master_broker_id != master_broker_id:
        return fail(
            RC.CONTROLLER_INVALID_MASTER,
            f"the master of {group.broker_name} is {group.master_broker_id}, "
            f"not {master_broker_id}",
        )
    if master_epoch != group.master_epoch:
        return fail(
            RC.CONTROLLER_FENCED_MASTER_EPOCH,
            f"the master epoch of {group.broker_name} is {group.master_epoch}, not {master_epoch}",
        )
    if sync_state_set_epoch != group.sync_state_set_epoch:
        return fail(
            RC.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
            f"the SyncStateSet epoch of {group.broker_name} is {group.sync_state_set_epoch}, "
            f"not {sync_state_set_epoch}",
        )
    for broker_id in sorted(new_set):
        if broker_id not in group.brokers:
            return fail(
                RC.CONTROLLER_INVALID_REPLICAS,
                f"replica {broker_id} of {group.broker_name} is not registered",
            )
        if alive is not None and not alive(group.broker_name, broker_id):
            return fail(
                RC.CONTROLLER_BROKER_NOT_ALIVE,
                f"replica {broker_id} of {group.broker_name} is not alive",
            )
    if master_broker_id not in new_set:
        return fail(
            RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
            f"the new SyncStateSet does not contain the master {master_broker_id}",
        )
    return APPLIED


def check_elect(group: BrokerGroup | None, ev: ElectMaster) -> Applied:
    if group is None:
        return fail(
            RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
            f"broker set {ev.broker_name} has not been registered",
        )
    if ev.master_epoch != group.master_epoch:
        return fail(
            RC.CONTROLLER_FENCED_MASTER_EPOCH,
            f"the master epoch of {group.broker_name} moved to {group.master_epoch} "
            f"since the election at {ev.master_epoch}",
        )
    if ev.sync_state_set_epoch != group.sync_state_set_epoch:
        return fail(
            RC.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
            f"the SyncStateSet epoch of {group.broker_name} moved to "
            f"{group.sync_state_set_epoch} since the election at {ev.sync_state_set_epoch}",
        )
    if ev.new_master_broker_id is not None and ev.new_master_broker_id not in group.brokers:
        return fail(
            RC.CONTROLLER_INVALID_REPLICAS,
            f"elected broker {ev.new_master_broker_id} of {group.broker_name} is not registered",
        )
    return APPLIED


# Mutations of one group (used by apply and to project a decision's response) -------------------


def mutate_elect(group: BrokerGroup, new_master: int | None, new_epoch: int) -> None:
    group.master_broker_id = new_master
    group.master_epoch = new_epoch
    if new_master is not None:
        group.sync_state_set = frozenset((new_master,))
        group.sync_state_set_epoch += 1


def mutate_alter(group: BrokerGroup, new_set: frozenset[int]) -> None:
    group.sync_state_set = new_set
    group.sync_state_set_epoch += 1


def mutate_address(group: BrokerGroup, broker_id: int, address: str) -> None:
    group.brokers[broker_id].address = address
