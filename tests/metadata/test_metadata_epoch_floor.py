"""An election names an epoch above every epoch an alive replica holds (a group whose metadata
was cleaned and registered again starts at masterEpoch 0 while its brokers hold more)."""

from __future__ import annotations

import msgpack
import pytest

from controller.metadata import (
    ElectMaster,
    EventDecodeError,
    ReplicasInfoManager,
    decode_event,
    encode_event,
)
from controller.metadata.election import MAX_EPOCH, next_master_epoch
from protocol.codes import ResponseCode as RC
from tests.metadata.support import commit, info, register_group


def test_the_next_epoch_is_one_past_the_group_and_every_alive_replica() -> None:
    assert next_master_epoch(0, {}) == 1
    assert next_master_epoch(4, {1: info(epoch=2), 2: info(epoch=3)}) == 5
    assert next_master_epoch(0, {1: info(epoch=2), 2: info(epoch=7)}) == 8


def test_an_epoch_that_cannot_be_incremented_is_ignored() -> None:
    assert next_master_epoch(3, {1: info(epoch=MAX_EPOCH), 2: info(epoch=1)}) == 4


def test_a_re_registered_group_elects_above_the_epoch_its_master_holds() -> None:
    manager = ReplicasInfoManager()
    register_group(manager, 2)
    alive = {1: info(epoch=2, offset=50), 2: info(epoch=2, offset=40)}
    reply = commit(manager, manager.elect_master("broker-a", alive_replicas=alive))
    assert reply.code == RC.SUCCESS
    group = manager.replica_info("broker-a")
    assert group is not None and group.master_broker_id == 1 and group.master_epoch == 3


def test_the_usual_election_still_adds_one() -> None:
    manager = ReplicasInfoManager()
    register_group(manager, 2)
    reply = commit(manager, manager.elect_master("broker-a", alive_replicas={1: info()}))
    assert reply.code == RC.SUCCESS
    group = manager.replica_info("broker-a")
    assert group is not None and group.master_epoch == 1


def test_the_epoch_travels_only_when_it_is_not_implied() -> None:
    implied = ElectMaster(
        broker_name="g", new_master_broker_id=1, master_epoch=4, sync_state_set_epoch=2
    )
    assert implied.next_epoch == 5
    assert len(msgpack.unpackb(encode_event(implied))) == 5  # as older logs hold it
    assert decode_event(encode_event(implied)) == implied
    jump = ElectMaster(
        broker_name="g",
        new_master_broker_id=1,
        master_epoch=0,
        sync_state_set_epoch=2,
        new_master_epoch=9,
    )
    assert len(msgpack.unpackb(encode_event(jump))) == 6
    assert decode_event(encode_event(jump)) == jump


def test_a_non_canonical_or_backward_epoch_is_refused() -> None:
    with pytest.raises(EventDecodeError):
        decode_event(msgpack.packb([3, "g", 1, 4, 2, 5]))  # implied, so never encoded
    with pytest.raises(EventDecodeError):
        decode_event(msgpack.packb([3, "g", 1, 4, 2, 3]))  # backwards
    with pytest.raises(ValueError):
        ElectMaster(
            broker_name="g",
            new_master_broker_id=1,
            master_epoch=4,
            sync_state_set_epoch=2,
            new_master_epoch=4,
        )
