"""What each gRPC call needs (broker/grpc/permissions.py), and Settings in a namespace refused
(broker/grpc/translate.py): pure code."""

from __future__ import annotations

from typing import Any

import pytest

from broker.grpc.permissions import METHODS, rpc_checks, settings_checks
from broker.grpc.translate import Refused, no_namespace_in_settings
from protocol.request_permissions import needed
from protocol.rocketmq_v2 import definition_pb2 as pb
from protocol.rocketmq_v2 import service_pb2 as rpc

A, G = pb.Resource(name="A"), pb.Resource(name="g")
CONSUMER = ["Topic:A sub", "Group:g sub"]


def _message(topic: str) -> pb.Message:
    return pb.Message(topic=pb.Resource(name=topic), body=b"x")


@pytest.mark.parametrize(
    ("method", "request_", "wanted"),
    [
        ("SendMessage", rpc.SendMessageRequest(messages=[_message("B"), _message("A"),
                                                         _message("B")]),
         ["Topic:A pub", "Topic:B pub"]),
        ("RecallMessage", rpc.RecallMessageRequest(topic=A), ["Topic:A pub"]),
        ("EndTransaction", rpc.EndTransactionRequest(topic=A), ["Topic:A pub"]),
        ("ReceiveMessage",
         rpc.ReceiveMessageRequest(group=G, message_queue=pb.MessageQueue(topic=A)), CONSUMER),
        ("AckMessage", rpc.AckMessageRequest(group=G, topic=A), CONSUMER),
        ("ChangeInvisibleDuration", rpc.ChangeInvisibleDurationRequest(group=G, topic=A),
         CONSUMER),
        ("ForwardMessageToDeadLetterQueue",
         rpc.ForwardMessageToDeadLetterQueueRequest(group=G, topic=A), CONSUMER),
        ("QueryAssignment", rpc.QueryAssignmentRequest(group=G, topic=A), CONSUMER),
        ("PullMessage",
         rpc.PullMessageRequest(group=G, message_queue=pb.MessageQueue(topic=A)), CONSUMER),
        ("UpdateOffset",
         rpc.UpdateOffsetRequest(group=G, message_queue=pb.MessageQueue(topic=A)), CONSUMER),
        ("GetOffset",
         rpc.GetOffsetRequest(group=G, message_queue=pb.MessageQueue(topic=A)), CONSUMER),
        ("QueryOffset", rpc.QueryOffsetRequest(message_queue=pb.MessageQueue(topic=A)),
         ["Topic:A sub"]),
        ("Heartbeat", rpc.HeartbeatRequest(client_type=pb.PULL_CONSUMER, group=G),
         ["Group:g sub"]),
        # A retry topic is its group's.
        ("AckMessage", rpc.AckMessageRequest(group=G, topic=pb.Resource(name="%RETRY%g")),
         ["Group:g sub", "Group:g sub"]),
        ("Heartbeat", rpc.HeartbeatRequest(client_type=pb.SIMPLE_CONSUMER, group=G),
         ["Group:g sub"]),
        ("Heartbeat", rpc.HeartbeatRequest(client_type=pb.PRODUCER), []),
        ("NotifyClientTermination", rpc.NotifyClientTerminationRequest(group=G), ["Group:g sub"]),
        ("NotifyClientTermination", rpc.NotifyClientTerminationRequest(), []),
        ("QueryRoute", rpc.QueryRouteRequest(topic=A), []),
        ("Telemetry", None, []),
    ],
)  # fmt: skip
def test_each_rpc_needs_what_its_remoting_requests_need(
    method: str, request_: Any, wanted: list[str]
) -> None:
    assert needed(rpc_checks(method, request_)) == wanted


def test_every_served_rpc_has_a_rule() -> None:
    from broker.grpc.service import MessagingService

    served = {
        name
        for name in vars(MessagingService)
        if name[0].isupper() and callable(getattr(MessagingService, name))
    }
    assert served == METHODS
    with pytest.raises(KeyError):
        rpc_checks("SyncLiteSubscription", None)


def test_settings_need_pub_on_published_topics_and_sub_on_the_subscription() -> None:
    producer = pb.Settings(publishing=pb.Publishing(topics=[pb.Resource(name="B"), A]))
    assert needed(settings_checks(producer)) == ["Topic:A pub", "Topic:B pub"]
    consumer = pb.Settings(
        subscription=pb.Subscription(group=G, subscriptions=[pb.SubscriptionEntry(topic=A)])
    )
    assert needed(settings_checks(consumer)) == CONSUMER
    assert settings_checks(pb.Settings()) == ()


@pytest.mark.parametrize(
    "settings",
    [
        pb.Settings(publishing=pb.Publishing(topics=[A, pb.Resource(name="B",
                                                                   resource_namespace="p")])),
        pb.Settings(subscription=pb.Subscription(group=pb.Resource(name="g",
                                                                   resource_namespace="p"))),
        pb.Settings(subscription=pb.Subscription(group=G, subscriptions=[
            pb.SubscriptionEntry(topic=pb.Resource(name="A", resource_namespace="p"))])),
    ],
)  # fmt: skip
def test_settings_naming_a_namespace_are_refused(settings: pb.Settings) -> None:
    with pytest.raises(Refused) as info:
        no_namespace_in_settings(settings)
    assert info.value.code == pb.UNSUPPORTED and "namespace 'p'" in info.value.message
    no_namespace_in_settings(pb.Settings(publishing=pb.Publishing(topics=[A])))
