"""UPDATE_AND_CREATE_TOPIC as a broker takes it from clients and rmqctl (the broker forwards it
to the controllers in controller mode: :class:`protocol.controller_requests.topics.UpdateTopic`).
Pure: no sockets, no clock.

Request header: ``topic`` (letters, digits, ``-``, ``_`` and ``%``, at most 127), ``queues``?
(1..1024; the broker's ``default_topic_queues`` when left out). SUCCESS answers ``topic`` and
``queues`` (:class:`TopicCreated`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Final

from protocol.codes import RequestCode
from protocol.fields import FieldError, opt_int_or_none, req_int, req_str
from protocol.remoting import Header, Scalar

__all__ = ["MAX_QUEUES", "CreateTopic", "TopicCreated"]

MAX_QUEUES: Final = 1024


def _valid_topic(topic: str) -> bool:
    return 0 < len(topic) <= 127 and all(c.isalnum() or c in "-_%" for c in topic)


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateTopic:
    """UPDATE_AND_CREATE_TOPIC to a broker: create ``topic`` with ``queues`` queues (None: the
    broker's default), or grow it to that many."""

    code: ClassVar[RequestCode] = RequestCode.UPDATE_AND_CREATE_TOPIC

    topic: str
    queues: int | None = None

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {"topic": self.topic}
        if self.queues is not None:
            header["queues"] = self.queues
        return header, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> CreateTopic:
        topic = req_str(header, "topic")
        queues = opt_int_or_none(header, "queues")
        if queues is not None and not 1 <= queues <= MAX_QUEUES:
            raise FieldError(f"queues must be 1..{MAX_QUEUES}")
        if not _valid_topic(topic):
            raise FieldError("topic may hold letters, digits, '-', '_' and '%' (at most 127)")
        return cls(topic=topic, queues=queues)


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicCreated:
    """A broker's UPDATE_AND_CREATE_TOPIC SUCCESS: the topic and its queues now."""

    topic: str
    queues: int

    def encode(self) -> tuple[Header, bytes | None]:
        return {"topic": self.topic, "queues": self.queues}, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> TopicCreated:
        return cls(topic=req_str(header, "topic"), queues=req_int(header, "queues"))
