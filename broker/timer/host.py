"""What the timer service uses of its broker: the one thing it is given (a leaf module), the
:class:`~broker.service_host.ServiceHost` every service gets and what the timer needs besides."""

from __future__ import annotations

from typing import Protocol

from broker.message_service import MessageStoreService
from broker.sealed_queues import SealedQueues
from broker.service_host import ServiceHost

__all__ = ["TimerHost"]


class TimerHost(ServiceHost, Protocol):
    """The store it replays and reads scheduled messages from, the appender its appends go
    through, the write gate its deliveries ask, the sealed queues of static topics (a due
    message of a moved queue is sent on), how far the CommitLog is durable and visible (its
    progress mark waits for both), its figures and its settings."""

    @property
    def sealed(self) -> SealedQueues: ...

    @property
    def service(self) -> MessageStoreService: ...

    def visible_offset(self) -> int | None: ...
