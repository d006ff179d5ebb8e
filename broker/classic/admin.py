"""The admin requests mqadmin and the RocketMQ Dashboard send a broker, on the classic door:
UPDATE_AND_CREATE_TOPIC (17), GET_ALL_TOPIC_CONFIG (21), GET_BROKER_RUNTIME_INFO (28),
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200), GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201),
GET_TOPIC_STATS_INFO (202), GET_CONSUMER_CONNECTION_LIST (203) and GET_CONSUME_STATS (208).

Each calls what our own door's processor calls (topic creation through the controllers in
controller mode, :meth:`AdminProcessor.create_topic`; :func:`runtime_info`;
:func:`update_group`; :func:`queue_stats`; the consumer groups' live members) and answers in
RocketMQ's bodies (:mod:`protocol.rocketmq_remoting.admin_bodies`).
"""

from __future__ import annotations

from broker.classic.codes import classic_code
from broker.consumer_stats import queue_bounds, queue_stats
from broker.context import BrokerContext
from broker.processors.admin import AdminProcessor, runtime_info
from broker.processors.subscription_groups import update_group
from protocol.broker_requests.runtime import RuntimeInfo
from protocol.retry import SubscriptionGroupConfig
from protocol.rocketmq_remoting.admin_bodies import (
    ConnectionRow,
    ConsumeRow,
    CreateTopicHeader,
    QueueOffsets,
    encode_consume_stats,
    encode_consumer_connection,
    encode_kv_table,
    encode_subscription_groups,
    encode_topic_configs,
    encode_topic_stats,
    parse_subscription_group,
    parse_topic,
)
from protocol.rocketmq_remoting.bodies import classic_consume_type
from protocol.rocketmq_remoting.codes import RequestCode, ResponseCode
from protocol.rocketmq_remoting.frame import RemotingCommand, make_response
from protocol.rocketmq_remoting.headers import GroupHeader
from remoting.classic_door import ClassicDoor, ClassicRefusal, ClassicSession
from storage.config_files import TopicConfig

__all__ = ["ClassicAdmin", "runtime_table"]


def runtime_table(info: RuntimeInfo) -> dict[str, str]:
    """RuntimeInfo as RocketMQ's runtime KVTable: RocketMQ's key where one says the same
    (commitLogMaxOffset, commitLogMinOffset, brokerActive, putTps and getTransferedTps: one
    figure, over the last 10 s, where RocketMQ gives three; commitLogDiskRatio), our own names
    for the rest."""
    table = {
        "commitLogMaxOffset": info.max_offset,
        "commitLogMinOffset": info.min_offset,
        "brokerActive": info.master and not info.fenced,
        "putTps": f"{info.put_tps:.2f}",
        "getTransferedTps": f"{info.get_tps:.2f}",
        **(
            {"commitLogDiskRatio": f"{info.commitlog_disk_ratio:.4f}"}
            if info.commitlog_disk_ratio is not None
            else {}
        ),
        "popInflight": info.pop_inflight,
        "timerOverdueMs": info.timer_overdue_ms,
        "brokerName": info.broker_name,
        "brokerId": info.broker_id,
        "cluster": info.cluster,
        "role": "MASTER" if info.master else "SLAVE",
        "masterEpoch": info.master_epoch,
        "flushedOffset": info.flushed_offset,
        "confirmOffset": info.confirm_offset,
        "fenced": info.fenced,
        "topics": info.topics,
        "connections": info.connections,
        "pullsWaiting": info.pulls_waiting,
        "timerPending": info.timer_pending,
    }
    return {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in table.items()}


