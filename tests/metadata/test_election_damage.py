"""Elections know about damage (issue 31): a replica's heartbeat says how many damaged CommitLog
records it holds unrepaired; the election policy prefers candidates without; an operator's
election of a damaged replica is refused, naming why, unless forced."""

from __future__ import annotations

import pytest

from controller.metadata import ElectionInfo, ElectMaster, Verdict, choose_master
from protocol.codes import ResponseCode as RC
from protocol.controller_requests.groups import ElectMaster as ElectMasterRequest
from protocol.controller_requests.heartbeats import BrokerHeartbeat
from protocol.fields import FieldError
from protocol.remoting import FrameDecoder, encode_frame, request
from tests.metadata.support import GROUP, group_with_master

ALL = frozenset({1, 2, 3})


def info(max_offset: int, damaged: int = 0, epoch: int = 1) -> ElectionInfo:
    return ElectionInfo(epoch=epoch, max_offset=max_offset, election_priority=0, damaged=damaged)


def test_a_candidate_without_damage_is_preferred_to_one_with_more_data() -> None:
    alive = {1: info(900, damaged=1), 2: info(800), 3: info(700)}
    result = choose_master(sync_state_set=ALL, replicas=ALL, old_master=None, alive=alive)
    assert (result.verdict, result.broker_id) == (Verdict.ELECTED, 2)


def test_a_planned_switch_prefers_an_intact_replica_too() -> None:
    alive = {1: info(900), 2: info(900, damaged=3), 3: info(100)}
    result = choose_master(
        sync_state_set=ALL, replicas=ALL, old_master=1, alive=alive, planned=True
    )
    assert (result.verdict, result.broker_id) == (Verdict.ELECTED, 3)


def test_when_every_candidate_is_damaged_the_usual_order_decides() -> None:
    alive = {1: info(100, damaged=1), 2: info(900, damaged=2)}
    result = choose_master(
        sync_state_set=frozenset({1, 2}), replicas=ALL, old_master=None, alive=alive
    )
    assert (result.verdict, result.broker_id) == (Verdict.ELECTED, 2)


def test_a_designated_damaged_replica_is_refused_saying_so() -> None:
    alive = {1: info(900), 2: info(900, damaged=2)}
    refused = choose_master(
        sync_state_set=ALL, replicas=ALL, old_master=1, alive=alive, designated=2
    )
    assert refused.verdict is Verdict.DESIGNATED_INVALID
    assert "holds 2 damaged CommitLog records" in refused.reason
    assert "--force" in refused.reason
    # A forced election: the controller elects from a view without that broker's damage.
    forced = choose_master(
        sync_state_set=ALL, replicas=ALL, old_master=1, alive={**alive, 2: info(900)}, designated=2
    )
    assert (forced.verdict, forced.broker_id) == (Verdict.ELECTED, 2)


def test_the_state_machine_refuses_a_damaged_designated_broker_without_appending() -> None:
    m = group_with_master(3, master=1)
    alive = {1: info(10), 2: info(10, damaged=1), 3: info(10)}
    d = m.elect_master(
        GROUP, alive_replicas=alive, designated_broker_id=2, enable_elect_unclean_master=True
    )
    assert d.code == RC.CONTROLLER_ELECT_MASTER_FAILED and not d.events
    assert "holds 1 damaged CommitLog records" in d.remark
    forced = m.elect_master(
        GROUP,
        alive_replicas={**alive, 2: info(10)},
        designated_broker_id=2,
        enable_elect_unclean_master=True,
    )
    assert forced.ok and any(isinstance(e, ElectMaster) for e in forced.events)


def test_the_heartbeat_carries_damaged_records_only_when_there_are_some() -> None:
    plain = BrokerHeartbeat(broker_name="g1", broker_id=2)
    assert "damagedRecords" not in plain.encode()[0]
    damaged = BrokerHeartbeat(broker_name="g1", broker_id=2, damaged_records=3)
    (frame,) = FrameDecoder().feed(encode_frame(request(damaged.code, 1, *damaged.encode())))
    assert frame.header["damagedRecords"] == 3
    assert BrokerHeartbeat.parse(frame.header, frame.body) == damaged


def test_elect_master_carries_force_only_with_a_designated_broker() -> None:
    ask = ElectMasterRequest(broker_name="g1", designated=2, force=True)
    header, _ = ask.encode()
    assert header["force"] is True
    assert ElectMasterRequest.parse(header) == ask
    assert "force" not in ElectMasterRequest(broker_name="g1", designated=2).encode()[0]
    with pytest.raises(FieldError, match="only an election naming a broker can be forced"):
        ElectMasterRequest(broker_name="g1", force=True)
