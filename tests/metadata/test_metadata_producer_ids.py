"""Producer ids in the controllers' replicated state (issue 29, docs/idempotence.md): a new id
each time, an issued id taken up again at a rising epoch, an id never issued refused, a
decision overtaken by another refused when applied, the counters in snapshots, the event's one
encoding."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.metadata import EventDecodeError, ReplicasInfoManager, decode_event, encode_event
from controller.metadata.events import IssueProducerId
from controller.metadata.snapshot import decode_producers
from protocol.codes import ResponseCode as RC
from tests.metadata.support import CLUSTER, GROUP, commit, group_with_master


def test_new_ids_are_consecutive_and_never_repeat() -> None:
    m = ReplicasInfoManager()
    issued = []
    for _ in range(3):
        d = m.get_producer_id(None)
        assert d.ok and d.response is not None
        assert d.events == (IssueProducerId(producer_id=d.response[0], epoch=0),)
        assert commit(m, d).ok
        issued.append(d.response)
    assert issued == [(1, 0), (2, 0), (3, 0)]


def test_an_issued_id_is_taken_up_again_at_a_higher_epoch_each_time() -> None:
    m = ReplicasInfoManager()
    commit(m, m.get_producer_id(None))
    commit(m, m.get_producer_id(None))
    epochs = []
    for pid in (1, 2, 1):
        d = m.get_producer_id(pid)
        assert commit(m, d).ok
        assert d.response is not None and d.response[0] == pid
        epochs.append(d.response[1])
    assert epochs == [1, 2, 3]


def test_an_id_never_issued_is_refused() -> None:
    m = ReplicasInfoManager()
    commit(m, m.get_producer_id(None))
    for pid in (0, 2, 2**40):
        d = m.get_producer_id(pid)
        assert d.code == RC.CONTROLLER_INVALID_REQUEST and "never issued" in d.remark
        assert d.events == ()


def test_two_decisions_against_the_same_state_cannot_both_apply() -> None:
    m = ReplicasInfoManager()
    first, second = m.get_producer_id(None), m.get_producer_id(None)
    assert first.response == second.response == (1, 0)
    assert commit(m, first).ok
    refused = commit(m, second)
    assert refused.code == RC.CONTROLLER_INVALID_REQUEST and "ask again" in refused.remark
    commit(m, m.get_producer_id(None))
    again_a, again_b = m.get_producer_id(1), m.get_producer_id(2)
    assert commit(m, again_a).ok and not commit(m, again_b).ok


def test_the_counters_travel_in_snapshots_and_old_snapshots_keep_their_bytes() -> None:
    m = group_with_master()
    before = m.snapshot()
    assert decode_producers(before) == (1, 1)
    commit(m, m.get_producer_id(None))
    commit(m, m.get_producer_id(1))
    snap = m.snapshot()
    assert msgpack.unpackb(snap)[1] == 5
    restored = ReplicasInfoManager()
    restored.restore(snap)
    assert restored.snapshot() == snap
    assert restored.get_producer_id(None).response == (2, 0)
    assert restored.get_producer_id(1).response == (1, 2)
    assert restored.replica_info(GROUP) == m.replica_info(GROUP)
    # a state without producers is written as before (version below 5)
    fresh = group_with_master()
    assert msgpack.unpackb(fresh.snapshot())[1] < 5
    assert CLUSTER


@given(st.integers(1, 2**63 - 1), st.integers(0, 2**31 - 1))
def test_the_event_round_trips(pid: int, epoch: int) -> None:
    event = IssueProducerId(producer_id=pid, epoch=epoch)
    assert decode_event(encode_event(event)) == event


@pytest.mark.parametrize(
    "fields", [[16, 0, 0], [16, 1, -1], [16, 1, 2**31], [16, "1", 0], [16, 1], [16, 1, 0, 0]]
)
def test_malformed_events_are_refused(fields: list[object]) -> None:
    with pytest.raises(EventDecodeError):
        decode_event(msgpack.packb(fields))
