"""What the dead-letter service uses of its broker: the one thing it is given (a leaf module),
the :class:`~broker.service_host.ServiceHost` every service gets and what the DLQ needs
besides."""

from __future__ import annotations

from typing import Protocol

from broker.durable import DurableDone
from broker.service_host import ServiceHost
from protocol.message import MessageRecord
from storage.config_files import DlqResendLedger, TopicConfigStore
from storage.store import PutResult

__all__ = ["DeadLetterHost"]


class DeadLetterHost(ServiceHost, Protocol):
    """The store it reads the DLQ from (up to what consumers may see, and one record by its
    CommitLog offset), the resend ledger, the write gate a resend asks, the topics and the
    appender the copies go through, how a write becomes durable, its figures and its
    settings."""

    @property
    def topics(self) -> TopicConfigStore: ...

    @property
    def dlq_resent(self) -> DlqResendLedger: ...

    def visible_offset(self) -> int | None: ...

    def record_at(self, offset: int) -> MessageRecord | None:
        """:func:`broker.stored_record.visible_record_at` of this broker."""
        ...

    def next_queue(self, topic: str, queues: int) -> int: ...

    def needs_wait(self, result: PutResult) -> bool: ...

    def when_durable(self, result: PutResult, done: DurableDone) -> None: ...
