"""Broker ids, registration and forgetting brokers (docs/protocol.md, "Controller requests").

Requests (header fields, no body; ``?`` marks a field that may be left out)::

    CONTROLLER_GET_NEXT_BROKER_ID 1012  clusterName, brokerName
    CONTROLLER_APPLY_BROKER_ID 1013     clusterName, brokerName, appliedBrokerId,
                                        registerCheckCode, brokerAddress?
    CONTROLLER_REGISTER_BROKER 1003     clusterName, brokerName, brokerId, brokerAddress,
                                        registerCheckCode?
    CLEAN_BROKER_DATA 1011              clusterName?, brokerName, brokerIds? (ids separated by
                                        ';'; none: the whole group), cleanLivingBroker

Answers: 1012's SUCCESS has header ``nextBrokerId`` (:class:`NextBrokerIdAnswer`); 1013 and 1011
answer an empty SUCCESS; 1003 answers the group's metadata (controller/documents.py).

A missing or mistyped field raises :class:`~protocol.fields.FieldError`; ``brokerIds`` that are
not ids raise :class:`~protocol.controller_requests.base.InvalidRequest` with
CONTROLLER_INVALID_CLEAN_BROKER_METADATA.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from protocol.codes import RequestCode, ResponseCode
from protocol.controller_requests.base import InvalidRequest, broker_header, opt_bool, req_broker
from protocol.fields import opt_str, req_int, req_str
from protocol.remoting import Header, Scalar

__all__ = [
    "ApplyBrokerId",
    "CleanBrokerData",
    "GetNextBrokerId",
    "NextBrokerIdAnswer",
    "RegisterBroker",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class GetNextBrokerId:
    """CONTROLLER_GET_NEXT_BROKER_ID: the id a new broker of the group should apply for."""

    code: ClassVar[RequestCode] = RequestCode.CONTROLLER_GET_NEXT_BROKER_ID

    cluster: str
    broker_name: str

    def encode(self) -> tuple[Header, bytes | None]:
        return {"clusterName": self.cluster, "brokerName": self.broker_name}, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> GetNextBrokerId:
        return cls(
            cluster=req_str(header, "clusterName"), broker_name=req_str(header, "brokerName")
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class NextBrokerIdAnswer:
    """CONTROLLER_GET_NEXT_BROKER_ID's SUCCESS."""

    next_broker_id: int

    def encode(self) -> tuple[Header, bytes | None]:
        return {"nextBrokerId": self.next_broker_id}, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> NextBrokerIdAnswer:
        return cls(next_broker_id=req_int(header, "nextBrokerId"))


@dataclass(frozen=True, slots=True, kw_only=True)
class ApplyBrokerId:
    """CONTROLLER_APPLY_BROKER_ID: ``broker_id`` becomes the broker's that holds
    ``register_check_code``."""

    code: ClassVar[RequestCode] = RequestCode.CONTROLLER_APPLY_BROKER_ID

    cluster: str
    broker_name: str
    broker_id: int
    register_check_code: str = ""
    broker_address: str = ""
    """Sent only when not empty."""

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {
            "clusterName": self.cluster,
            "brokerName": self.broker_name,
            "appliedBrokerId": self.broker_id,
            "registerCheckCode": self.register_check_code,
        }
        if self.broker_address:
            header["brokerAddress"] = self.broker_address
        return header, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> ApplyBrokerId:
        return cls(
            cluster=req_str(header, "clusterName"),
            broker_name=req_str(header, "brokerName"),
            broker_id=req_int(header, "appliedBrokerId"),
            register_check_code=opt_str(header, "registerCheckCode"),
            broker_address=opt_str(header, "brokerAddress"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterBroker:
    """CONTROLLER_REGISTER_BROKER: binds ``broker_id`` to the connection it arrives on."""

    code: ClassVar[RequestCode] = RequestCode.CONTROLLER_REGISTER_BROKER

    cluster: str
    broker_name: str
    broker_id: int
    broker_address: str
    register_check_code: str | None = None
    """None: not sent (an empty one counts as not sent)."""

    def encode(self) -> tuple[Header, bytes | None]:
        header = broker_header(self.cluster, self.broker_name, self.broker_id, self.broker_address)
        if self.register_check_code is not None:
            header["registerCheckCode"] = self.register_check_code
        return header, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> RegisterBroker:
        return cls(
            **req_broker(header),
            register_check_code=opt_str(header, "registerCheckCode") or None,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class CleanBrokerData:
    """CLEAN_BROKER_DATA: forget ``broker_ids`` of the group (None: the whole group)."""

    code: ClassVar[RequestCode] = RequestCode.CLEAN_BROKER_DATA

    broker_name: str
    cluster: str | None = None
    broker_ids: frozenset[int] | None = None
    clean_living_broker: bool = False

    def encode(self) -> tuple[Header, bytes | None]:
        ids = ";".join(str(i) for i in sorted(self.broker_ids or ()))
        header: Header = {
            "brokerName": self.broker_name,
            "brokerIds": ids,
            "cleanLivingBroker": self.clean_living_broker,
        }
        if self.cluster:
            header["clusterName"] = self.cluster
        return header, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> CleanBrokerData:
        text = opt_str(header, "brokerIds")
        ids: set[int] = set()
        for part in text.split(";"):
            part = part.strip()
            if not part:
                continue
            if not (part.isascii() and part.removeprefix("-").isdigit()):
                raise InvalidRequest(
                    f"brokerIds must be ids separated by ';', not {text!r}",
                    ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                )
            ids.add(int(part))
        return cls(
            cluster=opt_str(header, "clusterName") or None,
            broker_name=req_str(header, "brokerName"),
            broker_ids=frozenset(ids) or None,
            clean_living_broker=opt_bool(header, "cleanLivingBroker"),
        )
