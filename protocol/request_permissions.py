"""Which permission each remoting request needs, and the decision over a user's rules: pure code.

A request needs a list of :class:`Check`: a resource and the actions any one of which suffices
(RocketMQ's route query passes with pub, sub or get on the topic). Every check must pass.
:data:`ANY_USER` (no check) means any authenticated user may send it; a code absent from the
tables needs a super user (the cluster's own processes count as one): new or internal requests
are closed by default.

Topics named ``%RETRY%<group>`` or ``%DLQ%<group>`` are the group's: they are checked as the
resource ``Group:<group>``, as RocketMQ does.

Broker requests (``broker_checks``):

- pub on the topic: SEND_MESSAGE, SEND_BATCH_MESSAGE, RECALL_MESSAGE;
- sub on the topic and the group: PULL_MESSAGE, POP_MESSAGE, QUERY/UPDATE_CONSUMER_OFFSET,
  HEART_BEAT (consumer); sub on the topic: GET_MIN/MAX_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP; sub on
  the group: ACK/BATCH_ACK/CHANGE_MESSAGE_INVISIBLETIME, CONSUMER_SEND_MSG_BACK,
  UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP;
- create or update on the topic: UPDATE_AND_CREATE_TOPIC; on the group:
  UPDATE_AND_CREATE_SUBSCRIPTIONGROUP; update or admin on the group: RESEND_DLQ_MESSAGES,
  INVOKE_BROKER_TO_RESET_OFFSET, CONSUME_MESSAGE_DIRECTLY;
- get: GET_PRODUCER_CONNECTION_LIST on the producer group; QUERY_MESSAGE and QUERY_MESSAGE_BY_TIME (sub also does), GET_SUBSCRIPTIONGROUP_CONFIG,
  GET_CONSUMER_CONNECTION_LIST, GET_CONSUME_STATS, QUERY_DLQ_MESSAGES on the group; VIEW_MESSAGE_BY_ID and the full tables
  (GET_ALL_TOPIC_CONFIG, GET_ALL_SUBSCRIPTIONGROUP_CONFIG, GET_ALL_CONSUMER_OFFSET) and
  GET_BROKER_CONFIG and VIEW_BROKER_STATS_DATA on the cluster (UPDATE_BROKER_CONFIG: super
  users only);
- pub, sub or get on the topic: GET_ROUTEINFO_BY_TOPIC;
- delete on the topic: DELETE_TOPIC_IN_BROKER; on the group: DELETE_SUBSCRIPTIONGROUP; get or
  sub on the topic: GET_TOPIC_STATS_INFO;
- any authenticated user: HEART_BEAT (producer), END_TRANSACTION, GET_BROKER_CLUSTER_INFO,
  GET_BROKER_RUNTIME_INFO, GET_BROKER_EPOCH_CACHE.

Controller requests (``controller_checks``): the route query and topic creation as on a broker;
deleteTopic (DELETE_TOPIC_IN_NAMESRV) with delete on the topic, deleteSubGroup
(DELETE_SUBSCRIPTIONGROUP) with delete on the group, topicList (GET_TOPICS_BY_CLUSTER) with get
on the cluster;
the read-only metadata (GET_BROKER_CLUSTER_INFO, CONTROLLER_GET_REPLICA_INFO,
CONTROLLER_GET_METADATA_INFO, CONTROLLER_GET_SYNC_STATE_DATA) and an idempotent producer's id
(CONTROLLER_GET_PRODUCER_ID) to any authenticated user;
everything else, electMaster, cleanBrokerMetadata, the user and ACL commands, membership changes
and the brokers' own requests included, to super users only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import msgpack

from protocol.acl import Action, Decision, Resource, ResourceType, User, UserType, decide
from protocol.codes import ControllerCode, RequestCode
from protocol.remoting import Frame, Scalar

RETRY_PREFIX: Final = "%RETRY%"
DLQ_PREFIX: Final = "%DLQ%"


@dataclass(frozen=True, slots=True)
class Check:
    """``resource`` with any one of ``actions`` allowed."""

    resource: Resource
    actions: tuple[Action, ...]


SUPER_ONLY: Final = None
ANY_USER: Final[tuple[Check, ...]] = ()

Checks = tuple[Check, ...] | None
"""The checks of one request; None (:data:`SUPER_ONLY`): only a super user may send it."""


def topic_resource(topic: str) -> Resource:
    for prefix in (RETRY_PREFIX, DLQ_PREFIX):
        if topic.startswith(prefix):
            return Resource(ResourceType.GROUP, topic[len(prefix) :])
    return Resource(ResourceType.TOPIC, topic)


def _text(header: Mapping[str, Scalar], name: str) -> str:
    value = header.get(name)
    return value if isinstance(value, str) else ""


def _topic(h: Mapping[str, Scalar], *actions: Action) -> Check:
    return Check(topic_resource(_text(h, "topic")), actions)


def _group(name: str, *actions: Action) -> Check:
    return Check(Resource(ResourceType.GROUP, name), actions)


def _body_group(body: bytes | None) -> str:
    try:
        doc = msgpack.unpackb(body or b"", raw=False, strict_map_key=False)
    except Exception:  # the handler answers a malformed body; no group name to check here
        return ""
    value = doc.get("groupName") if isinstance(doc, dict) else None
    return value if isinstance(value, str) else ""


PUB, SUB, GET = Action.PUB, Action.SUB, Action.GET
CREATE, UPDATE, ADMIN = Action.CREATE, Action.UPDATE, Action.ADMIN
DELETE = Action.DELETE

_Rule = Callable[[Mapping[str, Scalar], bytes | None, str], tuple[Check, ...]]
"""(header, body, cluster name) -> the checks."""

_ROUTE: _Rule = lambda h, b, c: (_topic(h, PUB, SUB, GET),)  # noqa: E731
_CREATE_TOPIC: _Rule = lambda h, b, c: (_topic(h, CREATE, UPDATE),)  # noqa: E731
_ANY: _Rule = lambda h, b, c: ANY_USER  # noqa: E731
_DELETE_TOPIC: _Rule = lambda h, b, c: (_topic(h, DELETE),)  # noqa: E731
_DELETE_GROUP: _Rule = lambda h, b, c: (_group(_text(h, "groupName"), DELETE),)  # noqa: E731
_SUB_TOPIC_AND_GROUP: _Rule = lambda h, b, c: (  # noqa: E731
    _topic(h, SUB),
    _group(_text(h, "consumerGroup"), SUB),
)
_SUB_GROUP: _Rule = lambda h, b, c: (_group(_text(h, "consumerGroup"), SUB),)  # noqa: E731
_PUB_TOPIC: _Rule = lambda h, b, c: (_topic(h, PUB),)  # noqa: E731
_SUB_TOPIC: _Rule = lambda h, b, c: (_topic(h, SUB),)  # noqa: E731
_READ_TOPIC: _Rule = lambda h, b, c: (_topic(h, GET, SUB),)  # noqa: E731
_GET_GROUP: _Rule = lambda h, b, c: (_group(_text(h, "consumerGroup"), GET),)  # noqa: E731
_ADMIN_GROUP: _Rule = lambda h, b, c: (  # noqa: E731
    _group(_text(h, "consumerGroup"), UPDATE, ADMIN),
)
_GET_CLUSTER: _Rule = lambda h, b, c: (_cluster(c, GET),)  # noqa: E731


def _cluster(c: str, *actions: Action) -> Check:
    return Check(Resource(ResourceType.CLUSTER, c), actions)


def _heartbeat(h: Mapping[str, Scalar], b: bytes | None, c: str) -> tuple[Check, ...]:
    group = _text(h, "consumerGroup")
    if not group:  # a producer's heartbeat
        return ANY_USER
    return _SUB_TOPIC_AND_GROUP(h, b, c)


def _consume_stats(h: Mapping[str, Scalar], b: bytes | None, c: str) -> tuple[Check, ...]:
    group = _text(h, "consumerGroup")
    return (_group(group, GET),) if group else (_cluster(c, GET),)


_BROKER: Final[dict[int, _Rule]] = {
    RequestCode.SEND_MESSAGE: _PUB_TOPIC,
    RequestCode.SEND_BATCH_MESSAGE: _PUB_TOPIC,
    RequestCode.RECALL_MESSAGE: _PUB_TOPIC,
    RequestCode.PULL_MESSAGE: _SUB_TOPIC_AND_GROUP,
    RequestCode.POP_MESSAGE: _SUB_TOPIC_AND_GROUP,
    RequestCode.QUERY_CONSUMER_OFFSET: _SUB_TOPIC_AND_GROUP,
    RequestCode.UPDATE_CONSUMER_OFFSET: _SUB_TOPIC_AND_GROUP,
    RequestCode.HEART_BEAT: _heartbeat,
    RequestCode.GET_MIN_OFFSET: _SUB_TOPIC,
    RequestCode.GET_MAX_OFFSET: _SUB_TOPIC,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: _SUB_TOPIC,
    RequestCode.ACK_MESSAGE: _SUB_GROUP,
    RequestCode.BATCH_ACK_MESSAGE: _SUB_GROUP,
    RequestCode.CHANGE_MESSAGE_INVISIBLETIME: _SUB_GROUP,
    RequestCode.CONSUMER_SEND_MSG_BACK: lambda h, b, c: (_group(_text(h, "group"), SUB),),
    RequestCode.UNREGISTER_CLIENT: _SUB_GROUP,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: _SUB_GROUP,
    RequestCode.UPDATE_AND_CREATE_TOPIC: _CREATE_TOPIC,
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: lambda h, b, c: (
        _group(_body_group(b), CREATE, UPDATE),
    ),
    RequestCode.RESEND_DLQ_MESSAGES: _ADMIN_GROUP,
    RequestCode.CONSUME_MESSAGE_DIRECTLY: _ADMIN_GROUP,
    RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: lambda h, b, c: (
        _group(_text(h, "group"), UPDATE, ADMIN),
    ),
    RequestCode.QUERY_MESSAGE: _READ_TOPIC,
    RequestCode.QUERY_MESSAGE_BY_TIME: _READ_TOPIC,
    RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG: lambda h, b, c: (_group(_text(h, "group"), GET),),
    RequestCode.GET_CONSUMER_CONNECTION_LIST: _GET_GROUP,
    RequestCode.GET_CONSUME_STATS: _consume_stats,
    RequestCode.QUERY_DLQ_MESSAGES: _GET_GROUP,
    RequestCode.VIEW_MESSAGE_BY_ID: _GET_CLUSTER,
    RequestCode.GET_ALL_TOPIC_CONFIG: _GET_CLUSTER,
    RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: _GET_CLUSTER,
    RequestCode.GET_ALL_CONSUMER_OFFSET: _GET_CLUSTER,
    RequestCode.GET_BROKER_CONFIG: _GET_CLUSTER,
    RequestCode.VIEW_BROKER_STATS_DATA: _GET_CLUSTER,
    RequestCode.GET_PRODUCER_CONNECTION_LIST: lambda h, b, c: (
        _group(_text(h, "producerGroup"), GET),
    ),
    RequestCode.GET_ROUTEINFO_BY_TOPIC: _ROUTE,
    RequestCode.DELETE_TOPIC_IN_BROKER: _DELETE_TOPIC,
    RequestCode.DELETE_SUBSCRIPTIONGROUP: _DELETE_GROUP,
    RequestCode.GET_TOPIC_STATS_INFO: _READ_TOPIC,
    RequestCode.END_TRANSACTION: _ANY,
    RequestCode.GET_BROKER_CLUSTER_INFO: _ANY,
    RequestCode.GET_BROKER_RUNTIME_INFO: _ANY,
    RequestCode.GET_BROKER_EPOCH_CACHE: _ANY,
}

_CONTROLLER: Final[dict[int, _Rule]] = {
    RequestCode.GET_ROUTEINFO_BY_TOPIC: _ROUTE,
    RequestCode.UPDATE_AND_CREATE_TOPIC: _CREATE_TOPIC,
    RequestCode.DELETE_TOPIC_IN_NAMESRV: _DELETE_TOPIC,
    RequestCode.DELETE_SUBSCRIPTIONGROUP: _DELETE_GROUP,
    RequestCode.GET_TOPICS_BY_CLUSTER: _GET_CLUSTER,
    RequestCode.GET_BROKER_CLUSTER_INFO: _ANY,
    RequestCode.CONTROLLER_GET_REPLICA_INFO: _ANY,
    RequestCode.CONTROLLER_GET_METADATA_INFO: _ANY,
    RequestCode.CONTROLLER_GET_SYNC_STATE_DATA: _ANY,
    RequestCode.CONTROLLER_GET_PRODUCER_ID: _ANY,
}

SUPER_ONLY_CONTROLLER_CODES: Final = frozenset(
    {
        RequestCode.CONTROLLER_ELECT_MASTER,
        RequestCode.CLEAN_BROKER_DATA,
        ControllerCode.AUTH_CREATE_USER,
        ControllerCode.AUTH_UPDATE_USER,
        ControllerCode.AUTH_DELETE_USER,
        ControllerCode.AUTH_LIST_USER,
        ControllerCode.AUTH_CREATE_ACL,
        ControllerCode.AUTH_UPDATE_ACL,
        ControllerCode.AUTH_DELETE_ACL,
        ControllerCode.AUTH_LIST_ACL,
        ControllerCode.ADD_CONTROLLER,
        ControllerCode.REMOVE_CONTROLLER,
        ControllerCode.TRANSFER_CONTROLLER_LEADER,
        ControllerCode.REMAP_STATIC_TOPIC,
        ControllerCode.GET_BROKER_TRAFFIC,
        ControllerCode.GET_REBALANCE_PLAN,
    }
)
"""The operator's admin commands on the controllers (documentation and tests; any code absent
from the table is super only anyway)."""


def broker_checks(req: Frame, cluster: str) -> Checks:
    rule = _BROKER.get(req.code)
    return SUPER_ONLY if rule is None else rule(req.header, req.body, cluster)


def controller_checks(req: Frame, cluster: str) -> Checks:
    rule = _CONTROLLER.get(req.code)
    return SUPER_ONLY if rule is None else rule(req.header, req.body, cluster)


def authorize(user: User, checks: Checks, source_ip: str, code: int) -> Decision:
    """May ``user`` send a request that needs ``checks``, from ``source_ip``? Deny wins within
    each action (:func:`protocol.acl.decide`); every check needs one allowed action. A refused
    check of several actions gives its first action's reason and names the others that would
    do (an operator reading "no rule allows pub" for a route lookup should not grant pub when
    get is what they meant)."""
    if user.type is UserType.SUPER:
        return Decision(True, f"{user.username} is a super user")
    if checks is None:
        return Decision(False, f"request {code} needs a super user; {user.username} is not one")
    for check in checks:
        refusal: Decision | None = None
        for act in check.actions:
            decision = decide(user, check.resource, act, source_ip)
            if decision.allowed:
                refusal = None
                break
            refusal = refusal or decision
        if refusal is not None:
            if len(check.actions) > 1:  # say which grants would do, not only the first
                either = ", ".join(a.value for a in check.actions)
                return Decision(False, f"{refusal.reason}; any one of {either} would do")
            return refusal
    return Decision(True, "allowed")


def needed(checks: Sequence[Check]) -> list[str]:
    """The checks as text (``Topic:orders pub``) for documentation and messages."""
    return [
        f"{c.resource.type.value}:{c.resource.name} {'|'.join(a.value for a in c.actions)}"
        for c in checks
    ]
