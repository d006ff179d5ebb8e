"""GET_CONSUME_STATS and GET_CONSUMER_CONNECTION_LIST: what operators ask a broker about
consumer groups (rmqctl consumerProgress, consumerConnection). The answers' bodies are
:mod:`protocol.consume_stats`'. Pure: no sockets, no clock.

Requests (header fields; ``?`` may be left out)::

    GET_CONSUME_STATS 208              consumerGroup? (every group), topic? (every topic)
    GET_CONSUMER_CONNECTION_LIST 203   consumerGroup
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from protocol.codes import RequestCode
from protocol.fields import opt_str
from protocol.one_field import GroupOnly
from protocol.remoting import Header, Scalar

__all__ = ["ConsumeStatsQuery", "ConsumerConnectionsQuery"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumeStatsQuery:
    """GET_CONSUME_STATS: the progress of ``group`` (None: every group) on ``topic`` (None:
    every topic it consumes)."""

    code: ClassVar[RequestCode] = RequestCode.GET_CONSUME_STATS

    group: str | None = None
    topic: str | None = None

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {}
        if self.group:
            header["consumerGroup"] = self.group
        if self.topic:
            header["topic"] = self.topic
        return header, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> ConsumeStatsQuery:
        return cls(
            group=opt_str(header, "consumerGroup") or None, topic=opt_str(header, "topic") or None
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerConnectionsQuery(GroupOnly):
    """GET_CONSUMER_CONNECTION_LIST: the live members of ``group``."""

    code: ClassVar[RequestCode] = RequestCode.GET_CONSUMER_CONNECTION_LIST
