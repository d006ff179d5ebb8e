"""What the controllers answer about this broker's group (GET_REPLICA_INFO, REGISTER,
ELECT_MASTER, and the content of a NOTIFY_BROKER_ROLE_CHANGED push): the master, its epoch, the
SyncStateSet, sealed static topic queues, and the registered replicas, read with the one codec
(:class:`protocol.controller_requests.groups.GroupMetadata`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from protocol.controller_requests.groups import NO_MASTER, GroupMetadata
from protocol.remoting import Frame

__all__ = ["NO_MASTER", "GroupInfo"]


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """What the controller says of this broker's group."""

    master_broker_id: int
    """:data:`NO_MASTER` while there is none."""
    master_address: str
    master_epoch: int
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int
    sealed_queues: frozenset[tuple[str, int]] = frozenset()
    """The group's static topic queues whose items are sealed (``sealedQueues``)."""
    replicas: Mapping[int, str] = field(default_factory=dict)
    """The replicas the controllers list for the group, broker id -> address (the HA master
    counts only these, at these addresses)."""

    @classmethod
    def of(cls, meta: GroupMetadata) -> GroupInfo:
        return cls(
            master_broker_id=NO_MASTER if meta.master_broker_id is None else meta.master_broker_id,
            master_address=meta.master_address,
            master_epoch=meta.master_epoch,
            sync_state_set=meta.sync_state_set,
            sync_state_set_epoch=meta.sync_state_set_epoch,
            sealed_queues=frozenset(meta.sealed_queues),
            replicas={r.broker_id: r.address for r in meta.replicas},
        )

    @classmethod
    def from_frame(cls, frame: Frame) -> GroupInfo:
        """Raises :class:`~protocol.fields.FieldError` for a malformed answer (nothing of it
        is applied then; the poll asks again)."""
        return cls.of(GroupMetadata.parse(frame.header, frame.body))
