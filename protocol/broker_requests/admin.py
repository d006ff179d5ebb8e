"""A broker's topics: UPDATE_AND_CREATE_TOPIC as a broker takes it from clients and rmqctl (the
broker forwards it to the controllers in controller mode:
:class:`protocol.controller_requests.topics.UpdateTopic`) and GET_ALL_TOPIC_CONFIG. Pure: no
sockets, no clock.

UPDATE_AND_CREATE_TOPIC's header: ``topic`` (letters, digits, ``-``, ``_`` and ``%``, at most
127), ``queues``? (1..1024; the broker's ``default_topic_queues`` when left out). SUCCESS answers
``topic`` and ``queues`` (:class:`TopicCreated`).

GET_ALL_TOPIC_CONFIG (:class:`AllTopicsQuery`) has no fields; SUCCESS's body is the msgpack map
``{topic: {"queues": n}}`` (:class:`TopicTable`; an entry without ``queues`` reads as 0, which
a copying slave skips).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final

from protocol.broker_requests import body_map, pack_map
from protocol.codes import RequestCode
from protocol.fields import FieldError, opt_int_or_none, req_int, req_str
from protocol.remoting import Header, Scalar

__all__ = ["MAX_QUEUES", "AllTopicsQuery", "CreateTopic", "TopicCreated", "TopicTable"]

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


@dataclass(frozen=True, slots=True, kw_only=True)
class AllTopicsQuery:
    """GET_ALL_TOPIC_CONFIG: every topic the broker holds, with its queues (no fields)."""

    code: ClassVar[RequestCode] = RequestCode.GET_ALL_TOPIC_CONFIG

    def encode(self) -> tuple[Header, bytes | None]:
        return {}, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> AllTopicsQuery:
        return cls()


def _queues(name: Any, doc: Any) -> tuple[str, int]:
    if not isinstance(name, str) or not isinstance(doc, dict):
        raise FieldError("the topic table maps topic names to maps")
    queues = doc.get("queues", 0)
    if type(queues) is not int:
        raise FieldError(f"topic {name}: 'queues' must be an integer")
    return name, queues


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicTable:
    """GET_ALL_TOPIC_CONFIG's SUCCESS: topic -> its number of queues."""

    queues: Mapping[str, int]

    def encode(self) -> tuple[Header, bytes]:
        return {}, pack_map({name: {"queues": n} for name, n in self.queues.items()})

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> TopicTable:
        doc = body_map(body, "topic table")
        return cls(queues=dict(_queues(name, entry) for name, entry in doc.items()))
