"""The fencing lease (broker.replicas.lease): renewed only by an answered heartbeat that does
not depose this master, for the shorter of our timeout and the controller's, fenced past it."""

from __future__ import annotations

from broker.replicas.lease import FencingLease
from broker.role import RoleCell, RoleState
from protocol.controller_requests.heartbeats import HeartbeatAnswer


def answer(**header: int) -> HeartbeatAnswer:
    return HeartbeatAnswer.parse(header)


def master_cell() -> RoleCell:
    return RoleCell(RoleState(broker_id=1, is_master=True, master_epoch=3))


def test_an_answer_naming_this_master_renews_for_the_shorter_timeout() -> None:
    cell = master_cell()
    lease = FencingLease(cell, heartbeat_timeout_ms=1000)
    deposed = lease.answered(
        100.0, answer(masterBrokerId=1, masterEpoch=3, heartbeatTimeoutMillis=400), 1
    )
    assert not deposed
    assert cell.current.lease_expires == 100.4
    assert lease.last_contact == 100.0
    lease.answered(101.0, answer(masterBrokerId=1, masterEpoch=3), 1)
    assert cell.current.lease_expires == 102.0


def test_an_answer_naming_another_master_or_epoch_renews_nothing() -> None:
    cell = master_cell()
    lease = FencingLease(cell, heartbeat_timeout_ms=1000)
    lease.renew(50.0)
    assert lease.answered(60.0, answer(masterBrokerId=2, masterEpoch=4), 1)
    assert lease.answered(60.0, answer(masterBrokerId=1, masterEpoch=4), 1)
    assert cell.current.lease_expires == 51.0
    assert lease.last_contact == 50.0


def test_an_earlier_controllers_answer_renews_for_the_brokers_own_timeout() -> None:
    # Before answers named the master and capped the timeout (a broker upgraded first).
    cell = master_cell()
    lease = FencingLease(cell, heartbeat_timeout_ms=1000)
    assert not lease.answered(20.0, answer(), 1)
    assert cell.current.lease_expires == 21.0
    assert not lease.answered(30.0, answer(masterBrokerId=2), 1)
    assert cell.current.lease_expires == 31.0


def test_a_slave_renews_whatever_master_the_answer_names() -> None:
    cell = RoleCell(RoleState(broker_id=2, is_master=False, master_epoch=3))
    lease = FencingLease(cell, heartbeat_timeout_ms=1000)
    assert not lease.answered(10.0, answer(masterBrokerId=1, masterEpoch=3), 2)
    assert cell.current.lease_expires == 11.0


def test_a_master_silent_past_the_timeout_is_fenced_until_an_answer() -> None:
    cell = master_cell()
    lease = FencingLease(cell, heartbeat_timeout_ms=1000)
    lease.renew(10.0)
    lease.check(11.0)
    assert not cell.current.fenced
    lease.check(11.5)
    assert cell.current.fenced
    lease.renew(12.0)
    assert not cell.current.fenced


def test_a_slave_is_never_fenced() -> None:
    cell = RoleCell(RoleState(broker_id=2, is_master=False))
    lease = FencingLease(cell, heartbeat_timeout_ms=1000)
    lease.renew(10.0)
    lease.check(100.0)
    assert not cell.current.fenced
