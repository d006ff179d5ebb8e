"""What the POP service uses of its broker: the one thing it is given (a leaf module).

The composition root (:mod:`broker.compose`) fills it with these parts of the broker's context
and nothing more: the service never holds the context.
"""

from __future__ import annotations

from typing import Protocol

from broker.appender import Appender
from broker.config import BrokerConfig
from broker.long_polling import PullWaiters
from broker.metrics import BrokerMetrics
from broker.write_gate import WriteGate
from storage.config_files import (
    ConsumerOffsetStore,
    SubscriptionGroupStore,
    TopicConfig,
    TopicConfigStore,
)
from storage.store import MessageStore

__all__ = ["PopHost"]


class PopHost(Protocol):
    """The store it reads queues and the revive log from, the appender its records go through,
    the write gate its revive loop asks (and the role whose epoch its state belongs to), the
    topics, consumer groups and offsets it reads and moves, the waiters it wakes, how far
    consumers may read, its figures, its settings and its clock."""

    @property
    def cfg(self) -> BrokerConfig: ...

    @property
    def store(self) -> MessageStore: ...

    @property
    def appender(self) -> Appender: ...

    @property
    def gate(self) -> WriteGate: ...

    @property
    def topics(self) -> TopicConfigStore: ...

    @property
    def sub_groups(self) -> SubscriptionGroupStore: ...

    @property
    def offsets(self) -> ConsumerOffsetStore: ...

    @property
    def waiters(self) -> PullWaiters: ...

    @property
    def metrics(self) -> BrokerMetrics: ...

    def ensure_system_topic(self, topic: str) -> TopicConfig: ...

    def visible_offset(self) -> int | None: ...

    def now_ms(self) -> int: ...
