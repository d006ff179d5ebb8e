"""What the controllers answer about this broker's group (GET_REPLICA_INFO, REGISTER,
ELECT_MASTER, and the content of a NOTIFY_BROKER_ROLE_CHANGED push): the master, its epoch, the
SyncStateSet, sealed static topic queues, and the registered replicas."""

from __future__ import annotations

from dataclasses import dataclass

import msgpack

from protocol.remoting import Frame

NO_MASTER = -1


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """What the controller says of this broker's group."""

    master_broker_id: int
    master_address: str
    master_epoch: int
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int
    sealed_queues: frozenset[tuple[str, int]] = frozenset()
    """The group's static topic queues whose items are sealed (``sealedQueues``)."""

    @classmethod
    def from_frame(cls, frame: Frame) -> GroupInfo:
        h = frame.header
        members: list[int] = []
        sealed: set[tuple[str, int]] = set()
        if frame.body:
            doc = msgpack.unpackb(frame.body)
            if isinstance(doc, dict):
                members = [int(m) for m in doc.get("syncStateSet") or []]
                for pair in doc.get("sealedQueues") or []:
                    if (
                        isinstance(pair, list)
                        and len(pair) == 2
                        and isinstance(pair[0], str)
                        and type(pair[1]) is int
                    ):
                        sealed.add((pair[0], pair[1]))
        master_id = h.get("masterBrokerId")
        address = h.get("masterAddress")
        return cls(
            master_broker_id=int(master_id) if isinstance(master_id, int) else NO_MASTER,
            master_address=address if isinstance(address, str) else "",
            master_epoch=int(h.get("masterEpoch") or 0),
            sync_state_set=frozenset(members),
            sync_state_set_epoch=int(h.get("syncStateSetEpoch") or 0),
            sealed_queues=frozenset(sealed),
        )


def registered_replicas(resp: Frame) -> dict[int, str] | None:
    """The replicas the controllers list for the group, broker id -> address; None when the
    answer has no list. The HA master counts only these, at these addresses."""
    doc = msgpack.unpackb(resp.body) if resp.body else None
    replicas = doc.get("replicas") if isinstance(doc, dict) else None
    if not isinstance(replicas, list):
        return None
    return {
        int(r["brokerId"]): str(r.get("address") or "")
        for r in replicas
        if isinstance(r, dict) and isinstance(r.get("brokerId"), int)
    }


def known_replicas(resp: Frame) -> set[int] | None:
    """The broker ids the controller lists for the group; None when the answer has no list."""
    if not resp.body:
        return None
    doc = msgpack.unpackb(resp.body)
    replicas = doc.get("replicas") if isinstance(doc, dict) else None
    if not isinstance(replicas, list):
        return None
    return {int(r["brokerId"]) for r in replicas if isinstance(r, dict) and "brokerId" in r}
