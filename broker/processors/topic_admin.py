"""Deleting topics and consumer groups on this broker, and a topic's queue status:
DELETE_TOPIC_IN_BROKER (215), DELETE_SUBSCRIPTIONGROUP (207) and GET_TOPIC_STATS_INFO (202)
(docs/operations.md, "Listing and deleting topics and groups").

The controllers push the deletes to every broker of every group (``rmqctl deleteTopic`` and
``deleteSubGroup`` go to them, never to one broker alone), slaves included, so a slave that
becomes master does not serve the name again. A topic's delete here:

- refuses a system topic, a group's retry or dead-letter topic (SYSTEM_RESOURCE), and unless
  ``force`` a topic that took a put within ``client_expiry_ms`` (TOPIC_IN_USE: a producer is
  live), judged by the store time of the newest record in its queues, which every replica
  holds (a new master refuses as the old one would); with ``dryRun`` it only answers whether
  it would delete;
- forgets its topic config and every group's offsets on it, and retires its ConsumeQueues
  (:meth:`storage.store.MessageStore.retire_topic`): the CommitLog keeps the bytes until
  retention, a topic of that name created again starts empty, and a send to the name answers
  TOPIC_NOT_EXIST (it is not created by a send again: ``auto_create_topic`` does not apply);
- answers where each queue ended, which the controllers hand to the group's other replicas.

A group's delete forgets its settings, its offsets on every topic, its retry topic (retired as
above) and, with ``removeDlq``, its dead-letter topic and resend marks.
"""

from __future__ import annotations

from collections.abc import Mapping

import structlog

from broker.context import BrokerContext
from protocol.codes import RequestCode, ResponseCode
from protocol.message import iter_records
from protocol.remoting import Frame, response
from protocol.retry import dlq_topic, retry_topic
from protocol.topic_admin import (
    DeleteGroupInBroker,
    DeleteTopicInBroker,
    QueueStatus,
    TopicRetired,
    TopicStats,
    TopicStatsQuery,
    group_delete_refusal,
    topic_delete_refusal,
)
from remoting.server import Connection, RemotingServer, error_response
from storage.errors import StoreError
from storage.store import GetStatus

__all__ = ["TopicAdminProcessor", "delete_group", "delete_topic", "topic_stats"]

log = structlog.get_logger(__name__)

Refusal = tuple[int, str]


class TopicAdminProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    def register(self, server: RemotingServer) -> None:
        server.register(RequestCode.DELETE_TOPIC_IN_BROKER, self.delete_topic)
        server.register(RequestCode.DELETE_SUBSCRIPTIONGROUP, self.delete_group)
        server.register(RequestCode.GET_TOPIC_STATS_INFO, self.topic_stats)

    def delete_topic(self, conn: Connection, req: Frame) -> Frame:
        ask = DeleteTopicInBroker.parse(req.header, req.body)
        outcome = delete_topic(self.ctx, ask.topic, ask.force, ask.retire_at, dry_run=ask.dry_run)
        if not isinstance(outcome, TopicRetired):
            return error_response(req, *outcome)
        return response(req, ResponseCode.SUCCESS, *outcome.encode())

    def delete_group(self, conn: Connection, req: Frame) -> Frame:
        ask = DeleteGroupInBroker.parse(req.header, req.body)
        refused = delete_group(self.ctx, ask.group, ask.remove_dlq)
        if refused is not None:
            return error_response(req, *refused)
        return response(req, ResponseCode.SUCCESS)

    def topic_stats(self, conn: Connection, req: Frame) -> Frame:
        topic = TopicStatsQuery.parse(req.header, req.body).topic
        stats = topic_stats(self.ctx, topic)
        if stats is None:
            return error_response(
                req,
                ResponseCode.TOPIC_NOT_EXIST,
                f"topic {topic} does not exist on {self.ctx.cfg.broker_name}",
            )
        return response(req, ResponseCode.SUCCESS, *stats.encode())


def _in_use(ctx: BrokerContext, topic: str) -> Refusal | None:
    last = _last_put_ms(ctx, topic)
    if not last:
        return None
    ago = ctx.now_ms() - last
    if ago > ctx.cfg.client_expiry_ms:
        return None
    return (
        ResponseCode.TOPIC_IN_USE,
        f"topic {topic} took a send {max(ago, 0)} ms ago on {ctx.cfg.broker_name} "
        f"({ctx.cfg.listen}): a producer is live; stop it, or delete with --force",
    )


