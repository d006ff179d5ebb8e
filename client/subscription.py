"""A consumer's subscriptions: each topic a group member reads (its topic and the group's retry
topic), with the queues it owns of it; shared by the parts of :class:`client.consumer.Consumer`."""

from __future__ import annotations

from client.brokers import MasterCaller
from client.message import ReceivedMessage
from client.pull import Puller, QueueState
from client.routes import LOGICAL_BROKER, MessageQueue


class Subscription:
    """One topic the member reads: its route, its pulls and the queues it owns of it."""

    __slots__ = ("caller", "owned", "puller", "topic")

    def __init__(self, topic: str, caller: MasterCaller, puller: Puller) -> None:
        self.topic = topic
        self.caller = caller
        self.puller = puller
        self.owned: dict[MessageQueue, QueueState] = {}


def queue_of(msg: ReceivedMessage) -> MessageQueue:
    """The queue a message was read from as the consumer owns it (a static topic's logical
    queue, or its physical queue)."""
    if msg.logical_queue is not None:
        return MessageQueue(LOGICAL_BROKER, msg.logical_queue)
    return MessageQueue(msg.broker_name, msg.queue_id)


def queue_name(mq: MessageQueue) -> str:
    return f"{mq.broker_name}/{mq.queue_id}"
