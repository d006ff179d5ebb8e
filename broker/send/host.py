"""What the send service uses of its broker: the one thing it is given (a leaf module).

The composition root (:mod:`broker.compose`) fills it with these parts of the broker's context
and the timer and transaction services' entry points, nothing more: the service never holds the
context, and imports neither of the other services.
"""

from __future__ import annotations

from typing import Protocol

from broker.appender import Appender
from broker.config import BrokerConfig
from broker.durable import DurableDone
from broker.metrics import BrokerMetrics
from broker.sealed_queues import SealedQueues
from broker.write_gate import WriteGate
from protocol.message import Message
from storage.config_files import TopicConfig, TopicConfigStore
from storage.store import MessageStore, PutResult

__all__ = ["SendHost"]


class SendHost(Protocol):
    """The write gate every send asks first, the topics it lands in (created on the fly with
    ``auto_create_topic``), the sealed queues of static topics, the appender, the timer's and
    the transaction service's ways in (a send with a delivery time, a half message), how a
    write becomes durable, its figures and its settings; the store and a system topic for the
    idempotent producers' state and its snapshots."""

    @property
    def cfg(self) -> BrokerConfig: ...

    @property
    def gate(self) -> WriteGate: ...

    @property
    def topics(self) -> TopicConfigStore: ...

    @property
    def sealed(self) -> SealedQueues: ...

    @property
    def appender(self) -> Appender: ...

    @property
    def store(self) -> MessageStore:
        """Read to rebuild the idempotent producers' state (docs/idempotence.md)."""
        ...

    def ensure_system_topic(self, topic: str) -> TopicConfig: ...

    @property
    def metrics(self) -> BrokerMetrics: ...

    def create_topic(self, topic: str, queues: int) -> TopicConfig: ...

    def next_queue(self, topic: str, queues: int) -> int: ...

    def put_scheduled_send(
        self, topic: str, queue_id: int, messages: list[Message]
    ) -> PutResult | None:
        """:meth:`broker.timer.service.TimerService.put_send`."""
        ...

    def put_half(self, topic: str, queue_id: int, msg: Message) -> PutResult:
        """:meth:`broker.transaction.service.TransactionService.put_half`."""
        ...

    def needs_wait(self, result: PutResult) -> bool: ...

    def when_durable(self, result: PutResult, done: DurableDone) -> None: ...
