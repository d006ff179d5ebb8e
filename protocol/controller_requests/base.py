"""What every controller request codec shares: the error for a value the controller refuses
(:class:`InvalidRequest`, a :class:`~protocol.fields.FieldError` that names the response code),
boolean header fields, msgpack bodies and id lists. Pure: no sockets, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypedDict

import msgpack

from protocol import fields
from protocol.codes import ResponseCode
from protocol.fields import FieldError
from protocol.remoting import Header, Scalar

__all__ = [
    "BrokerFields",
    "ControllerRequest",
    "InvalidRequest",
    "NotLeader",
    "broker_header",
    "id_list",
    "opt_bool",
    "pack_map",
    "req_broker",
    "unpack_map",
]


class InvalidRequest(FieldError):
    """A field of the right type whose value the controller refuses, or a body that does not
    decode: answered with ``code`` (CONTROLLER_INVALID_REQUEST unless the request says
    otherwise) and the message as remark. A missing or mistyped header field raises a plain
    :class:`FieldError` (BAD_REQUEST)."""

    def __init__(self, message: str, code: int = ResponseCode.CONTROLLER_INVALID_REQUEST) -> None:
        super().__init__(message)
        self.code = code


def opt_bool(header: Mapping[str, Scalar], name: str) -> bool:
    """An optional boolean header field, false when absent or nil (the controllers have always
    read a nil flag as absent; :func:`protocol.fields.opt_bool` refuses it)."""
    return header.get(name) is not None and fields.opt_bool(header, name)


def broker_header(cluster: str, broker_name: str, broker_id: int, broker_address: str) -> Header:
    """The four fields that name a broker, in the order REGISTER_BROKER,
    CONTROLLER_REGISTER_BROKER and BROKER_HEARTBEAT send them (a request adds its own after)."""
    return {
        "clusterName": cluster,
        "brokerName": broker_name,
        "brokerId": broker_id,
        "brokerAddress": broker_address,
    }


class BrokerFields(TypedDict):
    """The fields of :func:`broker_header`, as the request dataclasses name them."""

    cluster: str
    broker_name: str
    broker_id: int
    broker_address: str


def req_broker(header: Mapping[str, Scalar]) -> BrokerFields:
    """The four fields of :func:`broker_header`, each required (keyword arguments of the
    request's class)."""
    return {
        "cluster": fields.req_str(header, "clusterName"),
        "broker_name": fields.req_str(header, "brokerName"),
        "broker_id": fields.req_int(header, "brokerId"),
        "broker_address": fields.req_str(header, "brokerAddress"),
    }


def unpack_map(body: bytes | None) -> dict[str, Any]:
    """A msgpack map body ({} when there is none)."""
    if not body:
        return {}
    try:
        doc = msgpack.unpackb(body, raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise InvalidRequest(f"undecodable body: {type(exc).__name__}") from None
    if not isinstance(doc, dict):
        raise InvalidRequest("body must be a map")
    return doc


def pack_map(doc: Mapping[str, Any]) -> bytes:
    packed: bytes = msgpack.packb(dict(doc))
    return packed


def id_list(value: Any, what: str) -> frozenset[int]:
    if not isinstance(value, list) or not all(type(v) is int for v in value):
        raise InvalidRequest(f"{what} must be a list of ints")
    return frozenset(value)


class ControllerRequest(Protocol):
    """What a caller needs of any request codec here: its code and its wire form."""

    @property
    def code(self) -> int: ...

    def encode(self) -> tuple[Header, bytes | None]: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class NotLeader:
    """The header of CONTROLLER_NOT_LEADER (2007), a follower's answer to what only the active
    controller answers: ``leaderAddress`` when it knows the leader (tried next by the
    failover), besides the remark."""

    leader_address: str | None = None
    """None: no leader known (not sent; an empty one counts as not sent)."""

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {}
        if self.leader_address:
            header["leaderAddress"] = self.leader_address
        return header, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> NotLeader:
        return cls(leader_address=fields.opt_str(header, "leaderAddress") or None)