def _last_put_ms(ctx: BrokerContext, topic: str) -> int:
    """When ``topic`` last took a put (epoch ms; 0: none in its queues): the store time of the
    newest record in its queues. It travels in the CommitLog, so every replica reads the same:
    a new master after a failover, or a restarted broker, answers as the one that took the sends
    would, and the put path keeps no table of it."""
    store = ctx.store
    newest = 0
    for queue_id in store.queue_ids(topic):
        lo = store.queue_min_offset(topic, queue_id)
        hi = store.queue_max_offset(topic, queue_id)
        newest = max(newest, _newest_store_time(ctx, topic, queue_id, lo, hi))
    return newest


def delete_topic(
    ctx: BrokerContext,
    topic: str,
    force: bool,
    retire_at: Mapping[int, int],
    *,
    dry_run: bool = False,
) -> TopicRetired | Refusal:
    """Delete ``topic`` here (see the module docstring): where its queues ended, or the code
    and remark of a refusal (nothing changed then)."""
    refusal = topic_delete_refusal(topic)
    if refusal is not None:
        return ResponseCode.SYSTEM_RESOURCE, refusal
    store = ctx.store
    known = ctx.topics.get(topic) is not None or bool(store.queue_ids(topic))
    if not known and not retire_at:
        return (
            ResponseCode.TOPIC_NOT_EXIST,
            f"topic {topic} does not exist on {ctx.cfg.broker_name}",
        )
    if not force:
        busy = _in_use(ctx, topic)
        if busy is not None:
            return busy
    if dry_run:
        return TopicRetired()
    return TopicRetired(retired=_retire(ctx, topic, retire_at))


def _retire(ctx: BrokerContext, topic: str, retire_at: Mapping[int, int]) -> dict[int, int]:
    """Forget ``topic``'s config and offsets and retire its queues: where they ended."""
    ctx.deletions.topic_deleted(topic)
    had_config = ctx.topics.get(topic) is not None
    ctx.topics.delete(topic)
    ctx.offsets.delete_topic(topic)
    marks = ctx.store.retire_topic(topic, retire_at)
    ctx.metrics.traffic.forget(topic)  # its series end; created again, it counts from 0
    log.info("topic deleted", topic=topic, queues_ended_at=marks)
    if had_config:
        for listener in ctx.topic_listeners:  # the routes registered no longer list it
            listener()
    return marks


def delete_group(ctx: BrokerContext, group: str, remove_dlq: bool) -> Refusal | None:
    """Delete consumer group ``group`` here: None, or the code and remark of a refusal
    (SYSTEM_RESOURCE; SUBSCRIPTION_GROUP_NOT_EXIST when this broker knows nothing of it)."""
    refusal = group_delete_refusal(group)
    if refusal is not None:
        return ResponseCode.SYSTEM_RESOURCE, refusal
    retry, dlq = retry_topic(group), dlq_topic(group)
    topics = [retry, dlq] if remove_dlq else [retry]
    known = (
        ctx.sub_groups.configured(group) is not None
        or group in ctx.offsets.groups()
        or any(ctx.topics.get(t) is not None or ctx.store.queue_ids(t) for t in topics)
    )
    if not known:
        return (
            ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
            f"consumer group {group} is not known on {ctx.cfg.broker_name}",
        )
    ctx.deletions.group_deleted(group)
    try:
        ctx.sub_groups.delete(group)
        ctx.offsets.delete_group(group)
        for topic in topics:
            if ctx.topics.get(topic) is not None or ctx.store.queue_ids(topic):
                _retire(ctx, topic, {})
        if remove_dlq:
            ctx.dlq_resent.forget(group)
    except StoreError as exc:
        log.error("deleting a consumer group failed", group=group, error=str(exc))
        return ResponseCode.SYSTEM_ERROR, f"deleting group {group} failed: {exc}"
    log.info("consumer group deleted", group=group, dlq_removed=remove_dlq)
    return None


def topic_stats(ctx: BrokerContext, topic: str) -> TopicStats | None:
    """Each queue's min and max offset and the store time of its newest message (0: none);
    None when the topic is unknown here."""
    store = ctx.store
    tc = ctx.topics.get(topic)
    ids = set(store.queue_ids(topic))
    if tc is not None:
        ids.update(range(tc.queues))
    if not ids:
        return None
    rows = []
    for queue_id in sorted(ids):
        lo = store.queue_min_offset(topic, queue_id)
        hi = store.queue_max_offset(topic, queue_id)
        rows.append(QueueStatus(queue_id, lo, hi, _newest_store_time(ctx, topic, queue_id, lo, hi)))
    return TopicStats(queues=tuple(rows))


def _newest_store_time(ctx: BrokerContext, topic: str, queue_id: int, lo: int, hi: int) -> int:
    if hi <= lo:
        return 0
    got = ctx.store.get(topic, queue_id, hi - 1, 1, 1 << 22)
    if got.status is not GetStatus.FOUND:
        return 0
    newest = 0
    for record in iter_records(got.body):
        newest = max(newest, record.store_timestamp)
    return newest
