"""The controllers' own Raft group (docs/protocol.md, "Controller requests"; our codes).

Requests (header fields, no body)::

    ADD_CONTROLLER 5101              id, address
    REMOVE_CONTROLLER 5102           id
    TRANSFER_CONTROLLER_LEADER 5103  id (a voter)
    GET_CONTROLLER_CONFIG 1010       nothing

The first three answer the CONTROLLER_GET_METADATA_INFO document in the body, the last every
config key of the answering controller. A missing or mistyped field raises
:class:`~protocol.fields.FieldError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Self

from protocol.codes import ControllerCode
from protocol.fields import req_str
from protocol.no_fields import NoFields
from protocol.remoting import Header, Scalar

__all__ = ["AddController", "ControllerConfigQuery", "RemoveController", "TransferLeader"]


@dataclass(frozen=True, slots=True, kw_only=True)
class AddController:
    """ADD_CONTROLLER: ``node_id`` at ``address`` joins as a learner, then a voter."""

    code: ClassVar[ControllerCode] = ControllerCode.ADD_CONTROLLER

    node_id: str
    address: str

    def encode(self) -> tuple[Header, bytes | None]:
        return {"id": self.node_id, "address": self.address}, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> AddController:
        return cls(node_id=req_str(header, "id"), address=req_str(header, "address"))


@dataclass(frozen=True, slots=True, kw_only=True)
class _NodeOnly:
    """Base of a request whose one field is a controller's ``node_id`` (header ``id``)."""

    node_id: str

    def encode(self) -> tuple[Header, bytes | None]:
        return {"id": self.node_id}, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> Self:
        return cls(node_id=req_str(header, "id"))


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoveController(_NodeOnly):
    """REMOVE_CONTROLLER: ``node_id`` leaves the group."""

    code: ClassVar[ControllerCode] = ControllerCode.REMOVE_CONTROLLER


@dataclass(frozen=True, slots=True, kw_only=True)
class TransferLeader(_NodeOnly):
    """TRANSFER_CONTROLLER_LEADER: the voter ``node_id`` becomes the leader."""

    code: ClassVar[ControllerCode] = ControllerCode.TRANSFER_CONTROLLER_LEADER


@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerConfigQuery(NoFields):
    """GET_CONTROLLER_CONFIG: the answering controller's configuration (no fields)."""

    code: ClassVar[ControllerCode] = ControllerCode.GET_CONTROLLER_CONFIG
