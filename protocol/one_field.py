"""The typed requests of a code whose one field names what it asks about: a topic
(:class:`TopicOnly`, header ``topic``) or a consumer group (:class:`GroupOnly`, header
``consumerGroup``), required and non-empty, no body. Pure: no sockets, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Self

from protocol.fields import req_str
from protocol.remoting import Header, Scalar

__all__ = ["GroupOnly", "TopicOnly"]


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicOnly:
    """Base of a request whose one field is ``topic``; a subclass gives its ``code`` (a
    ClassVar)."""

    topic: str

    def encode(self) -> tuple[Header, bytes | None]:
        return {"topic": self.topic}, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> Self:
        return cls(topic=req_str(header, "topic"))


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupOnly:
    """Base of a request whose one field is the consumer group (header ``consumerGroup``); a
    subclass gives its ``code`` (a ClassVar)."""

    group: str

    def encode(self) -> tuple[Header, bytes | None]:
        return {"consumerGroup": self.group}, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> Self:
        return cls(group=req_str(header, "consumerGroup"))
