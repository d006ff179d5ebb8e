"""Persistent BrokerId (RocketMQ 5.1.1): GetNextBrokerId, ApplyBrokerId as a compare-and-set on
the register code, RegisterBrokerToController, and recovery from a crash between any two steps."""

from __future__ import annotations

from controller.metadata import ApplyBrokerId, ReplicasInfoManager, UpdateBrokerAddress
from protocol.codes import ResponseCode as RC
from tests.metadata.support import CLUSTER, GROUP, address, commit, info, register_group


def next_id(manager: ReplicasInfoManager, name: str = GROUP) -> int:
    response = manager.get_next_broker_id(CLUSTER, name).response
    assert response is not None
    return response.next_broker_id


def apply_id(manager: ReplicasInfoManager, broker_id: int, code: str) -> RC:
    return commit(manager, manager.apply_broker_id(CLUSTER, GROUP, broker_id, code)).code


def test_a_new_group_starts_at_broker_id_one() -> None:
    manager = ReplicasInfoManager()
    assert next_id(manager) == 1
    decision = manager.apply_broker_id(CLUSTER, GROUP, 1, "code-a", "10.0.0.1:10911")
    assert decision.ok
    assert decision.events == (
        ApplyBrokerId(
            cluster=CLUSTER,
            broker_name=GROUP,
            broker_id=1,
            register_code="code-a",
            address="10.0.0.1:10911",
        ),
    )
    assert commit(manager, decision).code == RC.SUCCESS
    assert next_id(manager) == 2
    info = manager.replica_info(GROUP)
    assert info is not None
    assert info.cluster == CLUSTER
    assert info.master_broker_id is None and info.master_epoch == 0
    assert [(r.broker_id, r.address) for r in info.replicas] == [(1, "10.0.0.1:10911")]


def test_a_new_group_refuses_any_first_id_but_one() -> None:
    manager = ReplicasInfoManager()
    decision = manager.apply_broker_id(CLUSTER, GROUP, 2, "code-a")
    assert decision.code == RC.CONTROLLER_BROKER_ID_INVALID
    assert decision.events == ()
    assert manager.broker_names() == []


def test_ids_are_assigned_in_order() -> None:
    manager = ReplicasInfoManager()
    register_group(manager, 3)
    info = manager.replica_info(GROUP)
    assert info is not None
    assert [r.broker_id for r in info.replicas] == [1, 2, 3]
    assert next_id(manager) == 4


def test_an_id_owned_by_another_register_code_is_refused() -> None:
    manager = ReplicasInfoManager()
    assert apply_id(manager, 1, "code-a") == RC.SUCCESS
    decision = manager.apply_broker_id(CLUSTER, GROUP, 1, "code-b")
    assert decision.code == RC.CONTROLLER_BROKER_ID_INVALID
    assert decision.events == ()


def test_an_id_that_is_neither_next_nor_owned_is_refused() -> None:
    manager = ReplicasInfoManager()
    assert apply_id(manager, 1, "code-a") == RC.SUCCESS
    assert apply_id(manager, 3, "code-c") == RC.CONTROLLER_BROKER_ID_INVALID
    assert apply_id(manager, 0, "code-c") == RC.CONTROLLER_BROKER_ID_INVALID
    assert apply_id(manager, -4, "code-c") == RC.CONTROLLER_BROKER_ID_INVALID
    assert next_id(manager) == 2


def test_reapplying_an_owned_id_with_its_code_succeeds_and_changes_nothing() -> None:
    manager = ReplicasInfoManager()
    assert apply_id(manager, 1, "code-a") == RC.SUCCESS
    before = manager.snapshot()
    assert apply_id(manager, 1, "code-a") == RC.SUCCESS
    assert manager.snapshot() == before
    assert next_id(manager) == 2


def test_two_brokers_racing_for_the_same_id_one_wins_the_other_is_told_2014() -> None:
    manager = ReplicasInfoManager()
    assert apply_id(manager, 1, "code-a") == RC.SUCCESS
    # Both asked GetNextBrokerId (2) and both decisions were made before either committed.
    first = manager.apply_broker_id(CLUSTER, GROUP, 2, "code-b")
    second = manager.apply_broker_id(CLUSTER, GROUP, 2, "code-c")
    assert first.ok and second.ok
    assert commit(manager, first).code == RC.SUCCESS
    lost = commit(manager, second)
    assert lost.code == RC.CONTROLLER_BROKER_ID_INVALID
    assert lost.response is None
    # The loser starts over and gets the next id.
    assert next_id(manager) == 3
    assert apply_id(manager, 3, "code-c") == RC.SUCCESS


