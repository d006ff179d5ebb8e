"""The broker's one append operation: every write to the CommitLog goes through :class:`Appender`.

A producer's messages (a send, a batch; the coming timer, retry and POP writers alike) go in
with :meth:`Appender.put`; a slave replaying its master's CommitLog bytes uses
:meth:`Appender.append_replicated`. After every append the HA master is told (it wakes idle
slave streams; a no-op unless this broker is master). A put also wakes the pulls parked on its
queue and counts the topic's traffic. Replicated bytes wake no pull: on a slave consumers see
them only once the confirm offset covers them, and the confirm listener wakes the pulls then.

Errors are the store's (:class:`~storage.errors.StoreError` and its kinds), raised having
stored nothing; no step after the store runs then. A put to the name of a topic deleted here
(``rmqctl deleteTopic``) that no one created again raises :class:`TopicDeletedError` (a
scheduled message or a transaction's commit due to it is not stored: the topic is gone).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from broker.long_polling import PullWaiters
from broker.metrics import BrokerMetrics
from protocol.message import Message
from storage.config_files import TopicConfigStore
from storage.errors import StoreError
from storage.store import MessageStore, PutResult

if TYPE_CHECKING:
    from broker.ha.service import HAService

__all__ = ["Appender", "TopicDeletedError"]


class TopicDeletedError(StoreError):
    """A put to a deleted topic (:meth:`storage.store.MessageStore.was_retired`, no config)."""


class Appender:
    """Stores, then notifies HA, wakes pull waiters and counts metrics; loop thread only."""

    __slots__ = (
        "_metrics",
        "_store",
        "_topics",
        "_waiters",
        "ha",
        "put_listeners",
        "replicated_listeners",
    )

    def __init__(
        self,
        store: MessageStore,
        waiters: PullWaiters,
        metrics: BrokerMetrics,
        topics: TopicConfigStore | None = None,
    ) -> None:
        self._store = store
        self._topics = topics
        self._waiters = waiters
        self._metrics = metrics
        self.ha: HAService | None = None
        """The HA service to tell of every append (controller mode), set once at start-up."""
        self.replicated_listeners: list[Callable[[int, bytes | memoryview], None]] = []
        """Called with (offset, bytes) after each replicated append (the timer indexes them)."""
        self.put_listeners: list[Callable[[str, int, Sequence[Message], PutResult], None]] = []
        """Called with (topic, queue id, messages, result) after each put; they must not raise
        (the message trace, :mod:`broker.trace`)."""

    def put(
        self, topic: str, queue_id: int, messages: Sequence[Message], body_bytes: int
    ) -> PutResult:
        """Append ``messages`` (``body_bytes``: their bodies' total size) to one queue with one
        CommitLog append, stamped now; returns where they went."""
        topics = self._topics
        if topics is not None and topics.get(topic) is None and self._store.was_retired(topic):
            raise TopicDeletedError(f"topic {topic} was deleted")
        result = self._store.put(topic, queue_id, messages, time.time_ns() // 1_000_000)
        self._waiters.notify(topic, queue_id)
        if self.ha is not None:
            self.ha.notify_appended()
        counts = self._metrics.topic(topic)
        counts.messages_in += result.count
        queues = counts.queues_in
        queues[queue_id] = queues.get(queue_id, 0) + result.count
        counts.bytes_in += body_bytes
        self._metrics.traffic.moved.add(topic)  # the traffic report's next sample reads it
        for listener in self.put_listeners:
            listener(topic, queue_id, messages, result)
        return result

    def append_replicated(self, offset: int, data: bytes | memoryview) -> int:
        """Append CommitLog bytes as the master wrote them at ``offset`` (the store's max
        offset; see :meth:`~storage.store.MessageStore.append_raw`); returns the new max
        offset. A view of the received chunk is copied once, here, for the store and the
        listeners alike (each copied it before)."""
        raw = data if isinstance(data, bytes) else bytes(data)
        end = self._store.append_raw(offset, raw)
        if self.ha is not None:
            self.ha.notify_appended()
        for listener in self.replicated_listeners:
            listener(offset, raw)
        return end
