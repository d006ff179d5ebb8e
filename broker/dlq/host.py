"""What the dead-letter service uses of its broker: the one thing it is given (a leaf module).

The composition root (:mod:`broker.compose`) fills it with these parts of the broker's context
and nothing more: the service never holds the context.
"""

from __future__ import annotations

from typing import Protocol

from broker.appender import Appender
from broker.config import BrokerConfig
from broker.durable import DurableDone
from broker.metrics import BrokerMetrics
from broker.write_gate import WriteGate
from protocol.message import MessageRecord
from storage.config_files import DlqResendLedger, TopicConfigStore
from storage.store import MessageStore, PutResult

__all__ = ["DeadLetterHost"]


class DeadLetterHost(Protocol):
    """The store it reads the DLQ from (up to what consumers may see, and one record by its
    CommitLog offset), the resend ledger, the write gate a resend asks, the topics and the
    appender the copies go through, how a write becomes durable, its figures and its
    settings."""

    @property
    def cfg(self) -> BrokerConfig: ...

    @property
    def store(self) -> MessageStore: ...

    @property
    def topics(self) -> TopicConfigStore: ...

    @property
    def gate(self) -> WriteGate: ...

    @property
    def appender(self) -> Appender: ...

    @property
    def dlq_resent(self) -> DlqResendLedger: ...

    @property
    def metrics(self) -> BrokerMetrics: ...

    def visible_offset(self) -> int | None: ...

    def record_at(self, offset: int) -> MessageRecord | None:
        """:func:`broker.stored_record.visible_record_at` of this broker."""
        ...

    def next_queue(self, topic: str, queues: int) -> int: ...

    def needs_wait(self, result: PutResult) -> bool: ...

    def when_durable(self, result: PutResult, done: DurableDone) -> None: ...