def test_an_apply_for_another_cluster_is_an_invalid_request() -> None:
    manager = ReplicasInfoManager()
    assert apply_id(manager, 1, "code-a") == RC.SUCCESS
    decision = manager.apply_broker_id("OtherCluster", GROUP, 2, "code-b")
    assert decision.code == RC.CONTROLLER_INVALID_REQUEST


def test_malformed_requests_are_invalid_requests() -> None:
    manager = ReplicasInfoManager()
    assert manager.get_next_broker_id(CLUSTER, "").code == RC.CONTROLLER_INVALID_REQUEST
    assert manager.apply_broker_id(CLUSTER, "", 1, "x").code == RC.CONTROLLER_INVALID_REQUEST
    assert manager.apply_broker_id("", GROUP, 1, "x").code == RC.CONTROLLER_INVALID_REQUEST
    assert manager.register_broker(CLUSTER, "", 1, "a").code == RC.CONTROLLER_INVALID_REQUEST


# RegisterBrokerToController ---------------------------------------------------------------------


def test_register_of_an_unknown_group_or_id_needs_registration() -> None:
    manager = ReplicasInfoManager()
    unknown_group = manager.register_broker(CLUSTER, GROUP, 1, "a:1")
    assert unknown_group.code == RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    register_group(manager, 1)
    unknown_id = manager.register_broker(CLUSTER, GROUP, 2, "a:1")
    assert unknown_id.code == RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    assert unknown_id.events == ()


def test_register_with_an_unchanged_address_appends_nothing() -> None:
    manager = ReplicasInfoManager()
    register_group(manager, 1)
    decision = manager.register_broker(CLUSTER, GROUP, 1, address(1))
    assert decision.ok and decision.events == ()


def test_register_of_another_cluster_is_an_invalid_request() -> None:
    manager = ReplicasInfoManager()
    register_group(manager, 1)
    assert manager.register_broker("Other", GROUP, 1, "x").code == RC.CONTROLLER_INVALID_REQUEST


def test_a_broker_restarted_at_a_new_address_keeps_its_id_and_the_address_is_updated() -> None:
    manager = ReplicasInfoManager()
    register_group(manager, 2)
    decision = manager.register_broker(CLUSTER, GROUP, 2, "10.9.9.9:20911")
    assert decision.events == (
        UpdateBrokerAddress(
            cluster=CLUSTER, broker_name=GROUP, broker_id=2, address="10.9.9.9:20911"
        ),
    )
    reply = commit(manager, decision)
    assert reply.code == RC.SUCCESS and reply.response is not None
    assert reply.response.broker_id == 2
    info = manager.replica_info(GROUP)
    assert info is not None and info.address_of(2) == "10.9.9.9:20911"
    assert next_id(manager) == 3


def test_register_names_the_master_and_its_new_address() -> None:
    manager = ReplicasInfoManager()
    register_group(manager, 2)
    assert (
        commit(manager, manager.elect_master(GROUP, alive_replicas={1: info()})).code == RC.SUCCESS
    )
    # The master itself restarts elsewhere: the response carries its new address.
    reply = commit(manager, manager.register_broker(CLUSTER, GROUP, 1, "10.1.1.1:1"))
    assert reply.response is not None
    assert reply.response.master_broker_id == 1
    assert reply.response.master_address == "10.1.1.1:1"
    assert reply.response.master_epoch == 1
    assert reply.response.sync_state_set == frozenset({1})
    # With liveness given and the master dead, no master is named.
    dead = manager.register_broker(CLUSTER, GROUP, 2, address(2), alive=lambda n, i: i != 1)
    assert dead.response is not None and dead.response.master_broker_id is None


def test_update_broker_address_for_an_unknown_broker_is_rejected_on_apply() -> None:
    manager = ReplicasInfoManager()
    register_group(manager, 1)
    event = UpdateBrokerAddress(cluster=CLUSTER, broker_name=GROUP, broker_id=9, address="x")
    assert manager.apply(event).code == RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    other = UpdateBrokerAddress(cluster=CLUSTER, broker_name="nope", broker_id=1, address="x")
    assert manager.apply(other).code == RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED


# Crash recovery (the broker's files are modelled by what it remembers) ------------------------


