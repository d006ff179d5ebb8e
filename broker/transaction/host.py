"""What the transaction service uses of its broker: the one thing it is given (a leaf module).

The composition root (:mod:`broker.compose`) fills it with these parts of the broker's context
and nothing more: the service never holds the context.
"""

from __future__ import annotations

from typing import Protocol

from broker.appender import Appender
from broker.config import BrokerConfig
from broker.metrics import BrokerMetrics
from broker.write_gate import WriteGate
from storage.config_files import TopicConfig, TopicConfigStore
from storage.store import MessageStore

__all__ = ["TransactionHost"]


class TransactionHost(Protocol):
    """The store it reads halves and ops from, the appender its records go through, the write
    gate its check loop asks (and the role whose epoch its state belongs to), the topics a
    commit's copy lands in, its figures, its settings and its clock."""

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
    def metrics(self) -> BrokerMetrics: ...

    def ensure_system_topic(self, topic: str) -> TopicConfig: ...

    def create_topic(self, topic: str, queues: int) -> TopicConfig: ...

    def now_ms(self) -> int: ...
