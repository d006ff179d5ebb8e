"""A broker's topics: UPDATE_AND_CREATE_TOPIC as a broker takes it from clients and rmqctl (the
broker forwards it to the controllers in controller mode:
:class:`protocol.controller_requests.topics.UpdateTopic`) and GET_ALL_TOPIC_CONFIG. Pure: no
sockets, no clock.

UPDATE_AND_CREATE_TOPIC's header: ``topic`` (letters, digits, ``-``, ``_`` and ``%``, at most
127), ``queues``? (1..1024; the broker's ``default_topic_queues`` when left out), ``perm``?
(0..7) and ``messageType``? (:mod:`protocol.topic_attrs`; left out: keep the topic's, a new
topic's 6 and NORMAL). SUCCESS answers ``topic`` and ``queues``, and ``perm`` and
``messageType`` when not the default (:class:`TopicCreated`).

GET_ALL_TOPIC_CONFIG (:class:`AllTopicsQuery`): ``sinceIncarnation``? and ``sinceVersion``?
(both or neither); SUCCESS's header ``incarnation`` and ``version`` (the table's version: it
moves with every change of a topic, within an incarnation chosen when the broker starts) and
its body the msgpack map ``{topic: {"queues": n, "perm"?: p, "messageType"?: t}}``
(:class:`TopicTable`; an entry without ``queues`` reads as 0, which a copying slave skips;
without ``perm`` or ``messageType`` as the default); asked from the table's own incarnation and
version, the header adds ``unchanged`` true and the body is an empty map.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from protocol.broker_requests import body_map, pack_map
from protocol.codes import RequestCode
from protocol.fields import FieldError, opt_bool, opt_int_or_none, opt_str, req_int, req_str
from protocol.remoting import Header, Scalar
from protocol.topic_attrs import (
    TopicAttrs,
    attrs_from,
    parse_message_type,
    parse_perm,
    put_attr_changes,
    put_attrs,
)

__all__ = ["MAX_QUEUES", "AllTopicsQuery", "CreateTopic", "TopicCreated", "TopicTable"]

MAX_QUEUES: Final = 1024
_DEFAULT_ATTRS: Final = TopicAttrs()


def _valid_topic(topic: str) -> bool:
    return 0 < len(topic) <= 127 and all(c.isalnum() or c in "-_%" for c in topic)


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateTopic:
    """UPDATE_AND_CREATE_TOPIC to a broker: create ``topic`` with ``queues`` queues (None: the
    broker's default), or grow it to that many."""

    code: ClassVar[RequestCode] = RequestCode.UPDATE_AND_CREATE_TOPIC

    topic: str
    queues: int | None = None
    perm: int | None = None
    message_type: str | None = None

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {"topic": self.topic}
        if self.queues is not None:
            header["queues"] = self.queues
        return put_attr_changes(header, self.perm, self.message_type), None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> CreateTopic:
        topic = req_str(header, "topic")
        queues = opt_int_or_none(header, "queues")
        if queues is not None and not 1 <= queues <= MAX_QUEUES:
            raise FieldError(f"queues must be 1..{MAX_QUEUES}")
        if not _valid_topic(topic):
            raise FieldError("topic may hold letters, digits, '-', '_' and '%' (at most 127)")
        perm = opt_int_or_none(header, "perm")
        kind = opt_str(header, "messageType") or None
        try:
            if perm is not None:
                parse_perm(perm)
            if kind is not None:
                kind = parse_message_type(kind).value
        except ValueError as exc:
            raise FieldError(str(exc)) from None
        return cls(topic=topic, queues=queues, perm=perm, message_type=kind)


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicCreated:
    """A broker's UPDATE_AND_CREATE_TOPIC SUCCESS: the topic, its queues, permission and
    message type now."""

    topic: str
    queues: int
    attrs: TopicAttrs = _DEFAULT_ATTRS

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {"topic": self.topic, "queues": self.queues}
        return put_attrs(header, self.attrs), None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> TopicCreated:
        return cls(
            topic=req_str(header, "topic"),
            queues=req_int(header, "queues"),
            attrs=_attrs_of(header, "the answer"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class AllTopicsQuery:
    """GET_ALL_TOPIC_CONFIG: every topic the broker holds, with its queues. With
    ``since_incarnation`` and ``since_version`` (both or neither: what an earlier answer said)
    the broker answers ``unchanged`` without the table when its table is still that one (a
    slave's copy every second, issue 34)."""

    code: ClassVar[RequestCode] = RequestCode.GET_ALL_TOPIC_CONFIG

    since_incarnation: str | None = None
    since_version: int | None = None

    def encode(self) -> tuple[Header, bytes | None]:
        if self.since_incarnation is None or self.since_version is None:
            return {}, None
        return {
            "sinceIncarnation": self.since_incarnation,
            "sinceVersion": self.since_version,
        }, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> AllTopicsQuery:
        incarnation = opt_str(header, "sinceIncarnation") or None
        version = opt_int_or_none(header, "sinceVersion")
        if (incarnation is None) != (version is None):
            raise FieldError("sinceIncarnation and sinceVersion go together")
        if version is not None and version < 0:
            raise FieldError("sinceVersion must be >= 0")
        return cls(since_incarnation=incarnation, since_version=version)


def _attrs_of(doc: Mapping[str, Any], where: str) -> TopicAttrs:
    try:
        return attrs_from(doc)
    except ValueError as exc:
        raise FieldError(f"{where}: {exc}") from None


def _queues(name: Any, doc: Any) -> tuple[str, int]:
    if not isinstance(name, str) or not isinstance(doc, dict):
        raise FieldError("the topic table maps topic names to maps")
    queues = doc.get("queues", 0)
    if type(queues) is not int:
        raise FieldError(f"topic {name}: 'queues' must be an integer")
    return name, queues


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicTable:
    """GET_ALL_TOPIC_CONFIG's SUCCESS: topic -> its number of queues, and the permission and
    message type of those whose are not the default."""

    queues: Mapping[str, int]
    attrs: Mapping[str, TopicAttrs] = field(default_factory=dict)
    incarnation: str | None = None
    version: int | None = None
    """The table's version within the broker's incarnation (both None from a broker that does
    not count its changes): what the next :class:`AllTopicsQuery` may ask from."""
    unchanged: bool = False
    """The table is still the asked version: ``queues`` and ``attrs`` are empty, not sent."""

    def encode(self) -> tuple[Header, bytes]:
        header: dict[str, Scalar] = {}
        if self.incarnation is not None and self.version is not None:
            header["incarnation"] = self.incarnation
            header["version"] = self.version
            if self.unchanged:
                header["unchanged"] = True
                return header, pack_map({})
        return header, pack_map(
            {
                name: put_attrs({"queues": n}, self.attrs.get(name, _DEFAULT_ATTRS))
                for name, n in self.queues.items()
            }
        )

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> TopicTable:
        incarnation = opt_str(header, "incarnation") or None
        version = opt_int_or_none(header, "version")
        if (incarnation is None) != (version is None):
            raise FieldError("incarnation and version go together")
        unchanged = opt_bool(header, "unchanged")
        if unchanged and version is None:
            raise FieldError("unchanged needs the incarnation and version")
        doc = body_map(body, "topic table")
        if unchanged and doc:
            raise FieldError("an unchanged topic table carries no topics")
        queues = dict(_queues(name, entry) for name, entry in doc.items())
        attrs = {name: _attrs_of(entry, f"topic {name}") for name, entry in doc.items()}
        return cls(
            queues=queues,
            attrs={n: a for n, a in attrs.items() if not a.default},
            incarnation=incarnation,
            version=version,
            unchanged=unchanged,
        )
