"""RECALL_MESSAGE (RocketMQ 5.3's number): recall a scheduled message before its delivery
(docs/timer.md). Pure: no sockets, no clock.

Request header ``topic`` and ``msgId`` (the id its send answered); SUCCESS answers ``msgId``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from protocol.codes import RequestCode
from protocol.fields import req_str
from protocol.remoting import Header, Scalar

__all__ = ["RecallRequest", "Recalled"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RecallRequest:
    """RECALL_MESSAGE: cancel the scheduled message ``msg_id`` of ``topic``."""

    code: ClassVar[RequestCode] = RequestCode.RECALL_MESSAGE

    topic: str
    msg_id: str

    def encode(self) -> tuple[Header, bytes | None]:
        return {"topic": self.topic, "msgId": self.msg_id}, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> RecallRequest:
        return cls(topic=req_str(header, "topic"), msg_id=req_str(header, "msgId"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Recalled:
    """A recall's SUCCESS: the id of the message recalled."""

    msg_id: str

    def encode(self) -> tuple[Header, bytes | None]:
        return {"msgId": self.msg_id}, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> Recalled:
        return cls(msg_id=req_str(header, "msgId"))
