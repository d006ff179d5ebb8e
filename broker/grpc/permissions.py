"""Which permission each gRPC call needs: the protocol's RPCs mapped onto the checks of
:mod:`protocol.request_permissions` (pure code, no I/O).

- pub on the topic: SendMessage (every message's topic), RecallMessage, EndTransaction;
- sub on the topic and on the group: ReceiveMessage, AckMessage, ChangeInvisibleDuration,
  ForwardMessageToDeadLetterQueue, QueryAssignment, PullMessage, UpdateOffset, GetOffset (as
  remoting's PULL_MESSAGE and QUERY/UPDATE_CONSUMER_OFFSET);
- sub on the topic: QueryOffset (as GET_MIN/MAX_OFFSET and SEARCH_OFFSET_BY_TIMESTAMP);
- sub on the group: a consumer's (push, simple or pull) Heartbeat and NotifyClientTermination
  (what remoting's HEART_BEAT and UNREGISTER_CLIENT of a consumer need; a producer's need
  nothing more);
- any known user: QueryRoute, a producer's Heartbeat, the opening of a Telemetry stream (as
  remoting treats metadata reads).

The Settings a client writes on its Telemetry stream are checked as well
(:func:`settings_checks`): the topics it publishes need pub (a producer of a topic is sent the
transactions of that topic left open, half messages included), the group it subscribes with and
its topics need sub.

Topics named ``%RETRY%<group>`` or ``%DLQ%<group>`` are the group's, as on remoting.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Final

from protocol.acl import Action, Resource, ResourceType
from protocol.request_permissions import ANY_USER, Check, topic_resource
from protocol.rocketmq_v2 import definition_pb2 as pb

PUB, SUB = Action.PUB, Action.SUB


def _topics(names: Iterable[str], act: Action) -> tuple[Check, ...]:
    return tuple(Check(topic_resource(name), (act,)) for name in sorted(set(names)))


def _group(name: str) -> Check:
    return Check(Resource(ResourceType.GROUP, name), (SUB,))


def _consumer(topic: pb.Resource, group: pb.Resource) -> tuple[Check, ...]:
    return (Check(topic_resource(topic.name), (SUB,)), _group(group.name))


_CONSUMER_TYPES: Final = frozenset({pb.PUSH_CONSUMER, pb.SIMPLE_CONSUMER, pb.PULL_CONSUMER})

_RULES: Final[dict[str, Callable[[Any], tuple[Check, ...]]]] = {
    "SendMessage": lambda r: _topics((m.topic.name for m in r.messages), PUB),
    "RecallMessage": lambda r: _topics((r.topic.name,), PUB),
    "EndTransaction": lambda r: _topics((r.topic.name,), PUB),
    "ReceiveMessage": lambda r: _consumer(r.message_queue.topic, r.group),
    "AckMessage": lambda r: _consumer(r.topic, r.group),
    "ChangeInvisibleDuration": lambda r: _consumer(r.topic, r.group),
    "ForwardMessageToDeadLetterQueue": lambda r: _consumer(r.topic, r.group),
    "QueryAssignment": lambda r: _consumer(r.topic, r.group),
    "PullMessage": lambda r: _consumer(r.message_queue.topic, r.group),
    "UpdateOffset": lambda r: _consumer(r.message_queue.topic, r.group),
    "GetOffset": lambda r: _consumer(r.message_queue.topic, r.group),
    "QueryOffset": lambda r: _topics((r.message_queue.topic.name,), SUB),
    "Heartbeat": lambda r: (_group(r.group.name),) if r.client_type in _CONSUMER_TYPES else (),
    "NotifyClientTermination": lambda r: (_group(r.group.name),) if r.group.name else (),
    "QueryRoute": lambda r: ANY_USER,
    "Telemetry": lambda r: ANY_USER,
}

METHODS: Final = frozenset(_RULES)


def rpc_checks(method: str, request: Any) -> tuple[Check, ...]:
    """The checks of one call of ``method`` (a MessagingService RPC name) with ``request``
    (None for Telemetry: its opening carries no request). KeyError for another method."""
    return _RULES[method](request)


def settings_checks(settings: pb.Settings) -> tuple[Check, ...]:
    """The checks of the Settings a client writes on its Telemetry stream."""
    if settings.HasField("publishing"):
        return _topics((t.name for t in settings.publishing.topics), PUB)
    if settings.HasField("subscription"):
        sub = settings.subscription
        topics = _topics((e.topic.name for e in sub.subscriptions), SUB)
        return (*topics, _group(sub.group.name))
    return ANY_USER
