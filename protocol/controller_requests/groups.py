"""A broker group's master and SyncStateSet: elections, the set's changes and the reads of a
group's metadata (docs/protocol.md, "Controller requests").

Requests (``?`` marks a field that may be left out)::

    CONTROLLER_ELECT_MASTER 1002         header brokerName, designateElect? (bool) with brokerId
                                         (the designated broker), plannedSwitch? (bool)
    CONTROLLER_ALTER_SYNC_STATE_SET 1001 header brokerName, masterBrokerId, masterEpoch;
                                         body {"syncStateSet": [ids], "syncStateSetEpoch": n}
    CONTROLLER_GET_REPLICA_INFO 1004     header brokerName
    CONTROLLER_GET_SYNC_STATE_DATA 1006  header brokerName
    CONTROLLER_GET_METADATA_INFO 1005    nothing
    NOTIFY_BROKER_ROLE_CHANGED 1008      to a broker: header brokerName and the group's
                                         metadata's, body its metadata's (RoleChanged)

Answers: 1001's SUCCESS is :class:`AlterSyncStateSetAnswer` (header ``syncStateSetEpoch``, body
``{"syncStateSet": [ids]}``); 1002, 1004 and 1003 (brokers.py) answer the group's metadata,
:class:`GroupMetadata`, also the header and body of NOTIFY_BROKER_ROLE_CHANGED; 1006 and 1005 a
document in the body.

``brokerId`` without ``designateElect`` only names the asker: it is not read. A missing or
mistyped header field raises :class:`~protocol.fields.FieldError`; a body that does not decode
or lacks a field raises :class:`~protocol.controller_requests.base.InvalidRequest`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Self

from protocol.codes import RequestCode
from protocol.controller_requests.base import (
    InvalidRequest,
    id_list,
    opt_bool,
    pack_map,
    unpack_map,
)
from protocol.fields import FieldError, opt_int_or_none, opt_str, req_int, req_str
from protocol.no_fields import NoFields
from protocol.remoting import Header, Scalar

__all__ = [
    "NO_MASTER",
    "AlterSyncStateSet",
    "AlterSyncStateSetAnswer",
    "ElectMaster",
    "GetMetadataInfo",
    "GetReplicaInfo",
    "GetSyncStateData",
    "GroupMetadata",
    "ReplicaEntry",
    "RoleChanged",
]

NO_MASTER: Final = -1
"""``masterBrokerId`` of a group without a master."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ElectMaster:
    """CONTROLLER_ELECT_MASTER: a broker's request (neither field set), an operator's naming a
    broker (``designated``), or an operator's planned switch away from an alive master."""

    code: ClassVar[RequestCode] = RequestCode.CONTROLLER_ELECT_MASTER

    broker_name: str
    designated: int | None = None
    planned_switch: bool = False
    """Only without ``designated`` (a designated election is no planned switch)."""
    force: bool = False
    """With ``designated``: elect it even when it reports unrepaired damage (``force``, sent
    only when true; issue 31)."""

    def __post_init__(self) -> None:
        if self.designated is not None and self.planned_switch:
            raise FieldError("an election names a broker or is a planned switch, not both")
        if self.force and self.designated is None:
            raise FieldError("only an election naming a broker can be forced")

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {"brokerName": self.broker_name}
        if self.designated is not None:
            header["brokerId"] = self.designated
            header["designateElect"] = True
        if self.force:
            header["force"] = True
        if self.planned_switch:
            header["plannedSwitch"] = True
        return header, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> ElectMaster:
        name = req_str(header, "brokerName")
        if opt_bool(header, "designateElect"):
            return cls(
                broker_name=name,
                designated=req_int(header, "brokerId"),
                force=opt_bool(header, "force"),
            )
        return cls(broker_name=name, planned_switch=opt_bool(header, "plannedSwitch"))


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterSyncStateSet:
    """CONTROLLER_ALTER_SYNC_STATE_SET: the master of ``master_epoch`` proposes
    ``sync_state_set`` in place of the set of ``sync_state_set_epoch``."""

    code: ClassVar[RequestCode] = RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET

    broker_name: str
    master_broker_id: int
    master_epoch: int
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {
            "brokerName": self.broker_name,
            "masterBrokerId": self.master_broker_id,
            "masterEpoch": self.master_epoch,
        }
        body = pack_map(
            {
                "syncStateSet": sorted(self.sync_state_set),
                "syncStateSetEpoch": self.sync_state_set_epoch,
            }
        )
        return header, body

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> AlterSyncStateSet:
        doc = unpack_map(body)
        if "syncStateSet" not in doc:
            raise InvalidRequest("body needs syncStateSet")
        members = id_list(doc["syncStateSet"], "syncStateSet")
        ss_epoch = doc.get("syncStateSetEpoch")
        if type(ss_epoch) is not int:
            raise InvalidRequest("body needs syncStateSetEpoch (int)")
        return cls(
            broker_name=req_str(header, "brokerName"),
            master_broker_id=req_int(header, "masterBrokerId"),
            master_epoch=req_int(header, "masterEpoch"),
            sync_state_set=members,
            sync_state_set_epoch=ss_epoch,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterSyncStateSetAnswer:
    """CONTROLLER_ALTER_SYNC_STATE_SET's SUCCESS: the set now and its epoch."""

    sync_state_set: frozenset[int]
    sync_state_set_epoch: int

    def encode(self) -> tuple[Header, bytes | None]:
        body = pack_map({"syncStateSet": sorted(self.sync_state_set)})
        return {"syncStateSetEpoch": self.sync_state_set_epoch}, body

    @classmethod
    def parse(
        cls, header: Mapping[str, Scalar], body: bytes | None = None
    ) -> AlterSyncStateSetAnswer:
        doc = unpack_map(body)
        return cls(
            sync_state_set=id_list(doc.get("syncStateSet"), "syncStateSet"),
            sync_state_set_epoch=req_int(header, "syncStateSetEpoch"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class _GroupQuery:
    broker_name: str

    def encode(self) -> tuple[Header, bytes | None]:
        return {"brokerName": self.broker_name}, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> Self:
        return cls(broker_name=req_str(header, "brokerName"))


@dataclass(frozen=True, slots=True, kw_only=True)
class GetReplicaInfo(_GroupQuery):
    """CONTROLLER_GET_REPLICA_INFO: the group's metadata (any controller)."""

    code: ClassVar[RequestCode] = RequestCode.CONTROLLER_GET_REPLICA_INFO


@dataclass(frozen=True, slots=True, kw_only=True)
class GetSyncStateData(_GroupQuery):
    """CONTROLLER_GET_SYNC_STATE_DATA: the getSyncStateSet document (the active controller)."""

    code: ClassVar[RequestCode] = RequestCode.CONTROLLER_GET_SYNC_STATE_DATA


@dataclass(frozen=True, slots=True, kw_only=True)
class GetMetadataInfo(NoFields):
    """CONTROLLER_GET_METADATA_INFO: the controller group's document (no fields)."""

    code: ClassVar[RequestCode] = RequestCode.CONTROLLER_GET_METADATA_INFO


@dataclass(frozen=True, slots=True)
class ReplicaEntry:
    """One registered broker of a group, in :class:`GroupMetadata`."""

    broker_id: int
    address: str
    in_sync: bool


def _replica(doc: Any) -> ReplicaEntry:
    if not isinstance(doc, dict):
        raise FieldError("a replica must be a map")
    broker_id, address, in_sync = doc.get("brokerId"), doc.get("address"), doc.get("inSync")
    if type(broker_id) is not int or not isinstance(address, str) or type(in_sync) is not bool:
        raise FieldError("a replica needs brokerId (int), address (text) and inSync (bool)")
    return ReplicaEntry(broker_id, address, in_sync)


def _sealed(doc: Any) -> tuple[str, int]:
    if not (isinstance(doc, list) and len(doc) == 2):
        raise FieldError("a sealed queue must be [topic, queue]")
    topic, queue = doc
    if not isinstance(topic, str) or type(queue) is not int:
        raise FieldError("a sealed queue must be [topic (text), queue (int)]")
    return topic, queue


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupMetadata:
    """A group's metadata: the answer of CONTROLLER_REGISTER_BROKER (with ``broker_id``, the
    registered one), CONTROLLER_ELECT_MASTER (with a ``remark`` when it is not SUCCESS) and
    CONTROLLER_GET_REPLICA_INFO.

    Header ``masterBrokerId`` (-1: none), ``masterAddress`` ("" while there is no master),
    ``masterEpoch``, ``syncStateSetEpoch``, then ``brokerId`` and ``remark`` when set; body
    ``{"syncStateSet": [ids], "replicas": [{"brokerId", "address", "inSync"}]}`` plus
    ``"sealedQueues": [[topic, physical queue], ...]`` when some are sealed."""

    master_broker_id: int | None
    """None: no master (-1 on the wire)."""
    master_address: str = ""
    """Empty while there is no master."""
    master_epoch: int
    sync_state_set_epoch: int
    sync_state_set: frozenset[int] = frozenset()
    replicas: tuple[ReplicaEntry, ...] = ()
    sealed_queues: tuple[tuple[str, int], ...] = ()
    broker_id: int | None = None
    remark: str | None = None
    """None: not sent (an empty one counts as not sent)."""

    def __post_init__(self) -> None:
        if self.master_broker_id == NO_MASTER:
            raise FieldError(f"master_broker_id {NO_MASTER} means no master: give None")
        if self.master_broker_id is None and self.master_address:
            raise FieldError("a group without a master has no master address")

    def encode(self) -> tuple[Header, bytes]:
        master = self.master_broker_id
        header: Header = {
            "masterBrokerId": NO_MASTER if master is None else master,
            "masterAddress": self.master_address,
            "masterEpoch": self.master_epoch,
            "syncStateSetEpoch": self.sync_state_set_epoch,
        }
        if self.broker_id is not None:
            header["brokerId"] = self.broker_id
        if self.remark:
            header["remark"] = self.remark
        doc: dict[str, Any] = {
            "syncStateSet": sorted(self.sync_state_set),
            "replicas": [
                {"brokerId": r.broker_id, "address": r.address, "inSync": r.in_sync}
                for r in self.replicas
            ],
        }
        if self.sealed_queues:
            doc["sealedQueues"] = [[topic, queue] for topic, queue in self.sealed_queues]
        return header, pack_map(doc)

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> GroupMetadata:
        master = req_int(header, "masterBrokerId")
        doc = unpack_map(body)
        replicas = doc.get("replicas", [])
        sealed = doc.get("sealedQueues", [])
        if not isinstance(replicas, list) or not isinstance(sealed, list):
            raise FieldError("replicas and sealedQueues must be lists")
        return cls(
            master_broker_id=None if master == NO_MASTER else master,
            master_address=opt_str(header, "masterAddress"),
            master_epoch=req_int(header, "masterEpoch"),
            sync_state_set_epoch=req_int(header, "syncStateSetEpoch"),
            sync_state_set=id_list(doc.get("syncStateSet") or [], "syncStateSet"),
            replicas=tuple(_replica(r) for r in replicas),
            sealed_queues=tuple(_sealed(q) for q in sealed),
            broker_id=opt_int_or_none(header, "brokerId"),
            remark=opt_str(header, "remark") or None,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class RoleChanged:
    """NOTIFY_BROKER_ROLE_CHANGED: a controller's push to each broker of ``broker_name`` after
    its master changed, carrying the group's metadata (a broker takes it as a hint to ask the
    controllers, never as the answer itself)."""

    code: ClassVar[RequestCode] = RequestCode.NOTIFY_BROKER_ROLE_CHANGED

    broker_name: str
    metadata: GroupMetadata

    def encode(self) -> tuple[Header, bytes | None]:
        header, body = self.metadata.encode()
        return {"brokerName": self.broker_name, **header}, body

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> RoleChanged:
        return cls(
            broker_name=req_str(header, "brokerName"), metadata=GroupMetadata.parse(header, body)
        )
