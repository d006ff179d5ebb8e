"""What the POP service uses of its broker: the one thing it is given (a leaf module), the
:class:`~broker.service_host.ServiceHost` every service gets and what POP needs besides."""

from __future__ import annotations

from typing import Protocol

from broker.cold_reads import ColdReads
from broker.long_polling import PullWaiters
from broker.service_host import ServiceHost
from storage.config_files import (
    ConsumerOffsetStore,
    SubscriptionGroupStore,
    TopicConfig,
    TopicConfigStore,
)

__all__ = ["PopHost"]


class PopHost(ServiceHost, Protocol):
    """The store it reads queues and the revive log from, the appender its records go through,
    the write gate its revive loop asks (and the role whose epoch its state belongs to), the
    topics, consumer groups and offsets it reads and moves, the waiters it wakes, how far
    consumers may read, its figures, its settings, its clock and the broker's cold reads."""

    @property
    def cold_reads(self) -> ColdReads: ...

    @property
    def topics(self) -> TopicConfigStore: ...

    @property
    def sub_groups(self) -> SubscriptionGroupStore: ...

    @property
    def offsets(self) -> ConsumerOffsetStore: ...

    @property
    def waiters(self) -> PullWaiters: ...

    def ensure_system_topic(self, topic: str) -> TopicConfig: ...

    def visible_offset(self) -> int | None: ...

    def now_ms(self) -> int: ...
