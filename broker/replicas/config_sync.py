"""A slave copies its master's topic config, consumer offsets, subscription groups and DLQ
resend ledger (every ``slave_config_sync_interval_ms``), so a new master serves the same
topics, groups resume near where they were and retry with the same settings."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import msgpack
import structlog

from broker.config import BrokerConfig
from broker.context import BrokerContext
from protocol.codes import RequestCode
from protocol.pull import AllConsumerOffsetsQuery
from protocol.remoting import Frame
from protocol.retry import RetryConfigError, config_from_dict
from remoting.client import ConnectionPool
from remoting.errors import RemotingError
from storage.errors import StoreError

log = structlog.get_logger(__name__)


class SlaveConfigSync:
    """``topics_changed`` is called when a topic was added or resized from the master's."""

    def __init__(
        self,
        cfg: BrokerConfig,
        ctx: BrokerContext,
        pool: ConnectionPool,
        topics_changed: Callable[[], None],
    ) -> None:
        self.cfg = cfg
        self.ctx = ctx
        self.pool = pool
        self._topics_changed = topics_changed

    async def run(self) -> None:
        interval = self.cfg.slave_config_sync_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            role = self.ctx.role
            if role.is_master or not role.master_address:
                continue
            try:
                conn = await self.pool.get(role.master_address)
                topics = await conn.call(RequestCode.GET_ALL_TOPIC_CONFIG, timeout=3.0)
                every = AllConsumerOffsetsQuery(with_times=True)
                offsets = await conn.call(every.code, every.encode()[0], timeout=3.0)
            except RemotingError:
                continue
            if self._copy_topics(topics):
                # Register at once: should the master die now, the controllers' routes still
                # list the topic on this group through the slaves.
                self._topics_changed()
            try:
                self._copy_offsets(offsets)
            except (AttributeError, TypeError, ValueError) as exc:  # a malformed table
                log.warning("master's consumer offsets unreadable", error=str(exc))
            try:
                groups = await conn.call(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, timeout=3.0)
            except RemotingError:  # gone meanwhile, or a master from before the request existed
                continue
            self._copy_subscription_groups(groups)

    def _copy_topics(self, answer: Frame) -> bool:
        """Take the master's topics' queue counts; True when one was added or resized."""
        changed = False
        for name, doc in (msgpack.unpackb(answer.body or b"\x80") or {}).items():
            current = self.ctx.topics.get(name)
            queues = int(doc.get("queues", 0))
            if queues and (current is None or current.queues != queues):
                self.ctx.topics.update(name, queues)
                changed = True
        return changed

    def _copy_offsets(self, answer: Frame) -> None:
        """Take the master's consumer offsets and their last consume times (a master that does
        not send times, ``withTimes`` absent, leaves this slave's times as they are)."""
        doc = msgpack.unpackb(answer.body or b"\x80", strict_map_key=False) or {}
        if answer.header.get("withTimes") is True:
            table, times = doc.get("offsets") or {}, doc.get("lastConsumeMs") or {}
        else:
            table, times = doc, {}
        for group, by_topic in table.items():
            for topic, by_queue in by_topic.items():
                topic_times = times.get(group, {}).get(topic, {})
                for queue_id, offset in by_queue.items():
                    at = topic_times.get(queue_id)
                    self.ctx.offsets.commit(
                        group, topic, int(queue_id), int(offset), None if at is None else int(at)
                    )

    def _copy_subscription_groups(self, frame: Frame) -> None:
        """Store the master's subscription groups and resend marks (a bad entry is logged and
        skipped: the master checked it, so it means a version mismatch, not input to trust)."""
        try:
            doc = msgpack.unpackb(frame.body or b"\x80", raw=False)
            table = doc.get("subscriptionGroupTable") or {}
            resent = doc.get("dlqResent") or {}
            for entry in table.values():
                self.ctx.sub_groups.put(config_from_dict(entry))
            self.ctx.dlq_resent.merge(resent)
        except (RetryConfigError, StoreError, ValueError, TypeError, AttributeError) as exc:
            log.error("copying the master's subscription groups failed", error=str(exc))
