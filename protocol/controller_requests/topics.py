"""Topics and routes on the controllers (docs/protocol.md, "Controller requests").

Requests (``?`` marks a field that may be left out)::

    REGISTER_BROKER 103          header clusterName, brokerName, brokerId, brokerAddress;
                                 body {"topics": {name: queues}} (none: no topics)
    GET_ROUTEINFO_BY_TOPIC 105   header topic
    GET_BROKER_CLUSTER_INFO 106  nothing
    UPDATE_AND_CREATE_TOPIC 17   header topic, queues, clusterName?, brokerName (the controllers'
                                 form: the group the topic goes to; a broker's own 17 has no
                                 brokerName)

Answers: 17's SUCCESS is :class:`TopicUpdated` (header ``topic``, ``queues``, ``brokerName``); 103
answers an empty SUCCESS, 105 and 106 a document in the body.

A missing or mistyped header field raises :class:`~protocol.fields.FieldError`; a body that does
not decode, or topics that are not names mapped to counts, raise
:class:`~protocol.controller_requests.base.InvalidRequest` (CONTROLLER_INVALID_REQUEST). Whether a
name or a count is allowed is the metadata's rule (``check_topic``, ``check_queues``), checked by
the controller.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from protocol.codes import RequestCode
from protocol.controller_requests.base import (
    InvalidRequest,
    broker_header,
    pack_map,
    req_broker,
    unpack_map,
)
from protocol.fields import opt_str, req_int, req_str
from protocol.remoting import Header, Scalar

__all__ = ["ClusterInfoQuery", "RegisterRoutes", "RouteQuery", "TopicUpdated", "UpdateTopic"]


def _topics(value: Any) -> dict[str, int]:
    if not isinstance(value, dict):
        raise InvalidRequest("topics must map names to queue counts")
    for topic, queues in value.items():
        if not isinstance(topic, str):
            raise InvalidRequest(f"topic must be a string, not {type(topic).__name__}")
        if type(queues) is not int:
            raise InvalidRequest(
                f"queues of {topic} must be an integer, not {type(queues).__name__}"
            )
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterRoutes:
    """REGISTER_BROKER: the topics a broker serves, for the routes (soft state)."""

    code: ClassVar[RequestCode] = RequestCode.REGISTER_BROKER

    cluster: str
    broker_name: str
    broker_id: int
    broker_address: str
    topics: dict[str, int] = field(default_factory=dict)

    def encode(self) -> tuple[Header, bytes | None]:
        header = broker_header(self.cluster, self.broker_name, self.broker_id, self.broker_address)
        return header, pack_map({"topics": self.topics})

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> RegisterRoutes:
        topics = _topics(unpack_map(body).get("topics") or {})
        return cls(**req_broker(header), topics=topics)


@dataclass(frozen=True, slots=True, kw_only=True)
class RouteQuery:
    """GET_ROUTEINFO_BY_TOPIC: the topic's route, from the controllers or (a lone broker's
    own topics) a broker: the same request to both."""

    code: ClassVar[RequestCode] = RequestCode.GET_ROUTEINFO_BY_TOPIC

    topic: str

    def encode(self) -> tuple[Header, bytes | None]:
        return {"topic": self.topic}, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> RouteQuery:
        return cls(topic=req_str(header, "topic"))


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterInfoQuery:
    """GET_BROKER_CLUSTER_INFO: every group and its brokers (no fields), from the controllers
    or a broker."""

    code: ClassVar[RequestCode] = RequestCode.GET_BROKER_CLUSTER_INFO

    def encode(self) -> tuple[Header, bytes | None]:
        return {}, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> ClusterInfoQuery:
        return cls()


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateTopic:
    """UPDATE_AND_CREATE_TOPIC to the controllers: ``topic`` with ``queues`` queues on the
    group ``broker_name``, committed before it is pushed to the group's brokers."""

    code: ClassVar[RequestCode] = RequestCode.UPDATE_AND_CREATE_TOPIC

    broker_name: str
    topic: str
    queues: int
    cluster: str | None = None

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {"topic": self.topic, "queues": self.queues}
        if self.cluster:
            header["clusterName"] = self.cluster
        header["brokerName"] = self.broker_name
        return header, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> UpdateTopic:
        return cls(
            cluster=opt_str(header, "clusterName") or None,
            broker_name=req_str(header, "brokerName"),
            topic=req_str(header, "topic"),
            queues=req_int(header, "queues"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicUpdated:
    """UPDATE_AND_CREATE_TOPIC's SUCCESS from the controllers."""

    topic: str
    queues: int
    broker_name: str

    def encode(self) -> tuple[Header, bytes | None]:
        return {"topic": self.topic, "queues": self.queues, "brokerName": self.broker_name}, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> TopicUpdated:
        return cls(
            topic=req_str(header, "topic"),
            queues=req_int(header, "queues"),
            broker_name=req_str(header, "brokerName"),
        )
