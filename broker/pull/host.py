"""What the pull service uses of its broker: the one thing it is given (a leaf module).

The composition root (:mod:`broker.compose`) fills it with these parts of the broker's context
and nothing more: the service never holds the context.
"""

from __future__ import annotations

from typing import Protocol

from broker.cold_reads import ColdReads
from broker.config import BrokerConfig
from broker.long_polling import PullWaiters
from broker.metrics import BrokerMetrics
from broker.offset_resets import PendingResets
from storage.config_files import ConsumerOffsetStore, TopicConfigStore
from storage.store import MessageStore

__all__ = ["PullHost"]


class PullHost(Protocol):
    """The store it reads queues from, the topics it checks a pull against, the consumer
    offsets a classic pull may commit first, the waiters its long polls park on, how far
    consumers may read, its figures, its settings (the pull limits), its clock and the
    broker's cold reads (records not in the page cache, loaded off the loop first)."""

    @property
    def cold_reads(self) -> ColdReads: ...

    @property
    def cfg(self) -> BrokerConfig: ...

    @property
    def store(self) -> MessageStore: ...

    @property
    def topics(self) -> TopicConfigStore: ...

    @property
    def offsets(self) -> ConsumerOffsetStore: ...

    @property
    def waiters(self) -> PullWaiters: ...

    @property
    def offset_resets(self) -> PendingResets: ...

    @property
    def metrics(self) -> BrokerMetrics: ...

    def visible_offset(self) -> int | None: ...

    def now_ms(self) -> int: ...