class ClassicAdmin:
    def __init__(self, ctx: BrokerContext, admin: AdminProcessor) -> None:
        self.ctx = ctx
        self.admin = admin

    def register(self, door: ClassicDoor) -> None:
        door.register(RequestCode.UPDATE_AND_CREATE_TOPIC, self.create_topic)
        door.register(RequestCode.GET_ALL_TOPIC_CONFIG, self.all_topics)
        door.register(RequestCode.GET_BROKER_RUNTIME_INFO, self.runtime_info)
        door.register(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, self.update_group)
        door.register(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, self.all_groups)
        door.register(RequestCode.GET_TOPIC_STATS_INFO, self.topic_stats)
        door.register(RequestCode.GET_CONSUMER_CONNECTION_LIST, self.connections)
        door.register(RequestCode.GET_CONSUME_STATS, self.consume_stats)

    async def create_topic(self, session: ClassicSession, req: RemotingCommand) -> RemotingCommand:
        h = CreateTopicHeader.parse(req.ext_fields)
        outcome = await self.admin.create_topic(h.topic, h.queues, h.perm, h.message_type)
        if not isinstance(outcome, TopicConfig):
            raise ClassicRefusal(classic_code(outcome[0]), outcome[1])
        return make_response(req, ResponseCode.SUCCESS)

    def all_topics(self, session: ClassicSession, req: RemotingCommand) -> RemotingCommand:
        topics = self.ctx.topics.all()
        body = encode_topic_configs(
            {name: tc.queues for name, tc in topics.items()},
            timestamp_ms=self.ctx.now_ms(),
            attrs={name: tc.attrs for name, tc in topics.items() if not tc.attrs.default},
        )
        return make_response(req, ResponseCode.SUCCESS, body=body)

    def runtime_info(self, session: ClassicSession, req: RemotingCommand) -> RemotingCommand:
        body = encode_kv_table(runtime_table(runtime_info(self.ctx)))
        return make_response(req, ResponseCode.SUCCESS, body=body)

    def update_group(self, session: ClassicSession, req: RemotingCommand) -> RemotingCommand:
        outcome = update_group(self.ctx, parse_subscription_group(req.body))
        if not isinstance(outcome, SubscriptionGroupConfig):
            raise ClassicRefusal(classic_code(outcome[0]), outcome[1])
        return make_response(req, ResponseCode.SUCCESS)

    def all_groups(self, session: ClassicSession, req: RemotingCommand) -> RemotingCommand:
        groups = {g: c.to_dict() for g, c in self.ctx.sub_groups.all().items()}
        body = encode_subscription_groups(groups, timestamp_ms=self.ctx.now_ms())
        return make_response(req, ResponseCode.SUCCESS, body=body)

    def topic_stats(self, session: ClassicSession, req: RemotingCommand) -> RemotingCommand:
        topic = parse_topic(req.ext_fields)
        bounds = queue_bounds(self.ctx, topic)
        if not bounds:
            raise ClassicRefusal(ResponseCode.TOPIC_NOT_EXIST, f"topic {topic} does not exist")
        name = self.ctx.cfg.broker_name
        rows = (QueueOffsets(topic, name, q, lo, hi) for q, (lo, hi) in enumerate(bounds))
        return make_response(req, ResponseCode.SUCCESS, body=encode_topic_stats(rows))

    def connections(self, session: ClassicSession, req: RemotingCommand) -> RemotingCommand:
        group = GroupHeader.parse(req.ext_fields).consumer_group
        members = self.ctx.groups.live(group, self.ctx.now_ms())
        if not members:
            raise ClassicRefusal(
                ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group {group} is not online"
            )
        rows = (ConnectionRow(m.client_id, m.address, m.topic) for m in members)
        # The group's consume type, as RocketMQ's broker keeps it: the latest heartbeat's.
        said = [m for m in members if m.consume_type]
        kind = max(said, key=lambda m: m.last_seen_ms).consume_type if said else ""
        body = encode_consumer_connection(rows, classic_consume_type(kind))
        return make_response(req, ResponseCode.SUCCESS, body=body)

    def consume_stats(self, session: ClassicSession, req: RemotingCommand) -> RemotingCommand:
        group = GroupHeader.parse(req.ext_fields).consumer_group
        topic = req.ext_fields.get("topic") or None
        name = self.ctx.cfg.broker_name
        rows = [
            ConsumeRow(
                s.topic,
                name,
                s.queue_id,
                s.max_offset,
                0 if s.consumer_offset is None else s.consumer_offset,  # as RocketMQ does
                s.last_consume_ms or 0,
            )
            for s in queue_stats(self.ctx, group, topic).get(group, ())
        ]
        return make_response(req, ResponseCode.SUCCESS, body=encode_consume_stats(rows))
