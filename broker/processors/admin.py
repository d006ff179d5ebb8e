"""Topics, consumer offsets, queue offsets and runtime figures.

In controller mode a topic is created (or grown) in the controllers' replicated state first,
and only then here: UPDATE_AND_CREATE_TOPIC is forwarded to the active controller and answered
once the controllers committed it, so a topic acknowledged to a client survives its master
dying a moment later (the new master gets it from the controllers). The controllers push the
same request to every broker of the group; it changes nothing there and creates it here.
"""

from __future__ import annotations

import shutil

from broker.context import BrokerContext
from protocol.broker_requests.admin import AllTopicsQuery, CreateTopic, TopicCreated, TopicTable
from protocol.broker_requests.runtime import RuntimeInfo, RuntimeInfoQuery
from protocol.codes import RequestCode, ResponseCode
from protocol.controller_requests.topics import UpdateTopic
from protocol.pull import (
    AllConsumerOffsetsQuery,
    ConsumerOffsetQuery,
    ConsumerOffsetTable,
    ConsumerOffsetUpdate,
    MaxOffsetQuery,
    MinOffsetQuery,
    OffsetSearch,
    offset_answer,
)
from protocol.remoting import Frame, response
from protocol.topic_attrs import MessageType, TopicAttrs
from remoting.client import ConnectionPool
from remoting.errors import RemotingError, ResponseError
from remoting.failover import AddressFailover
from remoting.server import Connection, RemotingServer, error_response
from storage.config_files import ConsumerOffsetStore, TopicConfig

CONTROLLER_TIMEOUT = 3.0
OFFSET_COPY_PAGE = 256
"""Consumer groups a slave's copy of the offsets changed since its counter takes at most per
answer (it asks again for the rest): an answer holds the loop for a page only (issue 34)."""
# Controller answers that mean "not now" (no leader yet, not committed in time): a client of
# this broker is told to retry, never handed a controller-only code.
_CONTROLLERS_BUSY = frozenset(
    {
        ResponseCode.SYSTEM_BUSY,
        ResponseCode.SERVICE_NOT_AVAILABLE,
        ResponseCode.CONTROLLER_NOT_LEADER,
        ResponseCode.TOO_MANY_IN_FLIGHT,
    }
)


class AdminProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self._controllers: AddressFailover | None = None

    def close(self) -> None:
        if self._controllers is not None:
            self._controllers.pool.close()
            self._controllers = None

    def register(self, server: RemotingServer) -> None:
        server.register(RequestCode.UPDATE_AND_CREATE_TOPIC, self.update_topic)
        server.register(RequestCode.GET_ALL_TOPIC_CONFIG, self.all_topics)
        server.register(RequestCode.QUERY_CONSUMER_OFFSET, self.query_offset)
        server.register(RequestCode.UPDATE_CONSUMER_OFFSET, self.update_offset)
        server.register(RequestCode.GET_MIN_OFFSET, self.min_offset)
        server.register(RequestCode.GET_MAX_OFFSET, self.max_offset)
        server.register(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, self.search_offset)
        server.register(RequestCode.GET_BROKER_RUNTIME_INFO, self.runtime_info)
        server.register(RequestCode.GET_ALL_CONSUMER_OFFSET, self.all_offsets)

    async def update_topic(self, conn: Connection, req: Frame) -> Frame:
        create = CreateTopic.parse(req.header, req.body)
        outcome = await self.create_topic(
            create.topic, create.queues, create.perm, create.message_type
        )
        if not isinstance(outcome, TopicConfig):
            return error_response(req, *outcome)
        created = TopicCreated(topic=outcome.topic, queues=outcome.queues, attrs=outcome.attrs)
        return response(req, ResponseCode.SUCCESS, *created.encode())

    async def create_topic(
        self,
        topic: str,
        queues: int | None,
        perm: int | None = None,
        message_type: str | None = None,
    ) -> TopicConfig | tuple[int, str]:
        """Create or grow ``topic`` (``queues`` None: the default count) and set its
        permission and message type (None: keep them; checked by the caller), through the
        controllers in controller mode: its config, or the code and remark to answer (nothing
        created then). Both doors' UPDATE_AND_CREATE_TOPIC."""
        count = self.ctx.cfg.default_topic_queues if queues is None else queues
        tc = self.ctx.topics.get(topic)
        if tc is not None and count < tc.queues:
            return (
                ResponseCode.BAD_REQUEST,
                f"topic {topic} has {tc.queues} queues; shrinking is not supported",
            )
        if self.ctx.controller_mode:
            refused = await self._commit_with_controllers(topic, count, perm, message_type)
            if refused is not None:
                return refused
        old = TopicAttrs() if tc is None else tc.attrs
        attrs = TopicAttrs(
            old.perm if perm is None else perm,
            old.message_type if message_type is None else MessageType(message_type),
        )
        return self.ctx.create_topic(topic, count, attrs)

    async def _commit_with_controllers(
        self, topic: str, queues: int, perm: int | None, message_type: str | None
    ) -> tuple[int, str] | None:
        """UPDATE_AND_CREATE_TOPIC on the controllers for this broker's group: None once they
        committed it, else the code and remark to answer (nothing is created here then)."""
        cfg = self.ctx.cfg
        if self._controllers is None:
            self._controllers = AddressFailover(
                cfg.controller_addresses,
                ConnectionPool(CONTROLLER_TIMEOUT, self.ctx.cluster_credentials),
                CONTROLLER_TIMEOUT,
            )
        ask = UpdateTopic(
            topic=topic,
            queues=queues,
            cluster=cfg.cluster,
            broker_name=cfg.broker_name,
            perm=perm,
            message_type=message_type,
        )
        try:
            await self._controllers.call(ask.code, *ask.encode())
        except ResponseError as exc:
            if exc.code in _CONTROLLERS_BUSY:
                return (
                    ResponseCode.SERVICE_NOT_AVAILABLE,
                    f"topic {topic} not created: the controllers are busy ({exc}); retry",
                )
            return exc.code, f"the controllers refused topic {topic}: {exc.remark or exc}"
        except RemotingError as exc:
            return (
                ResponseCode.SERVICE_NOT_AVAILABLE,
                f"topic {topic} not created: the controllers did not commit it ({exc}); retry",
            )
        return None

    def all_topics(self, conn: Connection, req: Frame) -> Frame:
        ask = AllTopicsQuery.parse(req.header, req.body)
        store = self.ctx.topics
        incarnation, version = store.incarnation, store.version
        if (ask.since_incarnation, ask.since_version) == (incarnation, version):
            # A slave's copy every second: its table is this one (not encoded again, issue 34).
            table = TopicTable(queues={}, incarnation=incarnation, version=version, unchanged=True)
            return response(req, ResponseCode.SUCCESS, *table.encode())
        topics = store.all()
        table = TopicTable(
            queues={name: tc.queues for name, tc in topics.items()},
            attrs={name: tc.attrs for name, tc in topics.items() if not tc.attrs.default},
            incarnation=incarnation,
            version=version,
        )
        return response(req, ResponseCode.SUCCESS, *table.encode())

    def query_offset(self, conn: Connection, req: Frame) -> Frame:
        query = ConsumerOffsetQuery.parse(req.header, req.body)
        offset = self.ctx.offsets.query(query.group, query.topic, query.queue_id)
        if offset is None:
            return error_response(req, ResponseCode.QUERY_NOT_FOUND, "no committed offset")
        return response(req, ResponseCode.SUCCESS, offset_answer(offset))

    def update_offset(self, conn: Connection, req: Frame) -> Frame:
        update = ConsumerOffsetUpdate.parse(req.header, req.body)
        group, topic, queue_id, offset = update.group, update.topic, update.queue_id, update.offset
        offsets = self.ctx.offsets
        # The last consume time is when the offset last moved (a repeated commit keeps it).
        moved = offsets.query(group, topic, queue_id) != offset
        offsets.commit(group, topic, queue_id, offset, self.ctx.now_ms() if moved else None)
        return response(req, ResponseCode.SUCCESS)

    def min_offset(self, conn: Connection, req: Frame) -> Frame:
        query = MinOffsetQuery.parse(req.header, req.body)
        offset = self.ctx.store.queue_min_offset(query.topic, query.queue_id)
        return response(req, ResponseCode.SUCCESS, offset_answer(offset))

    def max_offset(self, conn: Connection, req: Frame) -> Frame:
        query = MaxOffsetQuery.parse(req.header, req.body)
        topic, queue_id = query.topic, query.queue_id
        store = self.ctx.store
        if query.committed:
            # Only what consumers may read: records up to the confirm offset (RocketMQ 5's
            # GetMaxOffsetRequestHeader.committed).
            offset = store.queue_visible_max_offset(topic, queue_id, self.ctx.visible_offset())
        else:
            offset = store.queue_max_offset(topic, queue_id)
        return response(req, ResponseCode.SUCCESS, offset_answer(offset))

    def search_offset(self, conn: Connection, req: Frame) -> Frame:
        search = OffsetSearch.parse(req.header, req.body)
        offset = self.ctx.store.offset_by_timestamp(search.topic, search.queue_id, search.timestamp)
        return response(req, ResponseCode.SUCCESS, offset_answer(offset))

    def all_offsets(self, conn: Connection, req: Frame) -> Frame:
        """Every committed consumer offset: ``{group: {topic: {queueId: offset}}}`` (slaves copy
        it). With header ``withTimes`` true the body is ``{"offsets": that, "lastConsumeMs":
        the same shape of epoch ms}`` and the answer's header says ``withTimes`` true. With
        ``sinceIncarnation``/``sinceCounter`` of an earlier answer: only the groups changed
        since, when this broker can tell (docs/protocol.md)."""
        query = AllConsumerOffsetsQuery.parse(req.header, req.body)
        table = offset_copy(self.ctx.offsets, query, OFFSET_COPY_PAGE)
        return response(req, ResponseCode.SUCCESS, *table.encode())

    def runtime_info(self, conn: Connection, req: Frame) -> Frame:
        RuntimeInfoQuery.parse(req.header, req.body)
        return response(req, ResponseCode.SUCCESS, *runtime_info(self.ctx).encode())


