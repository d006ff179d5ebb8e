"""The controller's answers on the wire (docs/protocol.md, "Controller requests").

- a group's metadata, "like 1003": header ``masterBrokerId`` (-1: none), ``masterAddress``
  ("" when none), ``masterEpoch``, ``syncStateSetEpoch``; body
  ``{"syncStateSet": [ids], "replicas": [{"brokerId", "address", "inSync"}]}`` and, in the
  answers to the group's brokers, ``"sealedQueues": [[topic, physical queue], ...]`` (static
  topic items sealed on the group, when there are any);
- the getSyncStateSet document of docs/controller.md (GET_SYNC_STATE_DATA's body);
- NOTIFY_BROKER_ROLE_CHANGED's header and body.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import msgpack

from controller.metadata import ReplicaInfo
from controller.metadata.results import Replica
from protocol.remoting import Header

NO_MASTER = -1


def group_header(
    *,
    master_broker_id: int | None,
    master_address: str | None,
    master_epoch: int,
    sync_state_set_epoch: int,
) -> Header:
    return {
        "masterBrokerId": NO_MASTER if master_broker_id is None else master_broker_id,
        "masterAddress": master_address if master_broker_id is not None and master_address else "",
        "masterEpoch": master_epoch,
        "syncStateSetEpoch": sync_state_set_epoch,
    }


def group_body(
    sync_state_set: Iterable[int],
    replicas: Iterable[Replica] = (),
    sealed_queues: Iterable[tuple[str, int]] = (),
) -> bytes:
    doc: dict[str, Any] = {
        "syncStateSet": sorted(sync_state_set),
        "replicas": [
            {"brokerId": r.broker_id, "address": r.address, "inSync": r.in_sync} for r in replicas
        ],
    }
    sealed = [[topic, queue] for topic, queue in sealed_queues]
    if sealed:
        doc["sealedQueues"] = sealed
    packed: bytes = msgpack.packb(doc)
    return packed


def info_header(info: ReplicaInfo) -> Header:
    return group_header(
        master_broker_id=info.master_broker_id,
        master_address=info.master_address,
        master_epoch=info.master_epoch,
        sync_state_set_epoch=info.sync_state_set_epoch,
    )


def info_body(info: ReplicaInfo, sealed_queues: Iterable[tuple[str, int]] = ()) -> bytes:
    return group_body(info.sync_state_set, info.replicas, sealed_queues)


def sync_state_document(info: ReplicaInfo, alive: Callable[[str, int], bool]) -> dict[str, Any]:
    """``getSyncStateSet``'s JSON (docs/controller.md)."""
    return {
        "brokerName": info.broker_name,
        "masterBrokerId": info.master_broker_id,
        "masterAddress": info.master_address,
        "masterEpoch": info.master_epoch,
        "syncStateSetEpoch": info.sync_state_set_epoch,
        "syncStateSet": sorted(info.sync_state_set),
        "replicas": [
            {
                "brokerId": r.broker_id,
                "address": r.address,
                "alive": alive(info.broker_name, r.broker_id),
                "inSync": r.in_sync,
            }
            for r in info.replicas
        ],
    }


def role_notification(info: ReplicaInfo) -> tuple[Header, bytes]:
    """NOTIFY_BROKER_ROLE_CHANGED (1008) to the brokers of ``info``'s group."""
    header = {"brokerName": info.broker_name, **info_header(info)}
    return header, info_body(info)