class Broker:
    """The broker side of the flow, with a crash possible between any two steps."""

    def __init__(self, manager: ReplicasInfoManager, code: str, addr: str) -> None:
        self.manager = manager
        self.code = code
        self.addr = addr
        self.temp: tuple[int, str] | None = None  # brokerIdentity.temp
        self.final: int | None = None  # brokerIdentity

    def get_next(self) -> int:
        return next_id(self.manager)

    def write_temp(self, broker_id: int) -> None:
        self.temp = (broker_id, self.code)

    def apply(self) -> RC:
        assert self.temp is not None
        broker_id, code = self.temp
        return commit(
            self.manager, self.manager.apply_broker_id(CLUSTER, GROUP, broker_id, code)
        ).code

    def write_final(self) -> None:
        assert self.temp is not None
        self.final, self.temp = self.temp[0], None

    def register(self) -> RC:
        assert self.final is not None
        return commit(
            self.manager, self.manager.register_broker(CLUSTER, GROUP, self.final, self.addr)
        ).code

    def start(self) -> int:
        """The start-up recovery of docs/architecture.md ("Recovery"): final file -> register only; temp file
        -> re-apply its id and code; neither -> the whole flow. A refused temp id starts over."""
        if self.final is None:
            if self.temp is not None and self.apply() != RC.SUCCESS:
                self.temp = None
            if self.temp is None:
                self.write_temp(self.get_next())
                assert self.apply() == RC.SUCCESS
            self.write_final()
        assert self.register() == RC.SUCCESS
        assert self.final is not None
        return self.final


def test_crash_after_get_next_broker_id_recovers_the_same_id() -> None:
    manager = ReplicasInfoManager()
    broker = Broker(manager, "code-a", "a:1")
    assert broker.get_next() == 1  # crash before the temp file: nothing was reserved
    assert broker.start() == 1


def test_crash_with_the_temp_file_before_apply_reapplies_the_same_id() -> None:
    manager = ReplicasInfoManager()
    broker = Broker(manager, "code-a", "a:1")
    broker.write_temp(broker.get_next())  # crash: temp present, never applied
    assert broker.start() == 1
    assert next_id(manager) == 2


def test_crash_after_apply_before_the_final_file_reapplies_by_code() -> None:
    manager = ReplicasInfoManager()
    broker = Broker(manager, "code-a", "a:1")
    broker.write_temp(broker.get_next())
    assert broker.apply() == RC.SUCCESS  # crash: applied, final file not written
    assert broker.start() == 1
    assert next_id(manager) == 2  # the re-apply reserved nothing more


def test_crash_after_the_final_file_only_registers() -> None:
    manager = ReplicasInfoManager()
    broker = Broker(manager, "code-a", "a:1")
    broker.write_temp(broker.get_next())
    assert broker.apply() == RC.SUCCESS
    broker.write_final()  # crash before RegisterBrokerToController
    broker.addr = "b:2"  # and it comes back elsewhere
    assert broker.start() == 1
    info = manager.replica_info(GROUP)
    assert info is not None and info.address_of(1) == "b:2"


def test_a_temp_id_taken_by_another_broker_meanwhile_is_refused_and_the_broker_starts_over() -> (
    None
):
    manager = ReplicasInfoManager()
    slow = Broker(manager, "code-a", "a:1")
    slow.write_temp(slow.get_next())  # crash holding id 1, never applied
    fast = Broker(manager, "code-b", "b:1")
    assert fast.start() == 1  # took id 1 first
    assert slow.apply() == RC.CONTROLLER_BROKER_ID_INVALID
    assert slow.start() == 2
    info = manager.replica_info(GROUP)
    assert info is not None
    assert [(r.broker_id, r.address) for r in info.replicas] == [(1, "b:1"), (2, "a:1")]


def test_one_id_per_broker_whatever_the_crash_points() -> None:
    manager = ReplicasInfoManager()
    brokers = [Broker(manager, f"code-{i}", f"h:{i}") for i in range(4)]
    brokers[0].get_next()
    brokers[1].write_temp(brokers[1].get_next())
    brokers[2].write_temp(brokers[2].get_next())
    brokers[2].apply()
    ids = [b.start() for b in reversed(brokers)]
    ids += [b.start() for b in brokers]  # a second restart of everyone keeps the ids
    assert sorted(set(ids)) == [1, 2, 3, 4]
    assert ids[:4] == list(reversed(ids[4:]))
