"""What every service the composition root builds is given of its broker (a leaf module).

:mod:`broker.compose` fills each service's host (``PopHost``, ``TimerHost``,
``TransactionHost``: this Protocol and what that service needs besides) with these parts of the
broker's context and nothing more: the service never holds the context.
"""

from __future__ import annotations

from typing import Protocol

from broker.appender import Appender
from broker.config import BrokerConfig
from broker.metrics import BrokerMetrics
from broker.write_gate import WriteGate
from storage.store import MessageStore

__all__ = ["ServiceHost"]


class ServiceHost(Protocol):
    """The store it reads, the appender its records go through, the write gate it asks before
    writing, its figures and its settings."""

    @property
    def cfg(self) -> BrokerConfig: ...

    @property
    def store(self) -> MessageStore: ...

    @property
    def appender(self) -> Appender: ...

    @property
    def gate(self) -> WriteGate: ...

    @property
    def metrics(self) -> BrokerMetrics: ...
