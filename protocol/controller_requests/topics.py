"""Topics and routes on the controllers (docs/protocol.md, "Controller requests").

Requests (``?`` marks a field that may be left out)::

    REGISTER_BROKER 103          header clusterName, brokerName, brokerId, brokerAddress;
                                 body {"topics": {name: queues}} (none: no topics)
    GET_ROUTEINFO_BY_TOPIC 105   header topic
    GET_BROKER_CLUSTER_INFO 106  nothing
    UPDATE_AND_CREATE_TOPIC 17   header topic, queues, clusterName?, brokerName (the controllers'
                                 form: the group the topic goes to; a broker's own 17 has no
                                 brokerName), perm?, messageType? (left out: keep them)
    DELETE_TOPIC_IN_NAMESRV 216  header topic, force? (deleteTopic: everywhere)
    DELETE_SUBSCRIPTIONGROUP 207 header groupName, removeDlq? (deleteSubGroup: on every broker)
    GET_TOPICS_BY_CLUSTER 224    header clusterName? (topicList)

Answers: 17's SUCCESS is :class:`TopicUpdated` (header ``topic``, ``queues``, ``brokerName``,
``perm``?, ``messageType``?: the topic's now, left out by controllers before them); 103
answers an empty SUCCESS, 105 and 106 a document in the body. 216 and 207 answer
:class:`DeleteReport` (body ``{"name", "brokers": [[brokerName, address, code, remark], ...]}``,
one row per broker the delete was pushed to, code 0 when it deleted); 224 answers
:class:`TopicList` (body ``{"topics": [[topic, cluster, {brokerName: queues} (, {brokerName:
{"perm"?, "messageType"?}}: the groups where they are not the default)], ...]}``, by name).

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
from protocol.fields import FieldError, opt_bool, opt_int_or_none, opt_str, req_int, req_str
from protocol.no_fields import NoFields
from protocol.one_field import TopicOnly
from protocol.remoting import Header, Scalar
from protocol.topic_attrs import TopicAttrs, attrs_from, put_attr_changes, put_attrs

__all__ = [
    "BrokerOutcome",
    "ClusterInfoQuery",
    "DeleteReport",
    "DeleteSubGroup",
    "DeleteTopic",
    "RegisterRoutes",
    "RouteQuery",
    "TopicEntry",
    "TopicList",
    "TopicListQuery",
    "TopicUpdated",
    "UpdateTopic",
]


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
class RouteQuery(TopicOnly):
    """GET_ROUTEINFO_BY_TOPIC: the topic's route, from the controllers or (a lone broker's
    own topics) a broker: the same request to both."""

    code: ClassVar[RequestCode] = RequestCode.GET_ROUTEINFO_BY_TOPIC


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterInfoQuery(NoFields):
    """GET_BROKER_CLUSTER_INFO: every group and its brokers (no fields), from the controllers
    or a broker."""

    code: ClassVar[RequestCode] = RequestCode.GET_BROKER_CLUSTER_INFO


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateTopic:
    """UPDATE_AND_CREATE_TOPIC to the controllers: ``topic`` with ``queues`` queues on the
    group ``broker_name``, committed before it is pushed to the group's brokers."""

    code: ClassVar[RequestCode] = RequestCode.UPDATE_AND_CREATE_TOPIC

    broker_name: str
    topic: str
    queues: int
    cluster: str | None = None
    perm: int | None = None
    message_type: str | None = None

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {"topic": self.topic, "queues": self.queues}
        if self.cluster:
            header["clusterName"] = self.cluster
        header["brokerName"] = self.broker_name
        return put_attr_changes(header, self.perm, self.message_type), None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> UpdateTopic:
        return cls(
            cluster=opt_str(header, "clusterName") or None,
            broker_name=req_str(header, "brokerName"),
            topic=req_str(header, "topic"),
            queues=req_int(header, "queues"),
            perm=opt_int_or_none(header, "perm"),
            message_type=opt_str(header, "messageType") or None,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicUpdated:
    """UPDATE_AND_CREATE_TOPIC's SUCCESS from the controllers."""

    topic: str
    queues: int
    broker_name: str
    perm: int | None = None
    message_type: str | None = None

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {
            "topic": self.topic,
            "queues": self.queues,
            "brokerName": self.broker_name,
        }
        return put_attr_changes(header, self.perm, self.message_type), None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> TopicUpdated:
        return cls(
            topic=req_str(header, "topic"),
            queues=req_int(header, "queues"),
            broker_name=req_str(header, "brokerName"),
            perm=opt_int_or_none(header, "perm"),
            message_type=opt_str(header, "messageType") or None,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteTopic:
    """DELETE_TOPIC_IN_NAMESRV to the controllers (rmqctl deleteTopic): forget ``topic`` in
    the replicated metadata, then delete it on every broker of every group (``force``: even
    while a producer sends to it)."""

    code: ClassVar[RequestCode] = RequestCode.DELETE_TOPIC_IN_NAMESRV

    topic: str
    force: bool = False

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {"topic": self.topic}
        if self.force:
            header["force"] = True
        return header, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> DeleteTopic:
        return cls(topic=req_str(header, "topic"), force=opt_bool(header, "force"))


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteSubGroup:
    """DELETE_SUBSCRIPTIONGROUP to the controllers (rmqctl deleteSubGroup): delete the group on
    every broker of every group (settings, offsets, retry topic; its dead-letter topic too with
    ``remove_dlq``)."""

    code: ClassVar[RequestCode] = RequestCode.DELETE_SUBSCRIPTIONGROUP

    group: str
    remove_dlq: bool = False

    def encode(self) -> tuple[Header, bytes | None]:
        header: Header = {"groupName": self.group}
        if self.remove_dlq:
            header["removeDlq"] = True
        return header, None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> DeleteSubGroup:
        return cls(group=req_str(header, "groupName"), remove_dlq=opt_bool(header, "removeDlq"))


@dataclass(frozen=True, slots=True)
class BrokerOutcome:
    """What one broker answered a pushed delete: ``code`` 0 when it deleted."""

    broker_name: str
    address: str
    code: int
    remark: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteReport:
    """The answer of 216 and 207 on the controllers: the topic or group, and each broker's."""

    name: str
    brokers: tuple[BrokerOutcome, ...] = ()

    def encode(self) -> tuple[Header, bytes | None]:
        rows = [[b.broker_name, b.address, b.code, b.remark] for b in self.brokers]
        return {}, pack_map({"name": self.name, "brokers": rows})

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> DeleteReport:
        doc = unpack_map(body)
        name, rows = doc.get("name"), doc.get("brokers")
        if not isinstance(name, str) or not isinstance(rows, list):
            raise FieldError("a delete report has a name and a list of brokers")
        brokers: list[BrokerOutcome] = []
        for row in rows:
            if not (
                isinstance(row, list)
                and len(row) == 4
                and isinstance(row[0], str)
                and isinstance(row[1], str)
                and type(row[2]) is int
                and isinstance(row[3], str)
            ):
                raise FieldError("a broker's outcome is [brokerName, address, code, remark]")
            brokers.append(BrokerOutcome(*row))
        return cls(name=name, brokers=tuple(brokers))


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicListQuery:
    """GET_TOPICS_BY_CLUSTER: every topic (of one cluster when ``cluster`` is given)."""

    code: ClassVar[RequestCode] = RequestCode.GET_TOPICS_BY_CLUSTER

    cluster: str | None = None

    def encode(self) -> tuple[Header, bytes | None]:
        return ({"clusterName": self.cluster} if self.cluster else {}), None

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> TopicListQuery:
        return cls(cluster=opt_str(header, "clusterName") or None)


@dataclass(frozen=True, slots=True)
class TopicEntry:
    """One topic of one cluster and its queue count on each broker group that has it, and its
    permission and message type on the groups where they are not the default."""

    topic: str
    cluster: str
    queues: dict[str, int]
    attrs: dict[str, TopicAttrs] = field(default_factory=dict)

    @property
    def summary(self) -> TopicAttrs:
        """The topic's permission and type: the first group's (by name) that has them set,
        else the default (every group is given the same by updateTopic)."""
        return next((self.attrs[g] for g in sorted(self.attrs)), TopicAttrs())


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicList:
    """GET_TOPICS_BY_CLUSTER's SUCCESS, by topic name then cluster."""

    topics: tuple[TopicEntry, ...] = ()

    def encode(self) -> tuple[Header, bytes | None]:
        rows: list[list[Any]] = []
        for t in self.topics:
            row: list[Any] = [t.topic, t.cluster, dict(sorted(t.queues.items()))]
            if t.attrs:
                row.append({g: put_attrs({}, a) for g, a in sorted(t.attrs.items())})
            rows.append(row)
        return {}, pack_map({"topics": rows})

    @classmethod
    def parse(cls, header: Mapping[str, Scalar], body: bytes | None = None) -> TopicList:
        rows = unpack_map(body).get("topics")
        if not isinstance(rows, list):
            raise FieldError("topics must be a list")
        out: list[TopicEntry] = []
        for row in rows:
            if not (
                isinstance(row, list)
                and len(row) in (3, 4)
                and isinstance(row[0], str)
                and isinstance(row[1], str)
                and (len(row) == 3 or isinstance(row[3], dict))
            ):
                raise FieldError(
                    "a topic entry is [topic, cluster, {brokerName: queues}"
                    "(, {brokerName: {perm?, messageType?}})]"
                )
            attrs: dict[str, TopicAttrs] = {}
            for group, doc in (row[3] if len(row) == 4 else {}).items():
                if not isinstance(group, str) or not isinstance(doc, dict):
                    raise FieldError("a topic's attributes map group names to maps")
                try:
                    attrs[group] = attrs_from(doc)
                except ValueError as exc:
                    raise FieldError(f"topic {row[0]} on {group}: {exc}") from None
            out.append(TopicEntry(row[0], row[1], _topics(row[2]), attrs))
        return cls(topics=tuple(out))
