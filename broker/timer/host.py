"""What the timer service uses of its broker: the one thing it is given (a leaf module).

The composition root (:mod:`broker.compose`) fills it with these parts of the broker's context
and nothing more: the service never holds the context.
"""

from __future__ import annotations

from typing import Protocol

from broker.appender import Appender
from broker.config import BrokerConfig
from broker.message_service import MessageStoreService
from broker.metrics import BrokerMetrics
from broker.sealed_queues import SealedQueues
from broker.write_gate import WriteGate
from storage.store import MessageStore

__all__ = ["TimerHost"]


class TimerHost(Protocol):
    """The store it replays and reads scheduled messages from, the appender its appends go
    through, the write gate its deliveries ask, the sealed queues of static topics (a due
    message of a moved queue is sent on), how far the CommitLog is durable and visible (its
    progress mark waits for both), its figures and its settings."""

    @property
    def cfg(self) -> BrokerConfig: ...

    @property
    def store(self) -> MessageStore: ...

    @property
    def appender(self) -> Appender: ...

    @property
    def gate(self) -> WriteGate: ...

    @property
    def sealed(self) -> SealedQueues: ...

    @property
    def service(self) -> MessageStoreService: ...

    @property
    def metrics(self) -> BrokerMetrics: ...

    def visible_offset(self) -> int | None: ...
