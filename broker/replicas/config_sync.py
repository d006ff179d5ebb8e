"""A slave copies its master's topic config, consumer offsets, subscription groups and DLQ
resend ledger (every ``slave_config_sync_interval_ms``), so a new master serves the same
topics, groups resume near where they were and retry with the same settings. A topic or group
deleted here while the master's answer was on its way is not taken from it (the answer may
predate the delete: ``BrokerContext.deletions``).

The offsets are copied whole once from a master (at each change of master or its epoch), then
only the groups changed since the counter the master's last answer gave, with the groups and
topics deleted since (:mod:`storage.offset_changes`); a master restarted meanwhile, or one that
no longer remembers that far back, answers the whole table again. The topic table likewise: once
copied whole, the slave asks from the version the master's answer gave, and a master whose table
is still that one answers ``unchanged`` without it (another master, a master restarted, or a
change of this slave's own table asks for the whole table again)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

from broker.config import BrokerConfig
from broker.context import BrokerContext
from protocol.broker_requests.admin import AllTopicsQuery, TopicTable
from protocol.broker_requests.subscription_groups import (
    AllSubscriptionGroupsQuery,
    SubscriptionGroupTable,
)
from protocol.fields import FieldError
from protocol.pull import AllConsumerOffsetsQuery, ConsumerOffsetTable
from protocol.remoting import Frame
from protocol.retry import RetryConfigError, config_from_dict
from protocol.topic_attrs import TopicAttrs
from remoting.client import ConnectionPool
from remoting.errors import RemotingError
from storage.errors import StoreError

_DEFAULT_ATTRS = TopicAttrs()
_OFFSET_PAGES = 64
"""Pages of changed consumer offsets a slave asks for in one round at most (the rest waits for
the next round): a master that changes faster than it is copied does not keep the copy going."""

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
        self._offsets_since: tuple[tuple[str, int], str, int] | None = None
        """(master address and epoch, the master's offset table incarnation, its counter) of
        the last offset copy taken whole: the next asks only for what changed since."""
        self._topics_since: tuple[tuple[str, int], str, int, int] | None = None
        """(master address and epoch, the master's topic table incarnation and version, this
        broker's topic table version after the copy) of the last topic table copied whole:
        while neither table moved since, the master answers ``unchanged`` (issue 34: it sent,
        and this slave parsed and compared, every topic every second)."""

    async def run(self) -> None:
        interval = self.cfg.slave_config_sync_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            role = self.ctx.role
            if role.is_master or not role.master_address:
                continue
            mark = self.ctx.deletions.count
            try:
                conn = await self.pool.get(role.master_address)
                master = (role.master_address, role.master_epoch)
                every_topic = self._topics_query(master)
                topics = await conn.call(every_topic.code, *every_topic.encode(), timeout=3.0)
                since = self._offsets_since
                if since is None or since[0] != master:  # another master: copy it whole
                    since = None
                every_offset = AllConsumerOffsetsQuery(
                    with_times=True,
                    since_incarnation=None if since is None else since[1],
                    since_counter=None if since is None else since[2],
                )
                offsets = await conn.call(every_offset.code, *every_offset.encode(), timeout=3.0)
            except RemotingError:
                continue
            try:
                topics_changed = self._take_topics(
                    TopicTable.parse(topics.header, topics.body), master, mark
                )
            except FieldError as exc:  # a malformed table: nothing taken from it
                log.warning("master's topic table unreadable", error=str(exc))
                self._topics_since = None
                topics_changed = False
            if topics_changed:
                # Register at once: should the master die now, the controllers' routes still
                # list the topic on this group through the slaves.
                self._topics_changed()
            more, pages = self._take_offsets(offsets, since, master, mark), 1
            while more and pages < _OFFSET_PAGES and self._offsets_since is not None:
                # The master answers the changes a page at a time: the rest at once.
                since = self._offsets_since
                page = AllConsumerOffsetsQuery(
                    with_times=True, since_incarnation=since[1], since_counter=since[2]
                )
                try:
                    offsets = await conn.call(page.code, *page.encode(), timeout=3.0)
                except RemotingError:
                    break
                more, pages = self._take_offsets(offsets, since, master, mark), pages + 1
            try:
                every_group = AllSubscriptionGroupsQuery()
                groups = await conn.call(every_group.code, *every_group.encode(), timeout=3.0)
            except RemotingError:  # gone meanwhile, or a master from before the request existed
                continue
            self._copy_subscription_groups(groups, mark)

    def _take_offsets(
        self,
        frame: Frame,
        since: tuple[tuple[str, int], str, int] | None,
        master: tuple[str, int],
        mark: int,
    ) -> bool:
        """Copy one answer to GET_ALL_CONSUMER_OFFSET asked from ``since`` (None: the whole
        table) and note where the next ask starts; True when the master has more changes."""
        try:
            table = ConsumerOffsetTable.parse(frame.header, frame.body)
            if table.delta and since is None:
                raise FieldError("a delta answer to an ask for the whole table")
        except FieldError as exc:  # a malformed table: nothing taken from it
            log.warning("master's consumer offsets unreadable", error=str(exc))
            return False
        whole = self._copy_offsets(table, mark)
        incarnation, counter = table.incarnation, table.counter
        # Asked again from where this copy stands, unless a name deleted here meanwhile was
        # skipped (the next answer brings it back then, as a whole copy would).
        self._offsets_since = (
            (master, incarnation, counter)
            if whole and incarnation is not None and counter is not None
            else None
        )
        return table.more

    def _topics_query(self, master: tuple[str, int]) -> AllTopicsQuery:
        """The whole table, or only whether it moved since the last copy taken whole from this
        master (and this broker's own table did not move since: a topic deleted or adopted
        here is taken again from the master's, as every round did before)."""
        since = self._topics_since
        if since is None or since[0] != master or since[3] != self.ctx.topics.version:
            return AllTopicsQuery()
        return AllTopicsQuery(since_incarnation=since[1], since_version=since[2])

    def _take_topics(self, table: TopicTable, master: tuple[str, int], mark: int) -> bool:
        """Copy one answer to GET_ALL_TOPIC_CONFIG and note what the next ask may start from;
        True when a topic was added or resized."""
        if table.unchanged:
            since = self._topics_since
            if since is not None and since[:3] == (master, table.incarnation, table.version):
                return False
            self._topics_since = None  # not what was asked: ask for the whole table next
            return False
        changed, whole = self._copy_topics(table, mark)
        self._topics_since = (
            (master, table.incarnation, table.version, self.ctx.topics.version)
            if whole and table.incarnation is not None and table.version is not None
            else None
        )
        return changed

    def _copy_topics(self, table: TopicTable, mark: int) -> tuple[bool, bool]:
        """Take the master's topics' queue counts: (one was added or resized, none was skipped
        as deleted here meanwhile)."""
        changed, whole = False, True
        deletions = self.ctx.deletions
        for name, queues in table.queues.items():
            if deletions.topic_since(name, mark):
                whole = False
                continue
            current = self.ctx.topics.get(name)
            attrs = table.attrs.get(name, _DEFAULT_ATTRS)
            if queues and (current is None or (current.queues, current.attrs) != (queues, attrs)):
                self.ctx.topics.update(name, queues, attrs)
                changed = True
        return changed, whole

    def _copy_offsets(self, table: ConsumerOffsetTable, mark: int) -> bool:
        """Take the master's consumer offsets and their last consume times (a master that does
        not send times, ``withTimes`` absent, leaves this slave's times as they are). A delta
        first deletes what the master deleted since the asked counter; then each group it holds
        is merged as a whole table's is. False when a name deleted here was skipped."""
        offsets = self.ctx.offsets
        if table.delta:
            for group in table.deleted_groups:
                offsets.delete_group(group)
            for topic in table.deleted_topics:
                offsets.delete_topic(topic)
        times = table.last_consume_ms or {}
        deletions = self.ctx.deletions
        whole = True
        for group, by_topic in table.offsets.items():
            if deletions.group_since(group, mark):
                whole = False
                continue
            for topic, by_queue in by_topic.items():
                if deletions.topic_since(topic, mark):
                    whole = False
                    continue
                topic_times = times.get(group, {}).get(topic, {})
                for queue_id, offset in by_queue.items():
                    offsets.commit(group, topic, queue_id, offset, topic_times.get(queue_id))
        return whole

    def _copy_subscription_groups(self, frame: Frame, mark: int) -> None:
        """Store the master's subscription groups and resend marks (a bad entry is logged and
        skipped: the master checked it, so it means a version mismatch, not input to trust)."""
        try:
            table = SubscriptionGroupTable.parse(frame.header, frame.body)
            for name, entry in table.groups.items():
                if not self.ctx.deletions.group_since(name, mark):
                    self.ctx.sub_groups.put(config_from_dict(entry))
            self.ctx.dlq_resent.merge(
                {
                    g: list(o)
                    for g, o in table.dlq_resent.items()
                    if not self.ctx.deletions.group_since(g, mark)
                },
                table.dlq_resent_covered,
            )
        except (RetryConfigError, StoreError, FieldError) as exc:
            log.error("copying the master's subscription groups failed", error=str(exc))
