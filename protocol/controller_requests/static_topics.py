"""Static topics on the controllers (docs/protocol.md, "Controller requests";
docs/static-topics.md).

Requests (header fields, no body; ``?`` marks a field that may be left out)::

    UPDATE_AND_CREATE_STATIC_TOPIC 513  topic, queues (logical), brokerNames? (';'-separated;
                                        none: every group with a master) or placeGroups? (N:
                                        the N groups with a master and the least traffic)
    GET_STATIC_TOPIC_MAPPING 5120       topic
    REMAP_STATIC_TOPIC 5121             topic, queueId (logical), brokerName (the target group)

Each answers the topic's mapping document in the body.

A missing or mistyped field raises :class:`~protocol.fields.FieldError`; ``brokerNames`` with
``placeGroups`` raises :class:`~protocol.controller_requests.base.InvalidRequest` (BAD_REQUEST).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from protocol.codes import ControllerCode, ResponseCode
from protocol.controller_requests.base import InvalidRequest
from protocol.fields import opt_int, opt_str, req_int, req_str
from protocol.one_field import TopicOnly
from protocol.remoting import Header, Scalar

__all__ = ["CreateStaticTopic", "RemapStaticTopic", "StaticTopicMappingQuery"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateStaticTopic:
    """UPDATE_AND_CREATE_STATIC_TOPIC: ``queues`` logical queues spread over ``broker_names``
    (empty: every group with a master) or over the ``place_groups`` least loaded groups."""

    code: ClassVar[ControllerCode] = ControllerCode.UPDATE_AND_CREATE_STATIC_TOPIC

    topic: str
    queues: int
    broker_names: tuple[str, ...] = ()
    place_groups: int = 0
    """0: not sent."""

    def __post_init__(self) -> None:
        if self.place_groups and self.broker_names:
            raise InvalidRequest(
                "give brokerNames or placeGroups, not both", ResponseCode.BAD_REQUEST
            )

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {"topic": self.topic, "queues": self.queues}
        if self.broker_names:
            header["brokerNames"] = ";".join(self.broker_names)
        if self.place_groups:
            header["placeGroups"] = self.place_groups
        return header, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> CreateStaticTopic:
        topic = req_str(header, "topic")
        names = tuple(n for n in opt_str(header, "brokerNames").split(";") if n)
        place = opt_int(header, "placeGroups", 0)
        if place and names:
            raise InvalidRequest(
                "give brokerNames or placeGroups, not both", ResponseCode.BAD_REQUEST
            )
        return cls(
            topic=topic, queues=req_int(header, "queues"), broker_names=names, place_groups=place
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class StaticTopicMappingQuery(TopicOnly):
    """GET_STATIC_TOPIC_MAPPING: the topic's mapping (TOPIC_NOT_EXIST: not a static topic)."""

    code: ClassVar[ControllerCode] = ControllerCode.GET_STATIC_TOPIC_MAPPING


@dataclass(frozen=True, slots=True, kw_only=True)
class RemapStaticTopic:
    """REMAP_STATIC_TOPIC: move logical queue ``queue_id`` of ``topic`` to the group
    ``broker_name``."""

    code: ClassVar[ControllerCode] = ControllerCode.REMAP_STATIC_TOPIC

    topic: str
    queue_id: int
    broker_name: str

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {
            "topic": self.topic,
            "queueId": self.queue_id,
            "brokerName": self.broker_name,
        }
        return header, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> RemapStaticTopic:
        return cls(
            topic=req_str(header, "topic"),
            queue_id=req_int(header, "queueId"),
            broker_name=req_str(header, "brokerName"),
        )
