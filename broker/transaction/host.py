"""What the transaction service uses of its broker: the one thing it is given (a leaf module),
the :class:`~broker.service_host.ServiceHost` every service gets and what transactions need
besides."""

from __future__ import annotations

from typing import Protocol

from broker.service_host import ServiceHost
from storage.config_files import TopicConfig, TopicConfigStore

__all__ = ["TransactionHost"]


class TransactionHost(ServiceHost, Protocol):
    """The store it reads halves and ops from, the appender its records go through, the write
    gate its check loop asks (and the role whose epoch its state belongs to), the topics a
    commit's copy lands in, its figures, its settings and its clock."""

    @property
    def topics(self) -> TopicConfigStore: ...

    def ensure_system_topic(self, topic: str) -> TopicConfig: ...

    def create_topic(self, topic: str, queues: int) -> TopicConfig: ...

    def now_ms(self) -> int: ...
