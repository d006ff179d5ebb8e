"""GET_PRODUCER_CONNECTION_LIST (204, RocketMQ's number): a producer group's live clients as one
broker sees them (rmqctl producerConnection). Pure: no sockets, no clock.

Request header ``producerGroup``. SUCCESS body: a msgpack list of
``{"clientId", "address", "language", "version", "protocol", "lastHeartbeatMs"}``
(:class:`ProducerConnection`), sorted by client id; empty for a group nobody heart-beats in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import msgpack

from protocol.broker_requests import doc_field
from protocol.codes import RequestCode
from protocol.fields import FieldError, req_str
from protocol.remoting import Header, Scalar

__all__ = ["ProducerConnection", "ProducerConnections", "ProducerConnectionsQuery"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerConnectionsQuery:
    """GET_PRODUCER_CONNECTION_LIST: the live clients of producer group ``group``."""

    code: ClassVar[RequestCode] = RequestCode.GET_PRODUCER_CONNECTION_LIST

    group: str

    def encode(self) -> tuple[Header, bytes | None]:
        return {"producerGroup": self.group}, None

    @classmethod
    def parse(
        cls, header: Mapping[str, Scalar], body: bytes | None = None
    ) -> ProducerConnectionsQuery:
        return cls(group=req_str(header, "producerGroup"))


@dataclass(frozen=True, slots=True)
class ProducerConnection:
    """One live producer: its id, its address as the broker (or the front relaying it) saw it,
    its language and version as it said ("" unknown), how it reaches the broker (remoting,
    gRPC, classic) and when it last heart-beat (epoch ms)."""

    client_id: str
    address: str
    language: str
    version: str
    protocol: str
    last_heartbeat_ms: int

    def to_wire(self) -> dict[str, Any]:
        return {
            "clientId": self.client_id,
            "address": self.address,
            "language": self.language,
            "version": self.version,
            "protocol": self.protocol,
            "lastHeartbeatMs": self.last_heartbeat_ms,
        }


@dataclass(frozen=True, slots=True)
class ProducerConnections:
    """GET_PRODUCER_CONNECTION_LIST's SUCCESS."""

    producers: tuple[ProducerConnection, ...] = ()

    def encode(self) -> tuple[Header, bytes]:
        body: bytes = msgpack.packb([p.to_wire() for p in self.producers])
        return {}, body

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> ProducerConnections:
        try:
            doc = msgpack.unpackb(body or b"\x90", raw=False)
        except Exception as exc:  # msgpack raises several unrelated types on garbage
            raise FieldError(f"malformed producer list: {type(exc).__name__}") from None
        if not isinstance(doc, list) or not all(isinstance(d, dict) for d in doc):
            raise FieldError("malformed producer list: not a list of maps")
        return cls(
            tuple(
                ProducerConnection(
                    doc_field(d, "clientId", str),
                    doc_field(d, "address", str),
                    doc_field(d, "language", str),
                    doc_field(d, "version", str),
                    doc_field(d, "protocol", str),
                    doc_field(d, "lastHeartbeatMs", int),
                )
                for d in doc
            )
        )