def offset_copy(
    offsets: ConsumerOffsetStore, query: AllConsumerOffsetsQuery, page: int
) -> ConsumerOffsetTable:
    """GET_ALL_CONSUMER_OFFSET's answer: the whole table, or with ``since…`` the changes (at
    most ``page`` groups) when ``offsets`` can tell them."""
    copy = offsets.copy_since(query.since_incarnation, query.since_counter, page)
    return ConsumerOffsetTable(
        offsets=copy.offsets,
        last_consume_ms=copy.times if query.with_times or copy.delta else None,
        incarnation=copy.incarnation,
        counter=copy.counter,
        delta=copy.delta,
        deleted_groups=tuple(copy.deleted_groups),
        deleted_topics=tuple(copy.deleted_topics),
        more=copy.more,
    )


def runtime_info(ctx: BrokerContext) -> RuntimeInfo:
    """The broker's role, offsets, load and endpoints (both doors' GET_BROKER_RUNTIME_INFO)."""
    store = ctx.store
    role = ctx.role
    rates, totals = ctx.stats.rates(), ctx.stats.latest
    pop = ctx.pop.state if role.is_master else None
    next_due = ctx.timer.wheel.next_due_ms() if ctx.timer.wheel is not None else None
    try:
        disk = shutil.disk_usage(ctx.cfg.data_dir)
        disk_ratio: float | None = disk.used / disk.total if disk.total else None
    except OSError:
        disk_ratio = None
    return RuntimeInfo(
        broker_name=ctx.cfg.broker_name,
        cluster=ctx.cfg.cluster,
        address=ctx.cfg.listen,
        broker_id=role.broker_id,
        master=role.is_master,
        master_epoch=role.master_epoch,
        max_offset=store.max_offset,
        min_offset=store.min_offset,
        flushed_offset=ctx.service.flushed_offset,
        confirm_offset=ctx.ha.confirm_offset if ctx.ha is not None else store.confirm_offset,
        ha_address=ctx.ha.address if ctx.ha is not None else None,
        fenced=role.fenced,
        topics=len(ctx.topics.all()),
        connections=ctx.connections(),
        pulls_waiting=ctx.waiters.waiting,
        timer_pending=ctx.timer.pending_count,
        grpc_endpoint=ctx.grpc_endpoints.get("plain"),
        grpc_tls_endpoint=ctx.grpc_endpoints.get("tls"),
        put_tps=rates.put_tps,
        get_tps=rates.get_tps,
        stats_window_ms=rates.window_ms,
        put_total=sum(totals.put.values()),
        get_total=sum(totals.got.values()),
        commitlog_disk_ratio=disk_ratio,
        pop_inflight=pop.inflight() if pop is not None else 0,
        timer_overdue_ms=max(0, ctx.now_ms() - next_due) if next_due is not None else 0,
    )
