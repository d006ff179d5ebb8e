"""The controller's answers on the wire (docs/protocol.md, "Controller requests"), from its
applied state:

- a group's metadata, "like 1003" (:class:`protocol.controller_requests.groups.GroupMetadata`)
  and, in the answers to the group's brokers, the static topic items sealed on the group;
- the getSyncStateSet document of docs/controller.md (GET_SYNC_STATE_DATA's body);
- NOTIFY_BROKER_ROLE_CHANGED's header and body.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from controller.metadata import ReplicaInfo
from controller.metadata.results import Replica
from protocol.controller_requests.groups import GroupMetadata, ReplicaEntry
from protocol.remoting import Header


def group_metadata(
    info: ReplicaInfo,
    sealed_queues: Iterable[tuple[str, int]] = (),
    *,
    broker_id: int | None = None,
    remark: str | None = None,
) -> GroupMetadata:
    """The group's metadata answer (1003, 1002, 1004) from the applied state."""
    return metadata_answer(
        master_broker_id=info.master_broker_id,
        master_address=info.master_address,
        master_epoch=info.master_epoch,
        sync_state_set_epoch=info.sync_state_set_epoch,
        sync_state_set=info.sync_state_set,
        replicas=info.replicas,
        sealed_queues=sealed_queues,
        broker_id=broker_id,
        remark=remark,
    )


def metadata_answer(
    *,
    master_broker_id: int | None,
    master_address: str | None,
    master_epoch: int,
    sync_state_set_epoch: int,
    sync_state_set: Iterable[int],
    replicas: Iterable[Replica] = (),
    sealed_queues: Iterable[tuple[str, int]] = (),
    broker_id: int | None = None,
    remark: str | None = None,
) -> GroupMetadata:
    """The group's metadata answer from its parts (a registration's decision has them)."""
    return GroupMetadata(
        master_broker_id=master_broker_id,
        master_address=(master_address or "") if master_broker_id is not None else "",
        master_epoch=master_epoch,
        sync_state_set_epoch=sync_state_set_epoch,
        sync_state_set=frozenset(sync_state_set),
        replicas=tuple(ReplicaEntry(r.broker_id, r.address, r.in_sync) for r in replicas),
        sealed_queues=tuple(sealed_queues),
        broker_id=broker_id,
        remark=remark,
    )


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
    header, body = group_metadata(info).encode()
    notification: Header = {"brokerName": info.broker_name, **header}
    return notification, body
